"""ONNX ops whose output shape depends on the values of their inputs, computed in NumPy on the
host exactly as ONNX Runtime computes them: NonZero, NonMaxSuppression, Unique, Compress.

These ops have no myelin op, and why they live here rather than in the registry: a myelin
flow is compiled for static shapes, and a registry entry's shape rule gives an op's output
shapes from its input shapes, which these ops cannot do. They are ONNX semantics (attributes,
optional inputs, ONNX Runtime's output order) that only the ONNX importer uses, in two places:
a converter computes one at import when the inputs deciding its shape are constants
(converters/dynamic.py), and a staged model (:mod:`.staged`) runs one between compiled
stages. Both call the one function registered here per op type, with the node's attributes
(as :func:`proto.attributes` gives them) and its input arrays (None for an absent optional
one); each returns the list of the node's output arrays.

- **NonZero**: the indices of the nonzero elements (NaN counts as nonzero), int64
  ``[rank, count]`` in row-major order; a scalar is read as one element (``[1, count]``).
- **NonMaxSuppression**: per batch, then per class, the boxes whose score is above
  ``score_threshold`` (when given), taken by decreasing score (the lower index first on ties),
  each kept unless its intersection over union with a box already kept for that class is
  above ``iou_threshold``, until ``max_output_boxes_per_class`` are kept (absent or 0: none).
  Boxes are corners ``[y1, x1, y2, x2]`` in either order (``center_point_box`` 0) or
  ``[x_center, y_center, width, height]`` (1). Arithmetic in float32, in ONNX Runtime's order;
  a pair with an empty intersection or a box of no area (or NaN) never suppresses. Output:
  int64 ``[selected, 3]`` rows (batch, class, box). NaN scores come last (ONNX Runtime's
  order for them is unspecified).
- **Unique**: the unique values (``axis`` absent: of the flattened input) or unique slices
  along ``axis``, sorted (``sorted`` 1, slices lexicographically) or in order of first
  occurrence, with the index of each one's first occurrence, each element's (slice's) index
  in the output and the counts. NaNs count as one value, as in NumPy (ONNX Runtime's Unique
  merges NaN with every value).
- **Compress**: the slices along ``axis`` (absent: the elements of the flattened input) whose
  condition entry is true; a condition shorter than the axis leaves out the rest, entries past
  its end are ignored, as in ONNX Runtime.
"""

import dataclasses
from typing import Callable

import numpy as np

from myelin.errors import InputError, ShapeError


@dataclasses.dataclass(frozen=True)
class HostOp:
    """An ONNX op computed on the host. ``compute(attrs, inputs, where)`` returns the output
    arrays (``where`` names the node in messages); ``shape_inputs`` are the indices of the
    inputs whose values decide the output shapes."""

    type: str
    compute: Callable
    shape_inputs: tuple


_HOST_OPS = {}


def host_op(op_type, shape_inputs):
    """Decorator registering ``compute(attrs, inputs, where)`` as ONNX op ``op_type``."""
    def register(fn):
        _HOST_OPS[op_type] = HostOp(op_type, fn, tuple(shape_inputs))
        return fn
    return register


def find(op_type, domain=""):
    """The host op of ONNX op ``op_type`` (ai.onnx), or None."""
    if domain not in ("", "ai.onnx"):
        return None
    return _HOST_OPS.get(op_type)


def _scalar(array, where, what, default):
    """The one element of ``array`` (``default`` if it is absent)."""
    if array is None:
        return default
    array = np.asarray(array)
    if array.size != 1:
        raise ShapeError(f"{where}: {what} must have one element, got shape "
                         f"{list(array.shape)}")
    return array.reshape(-1)[0]


def _axis(attrs, rank, where):
    axis = attrs.get("axis")
    if axis is None:
        return None
    if not -rank <= axis < rank:
        raise ShapeError(f"{where}: axis {axis} is out of range for rank {rank}")
    return axis % rank


@host_op("NonZero", shape_inputs=(0,))
def nonzero(attrs, inputs, where):
    x = np.asarray(inputs[0])
    return [np.stack(np.nonzero(x.reshape(-1) if x.ndim == 0 else x)).astype(np.int64)]


@host_op("Unique", shape_inputs=(0,))
def unique(attrs, inputs, where):
    x = np.asarray(inputs[0])
    axis = _axis(attrs, x.ndim, where)
    if axis is None:
        x, axis = x.reshape(-1), 0
    if x.shape[axis] == 0:
        empty = np.zeros(0, np.int64)
        return [x, empty, empty, empty]
    values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                               return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not attrs.get("sorted", 1):
        order = np.argsort(first, kind="stable")
        place = np.empty_like(order)
        place[order] = np.arange(order.size)
        values, first, counts = np.take(values, order, axis=axis), first[order], counts[order]
        inverse = place[inverse]
    return [values] + [a.astype(np.int64) for a in (first, inverse, counts)]


def compress_selection(shape, attrs, condition, where):
    """What Compress keeps of an input of ``shape``: (axis, indices along it); axis None
    for the elements of the flattened input."""
    condition = np.asarray(condition)
    if condition.ndim != 1:
        raise ShapeError(f"{where}: the condition must be 1-D, got shape "
                         f"{list(condition.shape)}")
    axis = _axis(attrs, len(shape), where)
    length = int(np.prod(shape, dtype=np.int64)) if axis is None else shape[axis]
    return axis, np.flatnonzero(condition[:length].astype(bool)).astype(np.int64)


@host_op("Compress", shape_inputs=(1,))
def compress(attrs, inputs, where):
    x = np.asarray(inputs[0])
    axis, kept = compress_selection(x.shape, attrs, inputs[1], where)
    return [np.take(x.reshape(-1) if axis is None else x, kept, axis=axis or 0)]


@host_op("NonMaxSuppression", shape_inputs=(0, 1, 2, 3, 4))
def non_max_suppression(attrs, inputs, where):
    boxes, scores = (np.asarray(a) for a in inputs[:2])
    extra = list(inputs[2:]) + [None] * (5 - len(inputs))
    limit = int(_scalar(extra[0], where, "max_output_boxes_per_class", 0))
    iou = np.float32(_scalar(extra[1], where, "iou_threshold", 0.0))
    threshold = None if extra[2] is None else np.float32(
        _scalar(extra[2], where, "score_threshold", 0.0))
    center = attrs.get("center_point_box", 0)
    if center not in (0, 1):
        raise ShapeError(f"{where}: center_point_box must be 0 or 1, not {center}")
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or \
            scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise ShapeError(f"{where}: boxes must have shape [batches, boxes, 4] and scores "
                         f"[batches, classes, boxes], got {list(boxes.shape)} and "
                         f"{list(scores.shape)}")
    if not 0 <= iou <= 1:
        raise InputError(f"{where}: iou_threshold must be in [0, 1], got {iou}")
    selected = []
    if limit > 0 and boxes.shape[1]:
        low, high = _corners(boxes.astype(np.float32), center)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            area = (high[..., 0] - low[..., 0]) * (high[..., 1] - low[..., 1])
            for batch in range(boxes.shape[0]):
                for cls in range(scores.shape[1]):
                    kept = _select(low[batch], high[batch], area[batch],
                                   scores[batch, cls].astype(np.float32), limit, iou, threshold)
                    selected.extend((batch, cls, int(box)) for box in kept)
    return [np.array(selected, dtype=np.int64).reshape(-1, 3)]


def _corners(boxes, center):
    """(min, max) corners of ``boxes`` [B, n, 4] as [B, n, 2] arrays of (x, y), as ONNX
    Runtime works them out (for corner boxes, min = the second coordinate unless the first is
    smaller)."""
    if center:
        half = boxes[..., 2:] / np.float32(2)
        return boxes[..., :2] - half, boxes[..., :2] + half
    first, second = boxes[..., [1, 0]], boxes[..., [3, 2]]
    swap = first >= second
    return np.where(swap, second, first), np.where(swap, first, second)


BLOCK = 128          # NonMaxSuppression decides the candidates in blocks of this many


def _select(low, high, area, scores, limit, iou, threshold):
    """The indices kept among one class's boxes, in the order they are kept.

    The candidates, by decreasing score, are decided a block at a time: a candidate is kept
    unless a box kept before it overlaps it too much (those of earlier blocks have already
    marked it; those of its own block are found in the block's table of pairs). Then the
    block's kept boxes mark the later candidates they suppress, each compared only with
    those that may overlap it: the wide boxes (over twice the 90th percentile of widths), and
    of the others those whose left edge lies less than their greatest width to its left and
    before its right edge (a range of the candidates sorted by left edge). A box with a
    coordinate that is not finite, or of no area, neither suppresses nor is suppressed (its
    union or area is never a positive number)."""
    x0, y0, x1, y1 = low[:, 0], low[:, 1], high[:, 0], high[:, 1]

    def overlapping(a, b):
        left, right = np.maximum(x0[a], x0[b]), np.minimum(x1[a], x1[b])
        bottom, top = np.maximum(y0[a], y0[b]), np.minimum(y1[a], y1[b])
        inter = (right - left) * (top - bottom)
        union = area[a] + area[b] - inter
        return (right > left) & (top > bottom) & (inter > 0) & (union > 0) & \
            (inter / union > iou)

    candidates = np.arange(scores.size) if threshold is None else \
        np.flatnonzero(scores > threshold)
    order = candidates[np.argsort(-scores[candidates], kind="stable")]
    rank = np.zeros(scores.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    usable = np.isfinite(low).all(axis=1) & np.isfinite(high).all(axis=1) & (area > 0)
    indexed = order[usable[order]]
    widths = x1[indexed].astype(np.float64) - x0[indexed]
    narrow = widths <= 2 * np.quantile(widths, 0.9) if widths.size else widths > 0
    wide = indexed[~narrow]
    by_left = indexed[narrow][np.argsort(x0[indexed[narrow]], kind="stable")]
    lefts = x0[by_left].astype(np.float64)
    reach = widths[narrow].max(initial=0.0) * (1 + 2.0**-20) + 2.0**-60
    alive = np.ones(order.size, dtype=bool)
    kept = []
    for start in range(0, order.size, BLOCK):
        block = order[start:start + BLOCK]
        live = alive[start:start + BLOCK].copy()
        use = usable[block]
        pairs = overlapping(block[:, None], block[None, :]) & use[:, None] & use[None, :]
        chosen = []
        for i in range(block.size):
            if live[i]:
                chosen.append(i)
                if len(kept) + len(chosen) == limit:
                    break
                live &= ~pairs[i]
        kept.extend(block[chosen].tolist())
        if len(kept) == limit:
            break
        sources = block[chosen][use[chosen]]
        first = np.searchsorted(lefts, x0[sources] - reach, "left")
        count = np.searchsorted(lefts, x1[sources], "left") - first
        runs = np.repeat(first - np.cumsum(count) + count, count)
        a = np.concatenate([np.repeat(sources, count), np.repeat(sources, wide.size)])
        b = np.concatenate([by_left[runs + np.arange(runs.size)], np.tile(wide, sources.size)])
        later = rank[b] >= start + block.size
        a, b = a[later], b[later]
        alive[rank[b[overlapping(a, b)]]] = False
    return kept
