"""Indexing and layout ops with ONNX semantics: Pad, Tile, BroadcastTo, GatherElements, GatherND,
ScatterElements, ScatterND, CumSum, TopK, OneHot and Trilu.

Static parameters that ONNX passes as inputs (pads, repeats, shape, k, depth, axis) are
attributes here; the ONNX importer reads its constant inputs into them.

* ``Pad(x[, value])``: ``pads`` has 2*rank ints, all begins then all ends; ``mode`` is
  constant (fill with the scalar input ``value``, default 0), reflect (mirror without repeating
  the edge), edge (repeat the edge) or wrap (periodic). A negative pad removes elements from
  that side: the input is cropped first, then padded (the result is the same as ONNX Runtime's
  for constant mode; for the other modes the reflection is of the cropped input).
* ``Tile(x)``: ``repeats`` has one count (0 or more) per axis.
* ``BroadcastTo(x)``: ``shape`` is the final output shape; x must broadcast to it (NumPy rules,
  so the importer resolves ONNX Expand's two-sided broadcast into ``shape`` first).
* ``GatherElements(data, indices)``: ``out[i][j][k] = data[indices[i][j][k]][j][k]`` for
  ``axis`` 0 (ONNX). ``indices`` has data's rank, and no more than data's extent on the other
  axes. Negative indices count from the end; indices outside [-n, n) raise InputError at run
  time.
* ``GatherND(data, indices)``: ``batch_dims`` leading axes shared by data and indices; the last
  axis of indices (k entries) indexes the next k axes of data. Output shape
  ``indices.shape[:-1] + data.shape[batch_dims + k:]``. Negative indices count from the end,
  others out of range raise InputError.
* ``ScatterElements(data, indices, updates)``: a copy of data where
  ``out[indices[i][j]][j] = updates[i][j]`` (axis 0), combined by ``reduction`` none, add, mul,
  max or min. Updates are applied in row-major order (with ``none`` the last duplicate wins).
* ``ScatterND(data, indices, updates)``: a copy of data with ``updates[i]`` written at the
  position (or slice) ``indices[i]``; same ``reduction``s; indices as in GatherND.
* ``CumSum(x)``: running sum along ``axis``; ``exclusive`` leaves out the element itself,
  ``reverse`` sums from the end.
* ``TopK(x)``: the ``k`` largest (``largest``, else smallest) values along ``axis`` and their
  int64 indices, in order, the lower index first on ties (NaN is greater than any number).
  The output is always sorted (``sorted=0`` leaves the order unspecified in ONNX).
* ``OneHot(indices, values)``: values = [off, on]; a new axis of ``depth`` at ``axis`` (default
  -1, the last) is ``on`` where it equals the index (negative indices count from the end;
  indices outside [-depth, depth) give a row of ``off``). Indices are integers.
* ``Trilu(x)``: the upper (``upper`` true) or lower triangle of the last two axes, from
  diagonal ``k`` (positive: above the main diagonal); the rest is zero.
"""

import numpy as np

from myelin.errors import InputError
from myelin.ops.common import (INDEX, INTEGER, NUMERIC, check_dtype, common_dtype,
                               elementwise_gradient, error, gradient_error, normalize_axis,
                               scatter_add)
from myelin.ops.registry import Kind, OpDef, TensorType, attribute, register

PAD_MODES = ("constant", "reflect", "edge", "wrap")
REDUCTIONS = ("none", "add", "mul", "max", "min")


def _ints(op, name, count=None, what=None):
    """Required int list attribute ``name`` (with ``count`` entries if given)."""
    values = op.attrs.get_ints(name)
    if values is None:
        raise error(op, f"needs attribute {name}")
    if count is not None and len(values) != count:
        raise error(op, f"attribute {name}={values} must have {count} entries{what or ''}")
    return values


def _known(op, *variables):
    for var in variables:
        if not var.shape_defined:
            raise error(op, f"input {var.name} must have a known shape, got {list(var.shape)}")


def _bad_index(op, index, size):
    return InputError(f"op {op.name} ({op.type}): index {index} is out of range for an axis "
                      f"of size {size}")


def _wrap_indices(op, indices, size):
    """Indices with negatives counted from the end; InputError if any is out of range."""
    indices = np.asarray(indices, dtype=np.int64)
    bad = (indices < -size) | (indices >= size)
    if bad.any():
        raise _bad_index(op, int(indices[bad].reshape(-1)[0]), size)
    return np.where(indices < 0, indices + size, indices)


# Pad.
def pad_layout(op, shape):
    """Per axis ``(crop_begin, crop_end, pad_begin, pad_end)`` and the output shape."""
    rank = len(shape)
    pads = _ints(op, "pads", 2 * rank, f" (begins then ends for rank {rank})")
    mode = attribute(op, "mode")
    if mode not in PAD_MODES:
        raise error(op, f"attribute mode={mode!r} must be one of {', '.join(PAD_MODES)}")
    layout, out = [], []
    for axis, dim in enumerate(shape):
        begin, end = pads[axis], pads[rank + axis]
        crop_begin, crop_end = max(-begin, 0), max(-end, 0)
        kept = dim - crop_begin - crop_end
        if kept < 0:
            raise error(op, f"pads {pads} crop more than the {dim} elements of axis {axis}")
        pad_begin, pad_end = max(begin, 0), max(end, 0)
        if mode != "constant" and kept == 0 and pad_begin + pad_end:
            raise error(op, f"mode {mode} cannot pad axis {axis}, which is empty after pads "
                            f"{pads}")
        layout.append((crop_begin, crop_end, pad_begin, pad_end))
        out.append(kept + pad_begin + pad_end)
    return layout, tuple(out)


def _pad_infer(op):
    x = op.inputs[0]
    _known(op, x)
    if len(op.inputs) == 2:
        value = op.inputs[1]
        common_dtype(op, [x, value])
        if value.elements != 1:
            raise error(op, f"value {value.name} must be a scalar, got shape {list(value.shape)}")
    _, shape = pad_layout(op, x.shape)
    return [TensorType(x.dtype, shape)]


def _pad_reference(op, inputs):
    x = inputs[0]
    layout, _ = pad_layout(op, x.shape)
    x = x[tuple(slice(cb, x.shape[a] - ce) for a, (cb, ce, _, _) in enumerate(layout))]
    widths = [(pb, pe) for _, _, pb, pe in layout]
    mode = attribute(op, "mode")
    if mode == "constant":
        value = inputs[1].reshape(()) if len(inputs) == 2 else 0
        return [np.pad(x, widths, mode="constant", constant_values=value)]
    return [np.pad(x, widths, mode=mode)]


# Tile.
def _repeats(op, rank):
    repeats = _ints(op, "repeats", rank, f" (one per axis of rank {rank})")
    if any(r < 0 for r in repeats):
        raise error(op, f"repeats {repeats} must not be negative")
    return repeats


def _tile_infer(op):
    x = op.inputs[0]
    _known(op, x)
    repeats = _repeats(op, x.rank)
    return [TensorType(x.dtype, tuple(d * r for d, r in zip(x.shape, repeats)))]


def _tile_reference(op, inputs):
    x = inputs[0]
    return [np.tile(x, _repeats(op, x.ndim)) if x.ndim else x.copy()]


# BroadcastTo.
def _broadcast_target(op, shape):
    target = _ints(op, "shape")
    pad = len(target) - len(shape)
    if pad < 0 or any(d < 0 for d in target) or any(
            d not in (1, target[pad + i]) for i, d in enumerate(shape)):
        raise error(op, f"shape {list(shape)} does not broadcast to shape {target}")
    return tuple(target)


def _broadcast_to_infer(op):
    x = op.inputs[0]
    _known(op, x)
    return [TensorType(x.dtype, _broadcast_target(op, x.shape))]


def _broadcast_to_reference(op, inputs):
    x = inputs[0]
    return [np.broadcast_to(x, _broadcast_target(op, x.shape)).copy()]


# GatherElements and ScatterElements.
def _elements_axis(op, data, indices):
    """Checks shared by GatherElements and ScatterElements; returns the axis."""
    check_dtype(op, indices, INDEX)
    _known(op, data, indices)
    if data.rank < 1 or indices.rank != data.rank:
        raise error(op, f"indices shape {list(indices.shape)} must have the rank of data shape "
                        f"{list(data.shape)} (1 or more)")
    axis = normalize_axis(op, attribute(op, "axis"), data.rank)
    if any(i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape)) if a != axis):
        raise error(op, f"indices shape {list(indices.shape)} exceeds data shape "
                        f"{list(data.shape)} on an axis other than {axis}")
    return axis


def _element_positions(op, data, indices, axis):
    """The data index tuple of every element of ``indices`` along ``axis``."""
    grid = list(np.indices(indices.shape, dtype=np.int64))
    grid[axis] = _wrap_indices(op, indices, data.shape[axis])
    return tuple(grid)


def _gather_elements_infer(op):
    data, indices = op.inputs
    _elements_axis(op, data, indices)
    return [TensorType(data.dtype, indices.shape)]


def _gather_elements_reference(op, inputs):
    data, indices = inputs
    axis = normalize_axis(op, attribute(op, "axis"), data.ndim)
    return [data[_element_positions(op, data, indices, axis)]]


def _reduction(op, dtype):
    reduction = attribute(op, "reduction")
    if reduction not in REDUCTIONS:
        raise error(op, f"attribute reduction={reduction!r} must be one of "
                        f"{', '.join(REDUCTIONS)}")
    if reduction != "none" and dtype == "bool":
        raise error(op, f"reduction {reduction} needs a numeric type, not bool")
    return reduction


_COMBINE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(op, out, positions, updates):
    """Apply ``updates`` at ``positions`` (index tuples) one by one in row-major order."""
    reduction = attribute(op, "reduction")
    for position, update in zip(positions, updates):
        if reduction == "none":
            out[position] = update
        else:
            out[position] = _COMBINE[reduction](out[position], update)
    return out


def _scatter_elements_infer(op):
    data, indices, updates = op.inputs
    _elements_axis(op, data, indices)
    common_dtype(op, [data, updates])
    if updates.shape != indices.shape:
        raise error(op, f"updates shape {list(updates.shape)} must be the indices shape "
                        f"{list(indices.shape)}")
    _reduction(op, data.dtype)
    return [TensorType(data.dtype, data.shape)]


def _scatter_elements_reference(op, inputs):
    data, indices, updates = inputs
    axis = normalize_axis(op, attribute(op, "axis"), data.ndim)
    grid = _element_positions(op, data, indices, axis)
    positions = zip(*(g.reshape(-1).tolist() for g in grid))
    return [_scatter(op, data.copy(), positions, updates.reshape(-1))]


# GatherND and ScatterND.
def _nd_layout(op, data, indices, batch_dims=0):
    """Checks of GatherND/ScatterND; returns k, the length of an index tuple."""
    check_dtype(op, indices, INDEX)
    _known(op, data, indices)
    if indices.rank < 1 or data.rank < 1:
        raise error(op, f"data shape {list(data.shape)} and indices shape "
                        f"{list(indices.shape)} must have rank 1 or more")
    if not 0 <= batch_dims < min(data.rank, indices.rank):
        raise error(op, f"batch_dims {batch_dims} must be in [0, {min(data.rank, indices.rank)})")
    if data.shape[:batch_dims] != indices.shape[:batch_dims]:
        raise error(op, f"the first {batch_dims} axes of data shape {list(data.shape)} and "
                        f"indices shape {list(indices.shape)} differ")
    k = indices.shape[-1]
    if not 1 <= k <= data.rank - batch_dims:
        raise error(op, f"the last axis of indices shape {list(indices.shape)} must be 1 to "
                        f"{data.rank - batch_dims} for data shape {list(data.shape)}")
    return k


def _nd_positions(op, data_shape, indices, batch_dims):
    """Index tuples into data (batch axes included) for every index row of ``indices``."""
    k = indices.shape[-1]
    rows = indices.reshape(-1, k).astype(np.int64)
    dims = data_shape[batch_dims:batch_dims + k]
    wrapped = np.stack([_wrap_indices(op, rows[:, j], dims[j]) for j in range(k)], axis=1) \
        if len(rows) else rows
    per_batch = int(np.prod(indices.shape[batch_dims:-1], dtype=np.int64))
    positions = []
    for row, index in enumerate(wrapped.tolist()):
        batch = np.unravel_index(row // per_batch, indices.shape[:batch_dims]) \
            if batch_dims else ()
        positions.append(tuple(int(b) for b in batch) + tuple(index))
    return positions


def _gather_nd_infer(op):
    data, indices = op.inputs
    batch_dims = attribute(op, "batch_dims")
    k = _nd_layout(op, data, indices, batch_dims)
    return [TensorType(data.dtype, indices.shape[:-1] + data.shape[batch_dims + k:])]


def _gather_nd_reference(op, inputs):
    data, indices = inputs
    batch_dims = attribute(op, "batch_dims")
    k = indices.shape[-1]
    positions = _nd_positions(op, data.shape, indices, batch_dims)
    out_shape = indices.shape[:-1] + data.shape[batch_dims + k:]
    rows = [data[p] for p in positions]
    if not rows:
        return [np.zeros(out_shape, data.dtype)]
    return [np.stack(rows).reshape(out_shape)]


def _scatter_nd_infer(op):
    data, indices, updates = op.inputs
    k = _nd_layout(op, data, indices)
    common_dtype(op, [data, updates])
    expected = indices.shape[:-1] + data.shape[k:]
    if updates.shape != expected:
        raise error(op, f"updates shape {list(updates.shape)} must be {list(expected)} for data "
                        f"shape {list(data.shape)} and indices shape {list(indices.shape)}")
    _reduction(op, data.dtype)
    return [TensorType(data.dtype, data.shape)]


def _scatter_nd_reference(op, inputs):
    data, indices, updates = inputs
    positions = _nd_positions(op, data.shape, indices, 0)
    rows = updates.reshape((len(positions),) + data.shape[indices.shape[-1]:])
    return [_scatter(op, data.copy(), positions, rows)]


# CumSum.
def scan_infer(op):
    """The shape rule of running reductions along ``axis`` (CumSum, CumProd)."""
    x = op.inputs[0]
    check_dtype(op, x, NUMERIC)
    if x.rank < 1:
        raise error(op, "input must have rank 1 or more")
    normalize_axis(op, attribute(op, "axis"), x.rank)
    return [TensorType(x.dtype, x.shape)]


def _cumsum_reference(op, inputs):
    x = inputs[0]
    axis = normalize_axis(op, attribute(op, "axis"), x.ndim)
    if attribute(op, "reverse"):
        x = np.flip(x, axis)
    total = np.cumsum(x, axis=axis, dtype=x.dtype)
    if attribute(op, "exclusive"):
        total = np.roll(total, 1, axis=axis)
        total[(slice(None),) * axis + (0,)] = 0
    if attribute(op, "reverse"):
        total = np.flip(total, axis)
    return [np.ascontiguousarray(total)]


# TopK.
def topk_layout(op, shape):
    """(axis, k) of a TopK over ``shape``."""
    if len(shape) < 1:
        raise error(op, "input must have rank 1 or more")
    axis = normalize_axis(op, attribute(op, "axis"), len(shape))
    k = op.attrs.get_int("k")
    if k is None or not 0 <= k <= shape[axis]:
        raise error(op, f"attribute k={k} must be in [0, {shape[axis]}] for axis {axis} of "
                        f"shape {list(shape)}")
    return axis, k


def _topk_infer(op):
    x = op.inputs[0]
    check_dtype(op, x, NUMERIC)
    _known(op, x)
    axis, k = topk_layout(op, x.shape)
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    return [TensorType(x.dtype, shape), TensorType("int64", shape)]


def _topk_reference(op, inputs):
    x = inputs[0]
    axis, k = topk_layout(op, x.shape)
    position = np.indices(x.shape)[axis]
    if attribute(op, "largest"):
        # Descending values, ascending positions on ties (NaN sorts last ascending: first here).
        order = np.flip(np.lexsort((-position, x), axis=axis), axis)
    else:
        order = np.lexsort((position, x), axis=axis)
    order = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, order, axis=axis), order.astype(np.int64)]


# OneHot.
def _onehot_axis(op, rank):
    axis = attribute(op, "axis")
    if not -rank - 1 <= axis <= rank:
        raise error(op, f"axis {axis} is out of range for an output of rank {rank + 1}")
    return axis + rank + 1 if axis < 0 else axis


def _onehot_depth(op):
    depth = op.attrs.get_int("depth")
    if depth is None or depth < 1:
        raise error(op, f"attribute depth={depth} must be a positive integer")
    return depth


def _onehot_infer(op):
    indices, values = op.inputs
    check_dtype(op, indices, INTEGER)
    if values.shape != (2,):
        raise error(op, f"values {values.name} must have shape [2] (off, on), got "
                        f"{list(values.shape)}")
    axis = _onehot_axis(op, indices.rank)
    depth = _onehot_depth(op)
    return [TensorType(values.dtype, indices.shape[:axis] + (depth,) + indices.shape[axis:])]


def _onehot_reference(op, inputs):
    indices, values = inputs
    depth = _onehot_depth(op)
    axis = _onehot_axis(op, indices.ndim)
    wrapped = np.where(indices < 0, indices.astype(np.int64) + depth, indices)
    hot = wrapped[..., None] == np.arange(depth)
    return [np.moveaxis(np.where(hot, values[1], values[0]), -1, axis)]


# Trilu.
def _trilu_infer(op):
    x = op.inputs[0]
    if x.rank < 2:
        raise error(op, f"input shape {list(x.shape)} must have rank 2 or more")
    attribute(op, "k")
    return [TensorType(x.dtype, x.shape)]


def _trilu_reference(op, inputs):
    x = inputs[0]
    k = attribute(op, "k")
    rows, cols = np.indices(x.shape[-2:])
    keep = cols - rows >= k if attribute(op, "upper") else cols - rows <= k
    return [np.where(keep, x, np.zeros((), x.dtype))]


# Gradients (see myelin.autodiff.context).
def _pad_gradient(g):
    """Constant mode: the adjoint's block where x lies (zero-padded where x was cropped); the
    pad value gets the sum of the rest."""
    op, b = g.op, g.b
    x = op.inputs[0]
    if attribute(op, "mode") != "constant":
        raise gradient_error(op, f"for mode {attribute(op, 'mode')} (only constant)")
    layout, _ = pad_layout(op, x.shape)
    kept = [dim - cb - ce for dim, (cb, ce, _, _) in zip(x.shape, layout)]
    inner = b.slice(g.dy, [pb for _, _, pb, _ in layout], kept)
    if g.needs(0):
        crops = [cb for cb, _, _, _ in layout] + [ce for _, ce, _, _ in layout]
        g.add(0, b.op("Pad", [inner], attrs={"pads": crops}) if any(crops) else inner)
    if len(op.inputs) == 2 and g.needs(1):
        g.add(1, b.sub(b.sum(g.dy), b.sum(inner)))


def _tile_gradient(g):
    """The sum of the adjoint's tiles."""
    x = g.op.inputs[0]
    if not x.rank:
        g.add(0, g.dy)
        return
    tiles = [n for count, dim in zip(_repeats(g.op, x.rank), x.shape) for n in (count, dim)]
    g.add(0, g.b.sum(g.b.reshape(g.dy, tiles), list(range(0, 2 * x.rank, 2))))


def _cumsum_gradient(g):
    """The running sum of the adjoint in the other direction."""
    attrs = {"axis": attribute(g.op, "axis"), "exclusive": attribute(g.op, "exclusive"),
             "reverse": not attribute(g.op, "reverse")}
    g.add(0, g.b.op("CumSum", [g.dy], attrs=attrs))


def _scatter_elements_add(g, data, indices, axis):
    """The adjoint added into zeros of ``data``'s shape at ``indices`` along ``axis``."""
    return g.b.op("ScatterElements", [g.zeros(data.dtype, data.shape), indices, g.dy],
                  attrs={"axis": axis, "reduction": "add"})


def _gather_elements_gradient(g):
    data = g.op.inputs[0]
    axis = normalize_axis(g.op, attribute(g.op, "axis"), data.rank)
    g.add(0, _scatter_elements_add(g, data, g.input(1), axis))


def _gather_nd_gradient(g):
    if attribute(g.op, "batch_dims"):
        raise gradient_error(g.op, "with batch_dims")
    data = g.op.inputs[0]
    g.add(0, scatter_add(g, data.dtype, data.shape, g.input(1), g.dy))


def _topk_gradient(g):
    """The values' adjoint added at the positions the indices output names."""
    x = g.op.inputs[0]
    axis, _ = topk_layout(g.op, x.shape)
    g.add(0, _scatter_elements_add(g, x, g.value(g.op.outputs[1]), axis))


def _trilu_gradient(g):
    attrs = {"upper": attribute(g.op, "upper"), "k": attribute(g.op, "k")}
    g.add(0, g.b.op("Trilu", [g.dy], attrs=attrs))


def _define_all():
    register(OpDef("Pad", Kind.INJECTIVE, _pad_infer, _pad_reference,
                   attrs={"pads": None, "mode": "constant"}, inputs=(1, 2),
                   doc="pad (or crop, by negative pads) every axis; modes constant (value "
                       "input, default 0), reflect, edge, wrap", gradient=_pad_gradient))
    register(OpDef("Tile", Kind.INJECTIVE, _tile_infer, _tile_reference,
                   attrs={"repeats": None}, doc="x repeated repeats[i] times along axis i",
                   gradient=_tile_gradient))
    register(OpDef("BroadcastTo", Kind.INJECTIVE, _broadcast_to_infer, _broadcast_to_reference,
                   attrs={"shape": None}, doc="x broadcast (NumPy rules) to attribute shape",
                   gradient=elementwise_gradient(lambda b, g, dy: dy)))
    register(OpDef("GatherElements", Kind.INJECTIVE, _gather_elements_infer,
                   _gather_elements_reference, attrs={"axis": 0}, inputs=(2, 2),
                   doc="data at indices along axis, elsewhere at the index's own position",
                   gradient=_gather_elements_gradient))
    register(OpDef("GatherND", Kind.INJECTIVE, _gather_nd_infer, _gather_nd_reference,
                   attrs={"batch_dims": 0}, inputs=(2, 2),
                   doc="slices of data at index tuples (the last axis of indices)",
                   gradient=_gather_nd_gradient))
    register(OpDef("ScatterElements", Kind.OPAQUE, _scatter_elements_infer,
                   _scatter_elements_reference, attrs={"axis": 0, "reduction": "none"},
                   inputs=(3, 3), doc="copy of data with updates written (or combined) at "
                                      "indices along axis"))
    register(OpDef("ScatterND", Kind.OPAQUE, _scatter_nd_infer, _scatter_nd_reference,
                   attrs={"reduction": "none"}, inputs=(3, 3),
                   doc="copy of data with update slices written (or combined) at index tuples"))
    register(OpDef("CumSum", Kind.OPAQUE, scan_infer, _cumsum_reference,
                   attrs={"axis": 0, "exclusive": False, "reverse": False},
                   doc="running sum along axis (exclusive: without the element; reverse: "
                       "from the end)", gradient=_cumsum_gradient))
    register(OpDef("TopK", Kind.OPAQUE, _topk_infer, _topk_reference,
                   attrs={"k": None, "axis": -1, "largest": True, "sorted": True}, outputs=2,
                   doc="k largest (or smallest) values along axis, sorted, and their int64 "
                       "indices (lower index first on ties)", gradient=_topk_gradient))
    register(OpDef("OneHot", Kind.INJECTIVE, _onehot_infer, _onehot_reference,
                   attrs={"depth": None, "axis": -1}, inputs=(2, 2),
                   doc="values[1] where a new axis of size depth equals the index, else "
                       "values[0]"))
    register(OpDef("Trilu", Kind.INJECTIVE, _trilu_infer, _trilu_reference,
                   attrs={"upper": True, "k": 0},
                   doc="upper or lower triangle of the last two axes from diagonal k",
                   gradient=_trilu_gradient))


_define_all()
