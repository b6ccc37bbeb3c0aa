"""Array ops that move data without arithmetic: Transpose, Reshape, Concat, Split, Slice, gathers.

Input conventions follow SLING (shape-like arguments are constant int32 inputs, not attributes):

* ``Transpose(x)``: attribute ``perm`` (default: reversed axes).
* ``Reshape(x, shape)``: ``shape`` a constant int vector; or ``Reshape(x)`` with attribute
  ``shape``. One -1 in the shape stands for the size that keeps the element count.
* ``Concat(x1, ..., xN, axis)``: a constant int scalar axis as the last input; attribute ``N``
  (default: the number of inputs less one). Negative axes count from the end.
* ``Split(x, num_splits, axis)``: constant int scalars; ``num_splits`` equal parts along
  ``axis`` (the size must divide evenly); one output per part.
* ``Slice(x, begin, size)``: int vectors with one entry per axis; a size of -1 takes the rest
  of the axis. ``size`` should be constant (else the output shape is unknown).
* ``Gather(params, indices[, oov])``: rows of ``params`` (TF GatherV2 on axis 0), output shape
  ``indices.shape + params.shape[1:]``. An index that is negative or past the last row reads the
  ``oov`` row (shape ``params.shape[1:]``) if given, else is an InputError at run time.
  Attribute ``axis`` (default 0; ONNX Gather) gathers along another axis: output shape
  ``params.shape[:axis] + indices.shape + params.shape[axis+1:]``, with the same index rule
  (negative indices are errors, not counted from the end); ``oov`` needs axis 0.
* ``GatherSum/GatherAvg/GatherMax(params, indices)``: indices [n] or [batch, n]; each row of
  indices selects rows of ``params`` up to its first negative index and pools them (sum, mean,
  max); an empty selection gives zeros. Output ``[1 or batch] + params.shape[1:]``.
"""

import numpy as np

from myelin.errors import InputError, ShapeError
from myelin.ops.common import (ANY, FLOAT, INDEX, NUMERIC, check_dtype, common_dtype,
                               gradient_error, scatter_add,
                               constant_int, constant_ints, error, normalize_axis, runtime_ints,
                               shape_fits)
from myelin.ops.registry import Kind, OpDef, TensorType, attribute, register


# Transpose.
def _perm(op, rank):
    perm = op.attrs.get_ints("perm")
    if perm is None:
        return tuple(reversed(range(rank)))
    if sorted(perm) != list(range(rank)):
        raise error(op, f"perm {perm} is not a permutation of the {rank} axes of the input")
    return tuple(perm)


def transpose_permutation(op):
    """The axis permutation of a Transpose op: its ``perm``, reversed axes when it has none
    (output axis i is input axis ``perm[i]``)."""
    return _perm(op, op.inputs[0].rank)


def _transpose_infer(op):
    x = op.inputs[0]
    return [TensorType(x.dtype, tuple(x.shape[p] for p in _perm(op, x.rank)))]


def _transpose_reference(op, inputs):
    return [np.transpose(inputs[0], _perm(op, inputs[0].ndim))]


# Reshape.
def _requested_shape(op):
    """The requested shape from the constant shape input or the attribute; None if unknown."""
    if len(op.inputs) == 2:
        return constant_ints(op, 1, "shape")
    shape = op.attrs.get_ints("shape")
    if shape is None:
        raise error(op, "needs a shape input or a shape attribute")
    return shape


def _resolve_shape(op, source, requested):
    """``requested`` with its -1 resolved so the element count of ``source`` is kept."""
    if any(d < -1 for d in requested) or requested.count(-1) > 1:
        raise error(op, f"requested shape {requested} may hold at most one -1 and no other "
                        f"negative sizes")
    if any(d < 0 for d in source):
        return tuple(requested)
    total = int(np.prod(source, dtype=np.int64))
    known = int(np.prod([d for d in requested if d != -1], dtype=np.int64))
    if -1 in requested:
        if known == 0 or total % known:
            raise error(op, f"cannot reshape {list(source)} to {requested}")
        return tuple(total // known if d == -1 else d for d in requested)
    if known != total:
        raise error(op, f"cannot reshape {list(source)} ({total} elements) to {requested} "
                        f"({known} elements)")
    return tuple(requested)


def _reshape_infer(op):
    x = op.inputs[0]
    requested = _requested_shape(op)
    if requested is None:
        shape_var = op.inputs[1]
        if shape_var.rank != 1 or shape_var.shape[0] < 0:
            raise error(op, f"shape input {shape_var.name} must be a constant or a vector of "
                            f"known length")
        return [TensorType(x.dtype, (-1,) * shape_var.shape[0])]
    return [TensorType(x.dtype, _resolve_shape(op, x.shape, requested))]


def _reshape_reference(op, inputs):
    x = inputs[0]
    requested = runtime_ints(inputs[1]) if len(inputs) == 2 else _requested_shape(op)
    return [x.reshape(_resolve_shape(op, x.shape, requested))]


# Concat.
def _concat_infer(op):
    parts = op.inputs[:-1]
    count = op.attrs.get_int("N", len(parts))
    if count != len(parts):
        raise error(op, f"attribute N={count} but the op has {len(parts)} inputs before the axis")
    dtype = common_dtype(op, parts)
    rank = parts[0].rank
    shapes = ", ".join(str(list(p.shape)) for p in parts)
    axis = normalize_axis(op, constant_int(op, -1, "axis"), rank)
    shape = list(parts[0].shape)
    for part in parts[1:]:
        other = part.shape
        if len(other) != rank or any(a != b and -1 not in (a, b)
                                     for i, (a, b) in enumerate(zip(shape, other)) if i != axis):
            raise error(op, f"shapes {shapes} do not fit together on axis {axis}")
        shape[axis] = -1 if -1 in (shape[axis], other[axis]) else shape[axis] + other[axis]
    return [TensorType(dtype, shape)]


def _concat_reference(op, inputs):
    axis = runtime_ints(inputs[-1])[0]
    return [np.concatenate(inputs[:-1], axis=axis)]


# Split.
def _split_infer(op):
    x = op.inputs[0]
    parts = constant_int(op, 1, "num_splits")
    axis = normalize_axis(op, constant_int(op, 2, "axis"), x.rank)
    if parts < 1:
        raise error(op, f"num_splits {parts} must be positive")
    size = x.shape[axis]
    if size >= 0 and size % parts:
        raise error(op, f"axis {axis} of shape {list(x.shape)} does not split into {parts} "
                        f"equal parts")
    shape = list(x.shape)
    shape[axis] = size // parts if size >= 0 else -1
    return [TensorType(x.dtype, shape) for _ in range(parts)]


def _split_reference(op, inputs):
    x, parts, axis = inputs
    return list(np.split(x, runtime_ints(parts)[0], axis=runtime_ints(axis)[0]))


# Slice.
def _slice_bounds(op, shape, begin, size):
    """(begin, end) per axis; raises ShapeError if the slice leaves ``shape``."""
    if len(begin) != len(shape) or len(size) != len(shape):
        raise error(op, f"begin {begin} and size {size} need one entry per axis of "
                        f"shape {list(shape)}")
    bounds = []
    for dim, start, length in zip(shape, begin, size):
        end = dim if length == -1 else start + length
        if start < 0 or length < -1 or end > dim:
            raise error(op, f"slice begin {begin} size {size} is outside shape {list(shape)}")
        bounds.append((start, end))
    return bounds


def _slice_infer(op):
    x = op.inputs[0]
    begin = constant_ints(op, 1, "begin")
    size = constant_ints(op, 2, "size")
    if size is None:
        return [TensorType(x.dtype, (-1,) * x.rank)]
    if begin is None or not x.shape_defined:
        if len(size) != x.rank:
            raise error(op, f"size {size} needs one entry per axis of shape {list(x.shape)}")
        return [TensorType(x.dtype, size)]
    return [TensorType(x.dtype, [end - start
                                 for start, end in _slice_bounds(op, x.shape, begin, size)])]


def _slice_reference(op, inputs):
    x, begin, size = inputs
    try:
        bounds = _slice_bounds(op, x.shape, runtime_ints(begin), runtime_ints(size))
    except ShapeError as exc:
        raise InputError(str(exc)) from None
    return [x[tuple(slice(start, end) for start, end in bounds)]]


# Gathers.
def _check_gather(op, domain):
    params, indices = op.inputs[:2]
    check_dtype(op, params, domain)
    check_dtype(op, indices, INDEX)
    if params.rank < 1:
        raise error(op, f"params {params.name} must have rank 1 or more, got shape "
                        f"{list(params.shape)}")


def _gather_infer(op):
    _check_gather(op, ANY)
    params, indices = op.inputs[:2]
    axis = normalize_axis(op, attribute(op, "axis"), params.rank)
    if axis:
        if len(op.inputs) == 3:
            raise error(op, f"an oov input needs axis 0, not axis {axis}")
        return [TensorType(params.dtype,
                           params.shape[:axis] + indices.shape + params.shape[axis + 1:])]
    row = params.shape[1:]
    if len(op.inputs) == 3:
        oov = op.inputs[2]
        common_dtype(op, [params, oov])
        if not shape_fits(oov.shape, row) and not shape_fits(row, oov.shape):
            raise error(op, f"oov shape {list(oov.shape)} must be the row shape {list(row)} of "
                            f"params shape {list(params.shape)}")
    return [TensorType(params.dtype, indices.shape + row)]


def _gather_reference(op, inputs):
    params, indices = inputs[:2]
    axis = normalize_axis(op, attribute(op, "axis"), params.ndim)
    if axis:
        rows = params.shape[axis]
        invalid = (indices < 0) | (indices >= rows)
        if invalid.any():
            bad = int(indices[invalid].reshape(-1)[0])
            raise InputError(f"op {op.name} ({op.type}): index {bad} is outside the {rows} "
                             f"entries of axis {axis} of params")
        return [np.take(params, indices, axis=axis)]
    rows = params.shape[0]
    invalid = (indices < 0) | (indices >= rows)
    if invalid.any() and len(inputs) < 3:
        bad = int(indices[invalid].reshape(-1)[0])
        raise InputError(f"op {op.name} ({op.type}): index {bad} is outside the {rows} rows of "
                         f"params and there is no oov input")
    if rows:
        result = params[np.where(invalid, 0, indices)]
    else:
        result = np.zeros(indices.shape + params.shape[1:], params.dtype)
    if invalid.any():
        result[invalid] = inputs[2]
    return [result]


def _pooling_infer(op):
    params, indices = op.inputs
    if indices.rank not in (1, 2):
        raise error(op, f"indices shape {list(indices.shape)} must be [n] or [batch, n]")
    batch = indices.shape[0] if indices.rank == 2 else 1
    return [TensorType(params.dtype, (batch,) + params.shape[1:])]


def _pooling(pool, domain):
    def infer(op):
        _check_gather(op, domain)
        return _pooling_infer(op)

    def reference(op, inputs):
        params, indices = inputs
        selections = indices.reshape(-1, indices.shape[-1])
        result = np.zeros((len(selections),) + params.shape[1:], params.dtype)
        for row, selection in enumerate(selections):
            negative = np.flatnonzero(selection < 0)
            chosen = selection[:negative[0]] if negative.size else selection
            if (chosen >= params.shape[0]).any():
                raise InputError(f"op {op.name} ({op.type}): an index in {chosen.tolist()} is "
                                 f"outside the {params.shape[0]} rows of params")
            if chosen.size:
                result[row] = pool(params[chosen], axis=0)
        return [result]
    return infer, reference


# Gradients (see myelin.autodiff.context).
def _transpose_gradient(g):
    perm = _perm(g.op, g.op.inputs[0].rank)
    g.add(0, g.b.transpose(g.dy, [int(axis) for axis in np.argsort(perm)]))


def _reshape_gradient(g):
    g.add(0, g.b.reshape(g.dy, list(g.op.inputs[0].shape)))


def _concat_gradient(g):
    """Each part gets its slice of the adjoint."""
    parts = g.op.inputs[:-1]
    axis = normalize_axis(g.op, constant_int(g.op, -1, "axis"), parts[0].rank)
    offset = 0
    for index, part in enumerate(parts):
        if g.needs(index):
            begin = [offset if a == axis else 0 for a in range(part.rank)]
            g.add(index, g.b.slice(g.dy, begin, list(part.shape)))
        offset += part.shape[axis]


def _split_gradient(g):
    """The adjoints of the parts (zeros for parts without one), concatenated."""
    x = g.op.inputs[0]
    axis = normalize_axis(g.op, constant_int(g.op, 2, "axis"), x.rank)
    parts = [g.adjoint(i) if g.adjoint(i) is not None else g.zeros(out.dtype, out.shape)
             for i, out in enumerate(g.op.outputs)]
    g.add(0, g.b.concat(parts, axis=axis) if len(parts) > 1 else parts[0])


def _slice_gradient(g):
    """The adjoint padded with zeros back to the input's shape."""
    x = g.op.inputs[0]
    begin, size = constant_ints(g.op, 1, "begin"), constant_ints(g.op, 2, "size")
    if begin is None or size is None:
        raise gradient_error(g.op, "for a slice whose begin and size are not constant")
    bounds = _slice_bounds(g.op, x.shape, begin, size)
    pads = [start for start, _ in bounds] + [dim - end for dim, (_, end) in zip(x.shape, bounds)]
    g.add(0, g.b.op("Pad", [g.dy], attrs={"pads": pads}))


def _gather_gradient(g):
    """A scatter-add of the adjoint into zeros of the params' shape (entries moved to axis 0
    first for another axis); with an oov row, bad indices add to it instead."""
    op, b = g.op, g.b
    params, indices = op.inputs[:2]
    axis = normalize_axis(op, attribute(op, "axis"), params.rank)
    index, dy = g.input(1), g.dy
    if len(op.inputs) == 3:
        valid = b.logical_and(b.greater_equal(index, 0), b.less(index, params.shape[0]))
        rows = b.reshape(valid, list(indices.shape) + [1] * (params.rank - 1))
        if g.needs(2):
            g.add(2, b.select(b.logical_not(rows), dy))
        index, dy = b.select(valid, index), b.select(rows, dy)
    if not g.needs(0):
        return
    shape = list(params.shape)
    moved = [shape[axis]] + shape[:axis] + shape[axis + 1:]
    if axis and indices.rank:    # the index axes first, as ScatterND wants them
        end = axis + indices.rank
        dy = b.transpose(dy, list(range(axis, end)) + list(range(axis)) +
                         list(range(end, dy.rank)))
    total = scatter_add(g, params.dtype, moved, b.reshape(index, list(indices.shape) + [1]), dy)
    if axis:
        total = b.transpose(total, list(range(1, axis + 1)) + [0] +
                            list(range(axis + 1, len(shape))))
    g.add(0, total)


def _pooling_gradient(g):
    """GatherSum and GatherAvg: each selected row gets its row of the adjoint (divided by the
    selection's size for GatherAvg); indices from the first negative one on select nothing."""
    op, b = g.op, g.b
    params, indices = op.inputs
    batch, n = indices.shape if indices.rank == 2 else (1, indices.shape[0])
    row, ones = list(params.shape[1:]), [1] * (params.rank - 1)
    index = b.reshape(g.input(1), [batch, n])
    ended = b.op("CumSum", [b.cast(b.less(index, 0), "int32")], attrs={"axis": 1})
    valid = b.equal(ended, 0)
    dy = b.reshape(g.dy, [batch, 1] + row)
    if op.type == "GatherAvg":
        count = b.maximum(b.sum(b.cast(valid, params.dtype), 1, keepdims=True), 1.0)
        dy = b.div(dy, b.reshape(count, [batch, 1] + ones))
    updates = b.reshape(b.select(b.reshape(valid, [batch, n] + ones), dy), [batch * n] + row)
    positions = b.reshape(b.select(valid, index), [batch * n, 1])
    g.add(0, scatter_add(g, params.dtype, params.shape, positions, updates))


def _define_all():
    register(OpDef("Transpose", Kind.INJECTIVE, _transpose_infer, _transpose_reference,
                   attrs={"perm": None}, doc="permute axes (default: reverse them)",
                   gradient=_transpose_gradient))
    register(OpDef("Reshape", Kind.INJECTIVE, _reshape_infer, _reshape_reference,
                   attrs={"shape": None}, inputs=(1, 2),
                   doc="same elements in a new shape (one -1 is inferred)",
                   gradient=_reshape_gradient))
    register(OpDef("Concat", Kind.INJECTIVE, _concat_infer, _concat_reference, attrs={"N": None},
                   inputs=(2, None), doc="join x1..xN along a constant axis (last input)",
                   gradient=_concat_gradient))
    register(OpDef("Split", Kind.INJECTIVE, _split_infer, _split_reference, inputs=(3, 3),
                   outputs=None, doc="cut x into num_splits equal parts along axis",
                   gradient=_split_gradient))
    register(OpDef("Slice", Kind.INJECTIVE, _slice_infer, _slice_reference, inputs=(3, 3),
                   doc="the block of x starting at begin with extent size",
                   gradient=_slice_gradient))
    register(OpDef("Gather", Kind.INJECTIVE, _gather_infer, _gather_reference, inputs=(2, 3),
                   attrs={"axis": 0},
                   doc="rows of params at indices (bad indices read the oov row), or entries "
                       "along attribute axis", gradient=_gather_gradient))
    for optype, pool, domain, gradient, doc in [
            ("GatherSum", np.sum, NUMERIC, _pooling_gradient,
             "sum of the rows of params selected by indices"),
            ("GatherAvg", np.mean, FLOAT, _pooling_gradient,
             "mean of the rows of params selected by indices"),
            ("GatherMax", np.max, NUMERIC, None,
             "maximum of the rows of params selected by indices")]:
        infer, reference = _pooling(pool, domain)
        register(OpDef(optype, Kind.OPAQUE, infer, reference, inputs=(2, 2), doc=doc,
                       gradient=gradient))


_define_all()
