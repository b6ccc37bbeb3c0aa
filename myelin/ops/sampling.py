"""Sampling and running-product ops: GridSample (ONNX semantics, opsets 16 and 20+) and CumProd.

* ``GridSample(x, grid)``: x is ``[N, C, D1, ..., Dr]`` (r >= 1 spatial axes), grid is
  ``[N, O1, ..., Or, r]`` of normalized coordinates in [-1, 1], its last axis in reverse axis
  order (``grid[..., 0]`` indexes the innermost axis Dr, as x/y in 2-D). The output is
  ``[N, C, O1, ..., Or]``. Attributes:

  - ``mode``: ``linear`` (default; ONNX 16's ``bilinear``), ``nearest`` or ``cubic``
    (``bicubic``: Keys' cubic with a = -0.75 over 4 taps per axis).
  - ``padding_mode``: ``zeros`` (taps outside the input read 0), ``border`` (coordinates and
    taps clamped to the edge) or ``reflection`` (coordinates and taps mirrored at the border).
  - ``align_corners``: -1 and 1 are the centers of the corner elements (true) or their outer
    edges (false).

  The source coordinate along an axis of size L is ``(g + 1) / 2 * (L - 1)`` (align_corners) or
  ``((g + 1) * L - 1) / 2``; nearest rounds it half to even. A coordinate outside the border
  ``[0, L-1]`` (align_corners) or ``[-0.5, L-0.5]`` is clamped to ``[0, L-1]`` (border) or
  reflected into the border (reflection) before the taps are taken, as ONNX's reference and
  PyTorch do; the taps are then padded per ``padding_mode``. Cubic with border padding clamps
  only the taps, not the coordinate, as PyTorch and ONNX Runtime do (ONNX's reference clamps
  both; no ONNX test case covers it). Reflecting the coordinate as well as the taps gives the
  same result as reflecting the taps alone. Coordinates are clamped to
  ``[-8, L+8]`` (NaN to -8) before they are turned into indices, so no grid value reads outside
  x. With align_corners and L = 1, reflection maps every coordinate to 0.

* ``CumProd(x)``: running product along ``axis``; ``exclusive`` leaves out the element itself
  (the first output is 1), ``reverse`` multiplies from the end (ONNX CumProd, opset 26).

:func:`grid_taps` computes the per-axis tap indices, weights and validity from grid values;
the float64 reference below applies them, and the CPU kernel emits the same arithmetic.
"""

import itertools

import numpy as np

from myelin.ops.common import FLOAT, NUMERIC, check_dtype, error, normalize_axis
from myelin.ops.indexing import scan_infer
from myelin.ops.registry import Kind, OpDef, TensorType, attribute, register

GRID_MODES = ("linear", "nearest", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
CUBIC_A = -0.75
GUARD = 8.0     # coordinates are clamped to [-GUARD, L + GUARD] before they become indices


# GridSample.
def grid_params(op):
    """(mode, padding_mode, align_corners) of a GridSample op, checked."""
    mode = attribute(op, "mode")
    padding = attribute(op, "padding_mode")
    if mode not in GRID_MODES:
        raise error(op, f"attribute mode={mode!r} must be one of {', '.join(GRID_MODES)}")
    if padding not in PADDING_MODES:
        raise error(op, f"attribute padding_mode={padding!r} must be one of "
                        f"{', '.join(PADDING_MODES)}")
    return mode, padding, attribute(op, "align_corners")


def borders(size, align_corners):
    """(low, high) of the coordinate range of an axis of ``size`` elements."""
    return (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)


def reflect(x, low, high):
    """``x`` mirrored at ``low`` and ``high`` until it lies between them (float64 arrays)."""
    span = high - low
    if span <= 0:
        return np.full_like(x, low)
    below, above = x < low, x > high
    dx = np.where(below, low - x, x - high)
    turns = np.floor(dx / span)
    rest = dx - turns * span
    even = np.fmod(turns, 2) == 0
    from_low, from_high = low + rest, high - rest
    mirrored = np.where(below, np.where(even, from_low, from_high),
                        np.where(even, from_high, from_low))
    return np.where(below | above, mirrored, x)


def cubic_weights(t):
    """Keys' cubic weights of the taps at -1, 0, 1, 2 for fractions ``t`` in [0, 1)."""
    a = CUBIC_A
    u, v, w = t + 1, 1 - t, 2 - t
    return [((a * u - 5 * a) * u + 8 * a) * u - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * v - (a + 3)) * v * v + 1,
            ((a * w - 5 * a) * w + 8 * a) * w - 4 * a]


def source_coordinate(g, size, mode, padding, align_corners):
    """The (padded, guarded) source coordinate along an axis of ``size`` of grid values ``g``."""
    if align_corners:
        x = (g + 1) / 2 * (size - 1)
    else:
        x = ((g + 1) * size - 1) / 2
    if mode == "nearest":
        x = np.rint(x)
    low, high = borders(size, align_corners)
    outside = (x < low) | (x > high)
    if padding == "border" and mode != "cubic":
        x = np.where(outside, np.clip(x, 0, size - 1), x)
    elif padding == "reflection":
        x = np.where(outside, reflect(x, low, high), x)
    return np.fmin(np.fmax(x, -GUARD), size + GUARD)


def grid_taps(g, size, mode, padding, align_corners):
    """The taps of grid values ``g`` along an axis of ``size``: a list of ``(index, weight,
    valid)`` arrays of g's shape, indices within [0, size)."""
    x = source_coordinate(np.asarray(g, dtype=np.float64), size, mode, padding, align_corners)
    base = np.floor(x)
    if mode == "nearest":
        offsets, weights = [0], [np.ones_like(x)]
    elif mode == "linear":
        t = x - base
        offsets, weights = [0, 1], [1 - t, t]
    else:
        offsets, weights = [-1, 0, 1, 2], cubic_weights(x - base)
    low, high = borders(size, align_corners)
    taps = []
    for offset, weight in zip(offsets, weights):
        index = base + offset
        valid = np.ones(x.shape, dtype=bool)
        if padding == "zeros":
            valid = (index >= 0) & (index < size)
        elif padding == "reflection":
            index = np.trunc(reflect(index, low, high))
        index = np.clip(index, 0, size - 1).astype(np.int64)
        taps.append((index, weight, valid))
    return taps


def _grid_sample_infer(op):
    x, grid = op.inputs
    check_dtype(op, x, NUMERIC)
    check_dtype(op, grid, FLOAT)
    grid_params(op)
    if x.rank < 3:
        raise error(op, f"input {x.name} must have rank 3 or more ([N, C, spatial...]), got "
                        f"shape {list(x.shape)}")
    rank = x.rank - 2
    if grid.rank != x.rank or grid.shape[0] != x.shape[0] or grid.shape[-1] != rank:
        raise error(op, f"grid {grid.name} must have shape [{x.shape[0]}, out..., {rank}] "
                        f"(rank {x.rank}) for input shape {list(x.shape)}, got "
                        f"{list(grid.shape)}")
    out = (x.shape[0], x.shape[1]) + tuple(grid.shape[1:-1])
    if 0 in x.shape[2:] and int(np.prod(out)):
        raise error(op, f"cannot sample from input {x.name} of shape {list(x.shape)}, which "
                        f"has an empty spatial axis")
    if mode_of(op) != "nearest":
        check_dtype(op, x, FLOAT)
    return [TensorType(x.dtype, out)]


def mode_of(op):
    return grid_params(op)[0]


def _grid_sample_reference(op, inputs):
    x, grid = inputs
    mode, padding, align = grid_params(op)
    batch, channels = x.shape[:2]
    spatial = x.shape[2:]
    rank = len(spatial)
    out_spatial = grid.shape[1:-1]
    out = np.zeros((batch, channels) + tuple(out_spatial), dtype=np.float64)
    if out.size == 0:
        return [out]
    per_axis = [grid_taps(grid[..., rank - 1 - axis], spatial[axis], mode, padding, align)
                for axis in range(rank)]
    n = np.arange(batch).reshape((batch,) + (1,) * rank)
    result = np.zeros((batch,) + tuple(out_spatial) + (channels,), dtype=np.float64)
    for combination in itertools.product(*per_axis):
        weight = np.ones(grid.shape[:-1])
        valid = np.ones(grid.shape[:-1], dtype=bool)
        for _, w, ok in combination:
            weight = weight * w
            valid = valid & ok
        # x[n, :, i1, ..., ir] with the advanced indices first: [N, O..., C].
        picked = x[(n, slice(None)) + tuple(index for index, _, _ in combination)]
        picked = np.where(valid[..., None], picked, 0.0)
        result = result + weight[..., None] * picked
    return [np.ascontiguousarray(np.moveaxis(result, -1, 1))]


# CumProd.
def _cumprod_reference(op, inputs):
    x = inputs[0]
    axis = normalize_axis(op, attribute(op, "axis"), x.ndim)
    if attribute(op, "reverse"):
        x = np.flip(x, axis)
    if attribute(op, "exclusive"):
        ones = np.ones_like(np.take(x, [0], axis=axis)) if x.shape[axis] else x
        x = np.concatenate([ones, np.take(x, np.arange(x.shape[axis] - 1), axis=axis)],
                           axis=axis) if x.shape[axis] else x
    total = np.cumprod(x, axis=axis, dtype=x.dtype)
    if attribute(op, "reverse"):
        total = np.flip(total, axis)
    return [np.ascontiguousarray(total)]


def _define_all():
    register(OpDef("GridSample", Kind.OPAQUE, _grid_sample_infer, _grid_sample_reference,
                   attrs={"mode": "linear", "padding_mode": "zeros", "align_corners": False},
                   inputs=(2, 2),
                   doc="x sampled at the normalized grid coordinates (linear, nearest or cubic; "
                       "zeros, border or reflection padding), as ONNX GridSample"))
    register(OpDef("CumProd", Kind.OPAQUE, scan_infer, _cumprod_reference,
                   attrs={"axis": 0, "exclusive": False, "reverse": False},
                   doc="running product along axis (exclusive: without the element; reverse: "
                       "from the end)"))


_define_all()
