"""TensorFlow ops that shape and move data: Reshape and friends, Transpose, concatenation and
stacking, slicing and splitting, padding, gathers, shape queries and filled tensors.

Shape-like inputs (a Reshape's shape, StridedSlice's begin, ...) must be constants at import
time; the shape computations Keras and ``tf.function`` graphs put before them (Shape,
StridedSlice, Pack) fold into constants as they are converted, shapes being concrete.
"""

import numpy as np

from myelin.importers.tensorflow.converters import converter


def _axis(axis, rank):
    return axis + rank if axis < 0 else axis


@converter("Reshape")
def _reshape(ctx):
    x = ctx.input(0)
    shape = ctx.ints(1)
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        shape[shape.index(-1)] = x.elements // known if known else 0
    if int(np.prod(shape, dtype=np.int64)) != x.elements:
        raise ctx.error(f"cannot reshape {list(x.shape)} into {shape}")
    return ctx.reshape(x, shape)


@converter("Squeeze")
def _squeeze(ctx):
    x = ctx.input(0)
    axes = {_axis(a, x.rank) for a in ctx.attr("squeeze_dims", [])} or \
        {i for i, d in enumerate(x.shape) if d == 1}
    if any(x.shape[a] != 1 for a in axes):
        raise ctx.error(f"cannot squeeze axes {sorted(axes)} of shape {list(x.shape)}")
    return ctx.reshape(x, [d for i, d in enumerate(x.shape) if i not in axes])


@converter("ExpandDims")
def _expand_dims(ctx):
    x = ctx.input(0)
    (axis,) = ctx.ints(1)
    shape = list(x.shape)
    shape.insert(_axis(axis, x.rank + 1), 1)
    return ctx.reshape(x, shape)


@converter("Transpose")
def _transpose(ctx):
    x = ctx.input(0)
    perm = [_axis(a, x.rank) for a in ctx.ints(1)]
    if perm == list(range(x.rank)):
        return x
    return ctx.op("Transpose", [x], {"perm": perm})


def _concat(ctx, parts, axis):
    parts = [var for var in parts if 0 not in var.shape] or parts[:1]
    if len(parts) == 1:
        return parts[0]
    axis = _axis(axis, parts[0].rank)
    return ctx.op("Concat", parts + [ctx.const(axis, "int32")], {"N": len(parts)})


@converter("ConcatV2")
def _concat_v2(ctx):
    (axis,) = ctx.ints(len(ctx.inputs) - 1)
    return _concat(ctx, ctx.inputs[:-1], axis)


@converter("Concat")
def _concat_v1(ctx):
    (axis,) = ctx.ints(0)
    return _concat(ctx, ctx.inputs[1:], axis)


@converter("Pack")
def _pack(ctx):
    first = ctx.input(0)
    axis = _axis(ctx.attr("axis", 0), first.rank + 1)
    shape = first.shape[:axis] + (1,) + first.shape[axis:]
    return _concat(ctx, [ctx.reshape(var, shape) for var in ctx.inputs], axis)


def _slice(ctx, x, begins, sizes):
    """The block of ``x`` at ``begins`` of extent ``sizes`` (one per axis)."""
    if list(begins) == [0] * x.rank and list(sizes) == list(x.shape):
        return x
    return ctx.op("Slice", [x, ctx.const(begins, "int32"), ctx.const(sizes, "int32")])


def _parts(ctx, x, axis, sizes):
    """The consecutive slices of ``x`` along ``axis`` of extents ``sizes``."""
    parts, start = [], 0
    for size in sizes:
        begins, extents = [0] * x.rank, list(x.shape)
        begins[axis], extents[axis] = start, size
        parts.append(_slice(ctx, x, begins, extents))
        start += size
    return parts


@converter("Unpack")
def _unpack(ctx):
    x = ctx.input(0)
    axis = _axis(ctx.attr("axis", 0), x.rank)
    shape = x.shape[:axis] + x.shape[axis + 1:]
    return [ctx.reshape(part, shape) for part in _parts(ctx, x, axis, [1] * x.shape[axis])]


@converter("Split")
def _split(ctx):
    (axis,) = ctx.ints(0)
    x = ctx.input(1)
    axis = _axis(axis, x.rank)
    count = ctx.attr("num_split")
    if x.shape[axis] % count:
        raise ctx.error(f"axis {axis} of shape {list(x.shape)} does not split into {count}")
    return _parts(ctx, x, axis, [x.shape[axis] // count] * count)


@converter("SplitV")
def _split_v(ctx):
    x = ctx.input(0)
    sizes = ctx.ints(1)
    (axis,) = ctx.ints(2)
    axis = _axis(axis, x.rank)
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    if sum(sizes) != x.shape[axis] or min(sizes) < 0:
        raise ctx.error(f"sizes {sizes} do not split axis {axis} of shape {list(x.shape)}")
    return _parts(ctx, x, axis, sizes)


@converter("Slice")
def _slice_op(ctx):
    x = ctx.input(0)
    begins, sizes = ctx.ints(1), ctx.ints(2)
    sizes = [d - b if s == -1 else s for b, s, d in zip(begins, sizes, x.shape)]
    return _slice(ctx, x, begins, sizes)


def _index(ctx):
    """StridedSlice's begin, end, strides and masks as a NumPy basic index: slices, ints
    (shrunk axes), None (new axes) and one Ellipsis."""
    begin, end, strides = ctx.ints(1), ctx.ints(2), ctx.ints(3)
    masks = {name: ctx.attr(name, 0) for name in ("begin_mask", "end_mask", "ellipsis_mask",
                                                   "new_axis_mask", "shrink_axis_mask")}
    items = []
    for i, (b, e, s) in enumerate(zip(begin, end, strides)):
        bit = 1 << i
        if masks["ellipsis_mask"] & bit:
            items.append(Ellipsis)
        elif masks["new_axis_mask"] & bit:
            items.append(None)
        elif masks["shrink_axis_mask"] & bit:
            items.append(b)
        else:
            if s == 0:
                raise ctx.error("a stride is 0")
            items.append(slice(None if masks["begin_mask"] & bit else b,
                               None if masks["end_mask"] & bit else e, s))
    if Ellipsis not in items:
        items.append(Ellipsis)
    return tuple(items)


@converter("StridedSlice")
def _strided_slice(ctx):
    """NumPy's basic indexing: a Slice of the range each axis keeps, a Gather along each axis
    whose stride is not 1, and a Reshape for the axes added and removed."""
    x = ctx.input(0)
    index = _index(ctx)
    try:
        result_shape = np.broadcast_to(np.empty((), np.int8), x.shape)[index].shape
    except IndexError as exc:
        raise ctx.error(f"{exc} (input shape {list(x.shape)})") from None
    # The item of each axis of x: the Ellipsis stands for the axes no other item names.
    named = [item for item in index if item is not None]
    at = named.index(Ellipsis)
    dense = named[:at] + [slice(None)] * (x.rank - len(named) + 1) + named[at + 1:]
    begins, sizes, strided = [], [], {}
    for axis, (item, size) in enumerate(zip(dense, x.shape)):
        if isinstance(item, slice):
            positions = range(*item.indices(size))
        else:
            positions = range(item % size, item % size + 1)
        low = min(positions[0], positions[-1]) if len(positions) else 0
        begins.append(low)
        sizes.append(abs(positions[-1] - positions[0]) + 1 if len(positions) else 0)
        if len(positions) > 1 and positions.step != 1:
            strided[axis] = [p - low for p in positions]
    y = _slice(ctx, x, begins, sizes)
    for axis, positions in strided.items():
        y = ctx.op("Gather", [y, ctx.const(positions, "int32")], {"axis": axis or None})
    return ctx.reshape(y, result_shape)


@converter("Pad", "PadV2", "MirrorPad")
def _pad(ctx):
    x = ctx.input(0)
    paddings = np.asarray(ctx.value(1)).reshape(x.rank, 2)
    pads = [int(p) for p in paddings[:, 0]] + [int(p) for p in paddings[:, 1]]
    if not any(pads):
        return x
    mode = {"REFLECT": "reflect", None: "constant"}.get(ctx.attr("mode", None))
    if mode is None:
        raise ctx.error(f"mode {ctx.attr('mode')} is not supported (REFLECT)")
    value = [ctx.reshape(ctx.input(2), ())] if ctx.op_type == "PadV2" else []
    return ctx.op("Pad", [x] + value, {"pads": pads, "mode": mode})


@converter("GatherV2", "Gather")
def _gather(ctx):
    params, indices = ctx.input(0), ctx.input(1)
    if ctx.attr("batch_dims", 0):
        raise ctx.error("batch_dims is not supported")
    axis = _axis(ctx.ints(2)[0], params.rank) if ctx.op_type == "GatherV2" else 0
    return ctx.op("Gather", [params, indices], {"axis": axis or None})


@converter("OneHot")
def _one_hot(ctx):
    """tf.one_hot: ``on_value`` where the new axis (``axis``, default last) equals the index,
    ``off_value`` elsewhere; ``depth`` must be known at import time. Unlike myelin's (ONNX's)
    OneHot, a negative index gives a row of ``off_value``: it is moved past the end."""
    indices, on, off = ctx.input(0), ctx.input(2), ctx.input(3)
    (depth,) = ctx.ints(1)
    values = _concat(ctx, [ctx.reshape(off, (1,)), ctx.reshape(on, (1,))], 0)
    negative = ctx.op("Less", [indices, ctx.const(0, indices.dtype)])
    indices = ctx.op("Cond", [negative, ctx.const(depth, indices.dtype), indices])
    return ctx.op("OneHot", [indices, values], {"depth": depth, "axis": ctx.attr("axis", -1)})


@converter("Tile")
def _tile(ctx):
    return ctx.op("Tile", [ctx.input(0)], {"repeats": ctx.ints(1)})


@converter("BroadcastTo")
def _broadcast_to(ctx):
    x = ctx.input(0)
    shape = tuple(np.broadcast_shapes(x.shape, tuple(ctx.ints(1))))
    return x if shape == x.shape else ctx.op("BroadcastTo", [x], {"shape": list(shape)})


@converter("Fill")
def _fill(ctx):
    value = ctx.reshape(ctx.input(1), ())
    return ctx.op("BroadcastTo", [value], {"shape": ctx.ints(0)})


@converter("ZerosLike", "OnesLike")
def _like(ctx):
    x = ctx.input(0)
    return ctx.const(np.full(x.shape, ctx.op_type == "OnesLike"), x.dtype)


# Shape queries: shapes are concrete, so they are constants.
@converter("Shape")
def _shape(ctx):
    return ctx.const(np.array(ctx.input(0).shape), ctx.dtype("out_type", "int32"))


@converter("ShapeN")
def _shape_n(ctx):
    dtype = ctx.dtype("out_type", "int32")
    return [ctx.const(np.array(var.shape), dtype) for var in ctx.inputs]


@converter("Size")
def _size(ctx):
    return ctx.const(ctx.input(0).elements, ctx.dtype("out_type", "int32"))


@converter("Rank")
def _rank(ctx):
    return ctx.const(ctx.input(0).rank, "int32")


@converter("Range")
def _range(ctx):
    start, limit, delta = (np.asarray(ctx.value(i)).reshape(()) for i in range(3))
    if delta == 0:
        raise ctx.error("delta must not be 0")
    return ctx.const(np.arange(start, limit, delta), ctx.dtype("Tidx", ctx.input(0).dtype))
