"""ONNX sampling ops: GridSample onto myelin's GridSample (myelin/ops/sampling.py), and
AffineGrid written as a MatMul of a constant grid of base coordinates with the transposed
affine matrices.

GridSample's opset 16 modes ``bilinear``/``bicubic`` are opset 20's ``linear``/``cubic``.
"""

import numpy as np

from myelin.flow import dtypes
from myelin.importers.onnx.converters import converter

_MODES = {"bilinear": "linear", "bicubic": "cubic"}


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


@converter("GridSample")
def _grid_sample(ctx):
    mode = _text(ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear"))
    return ctx.op("GridSample", [ctx.input(0), ctx.input(1)],
                  {"mode": _MODES.get(mode, mode),
                   "padding_mode": _text(ctx.attr("padding_mode", "zeros")),
                   "align_corners": bool(ctx.attr("align_corners", 0))})


def _base_coordinates(size, align_corners):
    """The normalized coordinates of ``size`` positions in [-1, 1]."""
    if size == 1:   # ONNX's reference: -1 with align_corners, the center 0 without
        return np.full(1, -1.0 if align_corners else 0.0)
    step = 2.0 / (size - 1) if align_corners else 2.0 / size
    start = -1.0 if align_corners else -1.0 + step / 2
    return start + step * np.arange(size)


@converter("AffineGrid")
def _affine_grid(ctx):
    """theta [N, r, r+1] and size (N, C, D1..Dr) -> grid [N, D1..Dr, r]: each output
    position's homogeneous base coordinates (x, y[, z], 1) times theta transposed."""
    theta = ctx.input(0)
    size = ctx.ints(1)
    align = bool(ctx.attr("align_corners", 0))
    batch, spatial = size[0], size[2:]
    rank = len(spatial)
    if theta.shape != (batch, rank, rank + 1):
        raise ctx.error(f"theta has shape {list(theta.shape)}, expected "
                        f"[{batch}, {rank}, {rank + 1}] for size {size}")
    axes = [_base_coordinates(d, align) for d in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")
    # The last axis of the grid lists coordinates innermost first (x, y, z), then 1.
    base = np.stack([mesh[rank - 1 - k] for k in range(rank)] + [np.ones_like(mesh[0])],
                    axis=-1).reshape(-1, rank + 1)
    points = ctx.const(base.astype(dtypes.to_numpy(theta.dtype)), theta.dtype)
    theta_t = ctx.op("Transpose", [theta], {"perm": [0, 2, 1]})      # [N, r+1, r]
    grid = ctx.op("MatMul", [points, theta_t])                        # [N, P, r]
    return ctx.reshape(grid, [batch] + list(spatial) + [rank])
