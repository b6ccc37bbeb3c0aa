"""ONNX ops that shape and move data: Reshape and friends, Transpose, Concat, Split, Slice,
Gather, Expand, Tile, Pad, constants and shape queries.

Shape-like inputs (a Reshape's shape, Slice's starts, ...) are read as constants through
``ctx.value``; the importer specializes the model on them when they come from graph inputs.
Because shapes are concrete, shape queries (Shape, Size) become constants.
"""

import numpy as np

from myelin.flow import dtypes
from myelin.importers.onnx import proto
from myelin.importers.onnx.converters import converter


def _axes(ctx, index, attr="axes"):
    """Axes from attribute ``attr`` (older opsets) or input ``index`` (newer); None if absent."""
    if attr in ctx.attrs:
        return list(ctx.attrs[attr])
    return ctx.ints(index) if ctx.has(index) else None


@converter("Reshape")
def _reshape(ctx):
    x = ctx.input(0)
    shape = ctx.ints(1) if ctx.opset >= 5 else list(ctx.attr("shape"))
    allow_zero = ctx.attr("allowzero", 0)
    resolved = [x.shape[i] if d == 0 and not allow_zero else d for i, d in enumerate(shape)]
    if -1 in resolved:
        known = int(np.prod([d for d in resolved if d != -1], dtype=np.int64))
        resolved[resolved.index(-1)] = x.elements // known if known else 0
    return ctx.reshape(x, resolved)


@converter("Flatten")
def _flatten(ctx):
    x = ctx.input(0)
    axis = ctx.axis(ctx.attr("axis", 1), x.rank, past_end=True)
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    return ctx.reshape(x, (outer, int(np.prod(x.shape[axis:], dtype=np.int64))))


@converter("Squeeze")
def _squeeze(ctx):
    x = ctx.input(0)
    axes = _axes(ctx, 1)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = {ctx.axis(a, x.rank) for a in axes}
    for a in axes:
        if x.shape[a] != 1:
            raise ctx.error(f"axis {a} of shape {list(x.shape)} is not 1")
    return ctx.reshape(x, [d for i, d in enumerate(x.shape) if i not in axes])


@converter("Unsqueeze")
def _unsqueeze(ctx):
    x = ctx.input(0)
    axes = _axes(ctx, 1)
    rank = x.rank + len(axes)
    axes = sorted(ctx.axis(a, rank) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return ctx.reshape(x, shape)


@converter("Transpose")
def _transpose(ctx):
    x = ctx.input(0)
    perm = list(ctx.attr("perm", range(x.rank)[::-1]))
    if perm == list(range(x.rank)):
        return x
    return ctx.op("Transpose", [x], {"perm": perm})


@converter("Concat")
def _concat(ctx):
    axis = ctx.axis(ctx.attr("axis", 1), ctx.input(0).rank)     # (optional before opset 4)
    parts = [var for var in ctx.inputs if 0 not in var.shape]
    if len(parts) == 1:
        return parts[0]
    parts = parts or ctx.inputs      # all empty: an empty result, of the joined shape
    return ctx.op("Concat", parts + [ctx.const(axis, "int32")], {"N": len(parts)})


def _slice(ctx, x, begins, ends):
    """The block of ``x`` from ``begins`` to ``ends`` (clamped, one per axis)."""
    if list(begins) == [0] * x.rank and list(ends) == list(x.shape):
        return x
    sizes = [e - b for b, e in zip(begins, ends)]
    return ctx.op("Slice", [x, ctx.const(begins, "int32"), ctx.const(sizes, "int32")])


@converter("Split")
def _split(ctx):
    x = ctx.input(0)
    axis = ctx.axis(ctx.attr("axis", 0), x.rank)
    count = ctx.num_outputs
    sizes = list(ctx.attrs["split"]) if "split" in ctx.attrs else ctx.ints(1)
    if sizes is None:
        length = x.shape[axis]
        count = ctx.attr("num_outputs", count)
        chunk = -(-length // count)
        sizes = [min(chunk, length - i * chunk) for i in range(count)]
    if sum(sizes) != x.shape[axis]:
        raise ctx.error(f"split sizes {sizes} do not add up to {x.shape[axis]}")
    outputs, start = [], 0
    for size in sizes:
        begins = [0] * x.rank
        ends = list(x.shape)
        begins[axis], ends[axis] = start, start + size
        outputs.append(_slice(ctx, x, begins, ends))
        start += size
    return outputs


@converter("Slice")
def _slice_op(ctx):
    """Slices with steps: a contiguous Slice for the range, then a Gather of every step-th
    index along each axis whose step is not 1."""
    x = ctx.input(0)
    if ctx.opset < 10:
        starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
        axes, steps = ctx.attr("axes", None), None
    else:
        starts, ends = ctx.ints(1), ctx.ints(2)
        axes, steps = ctx.ints(3), ctx.ints(4)
    axes = [ctx.axis(a, x.rank) for a in (axes if axes is not None else range(len(starts)))]
    steps = steps or [1] * len(axes)
    begins, stops = [0] * x.rank, list(x.shape)
    strided = {}
    for axis, start, end, step in zip(axes, starts, ends, steps):
        indices = range(*slice(start, end, step).indices(x.shape[axis]))
        if step == 1 or len(indices) <= 1:
            begins[axis] = indices.start if len(indices) else 0
            stops[axis] = begins[axis] + len(indices)
        else:
            low = min(indices[0], indices[-1])
            begins[axis], stops[axis] = low, max(indices[0], indices[-1]) + 1
            strided[axis] = [i - low for i in indices]
    y = _slice(ctx, x, begins, stops)
    for axis, indices in strided.items():
        y = ctx.op("Gather", [y, ctx.const(indices, "int64")], {"axis": axis})
    return y


@converter("Gather")
def _gather(ctx):
    """Rows along ``axis``; negative indices count from the end (ONNX)."""
    data, indices = ctx.input(0), ctx.input(1)
    axis = ctx.axis(ctx.attr("axis", 0), data.rank)
    size = data.shape[axis]
    if indices.data is not None:
        indices = ctx.const(np.where(indices.data < 0, indices.data + size, indices.data),
                            indices.dtype)
    else:
        negative = ctx.op("Less", [indices, ctx.const(0, indices.dtype)])
        wrapped = ctx.op("Add", [indices, ctx.const(size, indices.dtype)])
        indices = ctx.op("Cond", [negative, wrapped, indices])
    return ctx.op("Gather", [data, indices], {"axis": axis or None})


@converter("Expand")
def _expand(ctx):
    x = ctx.input(0)
    try:
        shape = tuple(np.broadcast_shapes(x.shape, tuple(ctx.ints(1))))
    except ValueError:       # (negative sizes too)
        raise ctx.error(f"shape {list(x.shape)} does not broadcast to {ctx.ints(1)}") from None
    if shape == x.shape:
        return x
    return ctx.op("BroadcastTo", [x], {"shape": list(shape)})


@converter("Tile")
def _tile(ctx):
    """Repeats per axis (input 1); before opset 6, ``tiles`` repeats along ``axis`` (inputs
    1 and 2)."""
    x = ctx.input(0)
    if len(ctx) == 3:
        repeats = [1] * x.rank
        repeats[ctx.axis(ctx.ints(2)[0], x.rank)] = ctx.ints(1)[0]
        return ctx.op("Tile", [x], {"repeats": repeats})
    return ctx.op("Tile", [x], {"repeats": ctx.ints(1)})


@converter("Pad")
def _pad(ctx):
    """Pads from the attribute (before opset 11) or input 1, optionally only on ``axes``."""
    x = ctx.input(0)
    mode = ctx.attr("mode", "constant")
    if ctx.opset < 11:
        pads = list(ctx.attr("pads" if ctx.opset >= 2 else "paddings"))
        value, axes = ctx.attr("value", 0.0), None
        value_var = ctx.const(value, x.dtype)
    else:
        pads = ctx.ints(1)
        value_var = ctx.input(2) if ctx.has(2) else None
        axes = ctx.ints(3)
    if axes is not None:
        full = [0] * (2 * x.rank)
        axes = [ctx.axis(a, x.rank) for a in axes]
        for i, a in enumerate(axes):
            full[a], full[a + x.rank] = pads[i], pads[i + len(axes)]
        pads = full
    inputs = [x] + ([ctx.reshape(value_var, ())] if value_var is not None else [])
    return ctx.op("Pad", inputs, {"pads": pads, "mode": mode})


# Constants and shape queries.
@converter("Constant")
def _constant(ctx):
    for name in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if name in ctx.attrs:
            value = np.asarray(ctx.attrs[name])
            if name.startswith("value_int"):
                value = value.astype(np.int64)
            elif name.startswith("value_float"):
                value = value.astype(np.float32)
            return ctx.const(value)
    raise ctx.error(f"no supported value attribute among {sorted(ctx.attrs)}")


@converter("ConstantOfShape")
def _constant_of_shape(ctx):
    """The fill value broadcast to the shape: a constant when it is small enough to fold (see
    ``ctx.op``), else an op that fills it at run time."""
    fill = np.asarray(ctx.attr("value", np.zeros(1, np.float32)))
    if fill.size != 1:
        raise ctx.error(f"value must have one element, not shape {list(fill.shape)}")
    return ctx.op("BroadcastTo", [ctx.const(fill.reshape(()))], {"shape": ctx.ints(0)})


@converter("Shape")
def _shape(ctx):
    shape = ctx.input(0).shape
    start, end = ctx.attr("start", 0), ctx.attr("end", len(shape))
    return ctx.const(np.array(shape[slice(start, end)], np.int64))


@converter("Size")
def _size(ctx):
    return ctx.const(np.int64(ctx.input(0).elements))


@converter("Range")
def _range(ctx):
    values = [np.asarray(ctx.value(i)) for i in range(3)]
    for name, value in zip(("start", "limit", "delta"), values):
        if value.size != 1:
            raise ctx.error(f"{name} must have one element, not shape {list(value.shape)}")
    start, limit, delta = (value.reshape(-1)[0] for value in values)
    if delta == 0:
        raise ctx.error("delta must not be 0")
    count = (limit.item() - start.item()) / delta.item()
    if not np.isfinite(count):
        raise ctx.error(f"start {start}, limit {limit} and delta {delta} give no length")
    ctx.check_size([max(int(np.ceil(count)), 0)], dtypes.from_numpy(values[0].dtype))
    return ctx.const(np.arange(start, limit, delta).astype(values[0].dtype))


@converter("EyeLike")
def _eye_like(ctx):
    x = ctx.input(0)
    dtype = proto.dtype_of(ctx.attr("dtype"), f"EyeLike {ctx.name}") if "dtype" in ctx.attrs \
        else x.dtype
    if x.rank != 2:
        raise ctx.error(f"input must be 2-D, not of shape {list(x.shape)}")
    ctx.check_size(x.shape, dtype)
    return ctx.const(np.eye(*x.shape, ctx.attr("k", 0), dtypes.to_numpy(dtype)))


@converter("DepthToSpace")
def _depth_to_space(ctx):
    x = ctx.input(0)
    n, c, h, w = x.shape
    bs = ctx.attr("blocksize")
    if ctx.attr("mode", "DCR") == "DCR":
        blocks = ctx.reshape(x, (n, bs, bs, c // bs ** 2, h, w))
        perm = [0, 3, 4, 1, 5, 2]
    else:
        blocks = ctx.reshape(x, (n, c // bs ** 2, bs, bs, h, w))
        perm = [0, 1, 4, 2, 5, 3]
    moved = ctx.op("Transpose", [blocks], {"perm": perm})
    return ctx.reshape(moved, (n, c // bs ** 2, h * bs, w * bs))


@converter("SpaceToDepth")
def _space_to_depth(ctx):
    x = ctx.input(0)
    n, c, h, w = x.shape
    bs = ctx.attr("blocksize")
    blocks = ctx.reshape(x, (n, c, h // bs, bs, w // bs, bs))
    perm = [0, 3, 5, 1, 2, 4] if ctx.attr("mode", "DCR") == "DCR" else [0, 1, 3, 5, 2, 4]
    moved = ctx.op("Transpose", [blocks], {"perm": perm})
    return ctx.reshape(moved, (n, c * bs * bs, h // bs, w // bs))
