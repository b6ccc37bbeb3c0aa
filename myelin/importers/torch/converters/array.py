"""ATen ops that shape and move data: views and reshapes, permutes, expands, joins and
splits, slices and selects, repeats, flips, rolls and triangles.

Shapes are concrete, so a view is a Reshape (or nothing) and a slice's bounds are clamped
here as PyTorch clamps them; a slice with a step takes every step-th index with a Gather.
"""

import numpy as np

from myelin.importers.torch.converters import converter


def resolved(ctx, x, size):
    """``size`` with its -1 resolved so that the element count of ``x`` is kept."""
    size = [int(d) for d in size]
    if -1 in size:
        known = int(np.prod([d for d in size if d != -1], dtype=np.int64))
        size[size.index(-1)] = x.elements // known if known else 0
    if int(np.prod(size, dtype=np.int64)) != x.elements:
        raise ctx.error(f"shape {size} does not fit {x.elements} elements of shape "
                        f"{list(x.shape)}")
    return tuple(size)


@converter("aten.view", "aten._unsafe_view", "aten.reshape", "aten.view_copy",
           "aten._reshape_alias")
def _view(ctx):
    x = ctx.tensor("self")
    if "dtype" in ctx.args and "size" not in ctx.args:     # view(dtype): a bit cast
        raise ctx.error("viewing a tensor as another type is not supported")
    return ctx.reshape(x, resolved(ctx, x, ctx["size"] if "size" in ctx.args else ctx["shape"]))


@converter("aten.flatten")
def _flatten(ctx):
    x = ctx.tensor("self")
    if x.rank == 0:
        return ctx.reshape(x, (1,))
    start, end = ctx.axis(ctx.get("start_dim", 0), x.rank), ctx.axis(ctx.get("end_dim", -1),
                                                                       x.rank)
    shape = x.shape[:start] + (int(np.prod(x.shape[start:end + 1], dtype=np.int64)),) + \
        x.shape[end + 1:]
    return ctx.reshape(x, shape)


@converter("aten.unflatten")
def _unflatten(ctx):
    x = ctx.tensor("self")
    axis = ctx.axis(ctx["dim"], x.rank)
    sizes = list(ctx["sizes"])
    if -1 in sizes:
        known = int(np.prod([d for d in sizes if d != -1], dtype=np.int64))
        sizes[sizes.index(-1)] = x.shape[axis] // known if known else 0
    return ctx.reshape(x, x.shape[:axis] + tuple(sizes) + x.shape[axis + 1:])


@converter("aten.squeeze", "aten.squeeze_copy")
def _squeeze(ctx):
    x = ctx.tensor("self")
    dims = ctx.args.get("dim", ctx.args.get("dims"))
    if dims is None:
        axes = {i for i, d in enumerate(x.shape) if d == 1}
    else:
        axes = {a for a in ctx.axes(dims if isinstance(dims, (list, tuple)) else [dims], x.rank)
                if x.rank and x.shape[a] == 1}
    return ctx.reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


@converter("aten.unsqueeze", "aten.unsqueeze_copy")
def _unsqueeze(ctx):
    x = ctx.tensor("self")
    axis = ctx.axis(ctx["dim"], x.rank + 1)
    return ctx.reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])


def transpose(ctx, x, perm):
    perm = [ctx.axis(p, x.rank) for p in perm]
    if perm == list(range(x.rank)):
        return x
    return ctx.op("Transpose", [x], {"perm": perm})


@converter("aten.permute", "aten.permute_copy")
def _permute(ctx):
    return transpose(ctx, ctx.tensor("self"), ctx["dims"])


@converter("aten.transpose", "aten.transpose_copy", "aten.swapaxes", "aten.swapdims")
def _transpose(ctx):
    x = ctx.tensor("self")
    if x.rank < 2:
        return x
    a = ctx.axis(ctx.args.get("dim0", ctx.args.get("axis0")), x.rank)
    b = ctx.axis(ctx.args.get("dim1", ctx.args.get("axis1")), x.rank)
    perm = list(range(x.rank))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(ctx, x, perm)


@converter("aten.t", "aten.numpy_T")
def _t(ctx):
    x = ctx.tensor("self")
    return transpose(ctx, x, list(reversed(range(x.rank))))


@converter("aten.expand", "aten.expand_copy", "aten.broadcast_to")
def _expand(ctx):
    x = ctx.tensor("self")
    size = [int(d) for d in ctx["size"]]
    offset = len(size) - x.rank
    shape = [x.shape[i - offset] if d == -1 else d for i, d in enumerate(size)]
    return ctx.broadcast(x, shape)


@converter("aten.cat", "aten.concat", "aten.concatenate")
def _cat(ctx):
    dtype = ctx.out_dtype
    tensors = [ctx.cast(t, dtype) for t in ctx["tensors"]]
    # PyTorch skips 1-D empty tensors of any rank beside the others (legacy behaviour).
    shaped = [t for t in tensors if not (t.rank == 1 and t.shape[0] == 0)] or tensors[:1]
    axis = ctx.axis(ctx.get("dim", 0), shaped[0].rank)
    return ctx.concat(shaped, axis)


@converter("aten.stack")
def _stack(ctx):
    dtype = ctx.out_dtype
    tensors = [ctx.cast(t, dtype) for t in ctx["tensors"]]
    axis = ctx.axis(ctx.get("dim", 0), tensors[0].rank + 1)
    parts = [ctx.reshape(t, t.shape[:axis] + (1,) + t.shape[axis:]) for t in tensors]
    return ctx.concat(parts, axis)


def strided(ctx, x, axis, start, end, step):
    """``x`` along ``axis`` from ``start`` to ``end`` by ``step``, bounds as Python clamps
    them (None: the ends of the axis)."""
    size = x.shape[axis]
    indices = range(*slice(start, end, step).indices(size))
    if len(indices) == 0:
        return ctx.slice(x, axis, 0, 0)
    if step == 1 or len(indices) == 1:
        return ctx.slice(x, axis, indices[0], indices[0] + len(indices))
    low = indices[0]
    block = ctx.slice(x, axis, low, indices[-1] + 1)
    picks = ctx.const(np.array([i - low for i in indices], np.int64))
    return ctx.op("Gather", [block, picks], {"axis": axis or None})


@converter("aten.slice", "aten.slice_copy")
def _slice(ctx):
    x = ctx.tensor("self")
    if x.rank == 0:
        return x
    axis = ctx.axis(ctx.get("dim", 0), x.rank)
    step = int(ctx.get("step", 1))
    if step <= 0:
        raise ctx.error(f"slice step {step} must be positive")
    start, end = ctx.args.get("start"), ctx.args.get("end")
    start = None if start is None else int(start)
    end = None if end is None else int(max(min(end, 2 ** 62), -2 ** 62))
    return strided(ctx, x, axis, start, end, step)


@converter("aten.narrow", "aten.narrow_copy")
def _narrow(ctx):
    x = ctx.tensor("self")
    axis = ctx.axis(ctx["dim"], x.rank)
    start = int(ctx["start"])
    start = start + x.shape[axis] if start < 0 else start
    return ctx.slice(x, axis, start, start + int(ctx["length"]))


def select(ctx, x, axis, index):
    index = int(index)
    size = x.shape[axis]
    if not -size <= index < size:
        raise ctx.error(f"index {index} is out of range for dim {axis} of size {size}")
    index = index + size if index < 0 else index
    part = ctx.slice(x, axis, index, index + 1)
    return ctx.reshape(part, x.shape[:axis] + x.shape[axis + 1:])


@converter("aten.select", "aten.select_copy")
def _select(ctx):
    x = ctx.tensor("self")
    return select(ctx, x, ctx.axis(ctx["dim"], x.rank), ctx["index"])


@converter("aten.unbind", "aten.unbind_copy")
def _unbind(ctx):
    x = ctx.tensor("self")
    axis = ctx.axis(ctx.get("dim", 0), x.rank)
    return [select(ctx, x, axis, i) for i in range(x.shape[axis])]


def _split(ctx, x, axis, sizes):
    parts, start = [], 0
    for size in sizes:
        parts.append(ctx.slice(x, axis, start, start + size))
        start += size
    return parts


@converter("aten.split_with_sizes", "aten.split_with_sizes_copy")
def _split_with_sizes(ctx):
    x = ctx.tensor("self")
    axis = ctx.axis(ctx.get("dim", 0), x.rank)
    return _split(ctx, x, axis, [int(s) for s in ctx["split_sizes"]])


@converter("aten.split", "aten.split_copy", "aten.unsafe_split")
def _split_op(ctx):
    x = ctx.tensor("self")
    axis = ctx.axis(ctx.get("dim", 0), x.rank)
    size = ctx.args.get("split_size", ctx.args.get("split_size_or_sections"))
    if isinstance(size, (list, tuple)):
        return _split(ctx, x, axis, [int(s) for s in size])
    size, length = int(size), x.shape[axis]
    sizes = [min(size, length - start) for start in range(0, length, size)] or [0]
    return _split(ctx, x, axis, sizes)


@converter("aten.chunk")
def _chunk(ctx):
    x = ctx.tensor("self")
    axis = ctx.axis(ctx.get("dim", 0), x.rank)
    length, chunks = x.shape[axis], int(ctx["chunks"])
    size = -(-length // chunks)
    sizes = [min(size, length - start) for start in range(0, length, size)] or [0]
    return _split(ctx, x, axis, sizes)


@converter("aten.repeat")
def _repeat(ctx):
    x = ctx.tensor("self")
    repeats = [int(r) for r in ctx["repeats"]]
    if len(repeats) > x.rank:
        x = ctx.reshape(x, (1,) * (len(repeats) - x.rank) + x.shape)
    if all(r == 1 for r in repeats):
        return x
    return ctx.op("Tile", [x], {"repeats": repeats})


@converter("aten.repeat_interleave.self_int")
def _repeat_interleave(ctx):
    x = ctx.tensor("self")
    repeats = int(ctx["repeats"])
    dim = ctx.args.get("dim")
    if dim is None:
        x, axis = ctx.reshape(x, (x.elements,)), 0
    else:
        axis = ctx.axis(dim, x.rank)
    shape = x.shape[:axis + 1] + (repeats,) + x.shape[axis + 1:]
    expanded = ctx.broadcast(ctx.reshape(x, x.shape[:axis + 1] + (1,) + x.shape[axis + 1:]),
                             shape)
    return ctx.reshape(expanded, x.shape[:axis] + (x.shape[axis] * repeats,) + x.shape[axis + 1:])


@converter("aten.flip")
def _flip(ctx):
    x = ctx.tensor("self")
    for axis in ctx.axes(ctx["dims"], x.rank):
        if x.shape[axis] > 1:
            reverse = ctx.const(np.arange(x.shape[axis] - 1, -1, -1, dtype=np.int64))
            x = ctx.op("Gather", [x, reverse], {"axis": axis or None})
    return x


@converter("aten.roll.default", preserve=True)
def _roll(ctx):
    """Each axis rotated by its shift: two slices, joined the other way round."""
    x = ctx.tensor("self")
    shifts = ctx["shifts"]
    shifts = [int(s) for s in (shifts if isinstance(shifts, (list, tuple)) else [shifts])]
    dims = ctx.args.get("dims") or []
    if not dims:
        flat = ctx.reshape(x, (x.elements,))
        return ctx.reshape(_rolled(ctx, flat, 0, shifts[0]), x.shape)
    for shift, dim in zip(shifts, dims):
        x = _rolled(ctx, x, ctx.axis(dim, x.rank), shift)
    return x


def _rolled(ctx, x, axis, shift):
    size = x.shape[axis]
    if size == 0:
        return x
    shift %= size
    if shift == 0:
        return x
    return ctx.concat([ctx.slice(x, axis, size - shift, size), ctx.slice(x, axis, 0, size - shift)],
                      axis)


@converter("aten.tril", "aten.triu")
def _triangle(ctx):
    x = ctx.tensor("self")
    return ctx.op("Trilu", [x], {"upper": ctx.op_type.startswith("aten.triu"),
                                 "k": int(ctx.get("diagonal", 0))})


@converter("aten.copy", "aten._copy_from")
def _copy(ctx):
    """``src`` in ``self``'s type and shape."""
    target = ctx.tensor("self")
    source = ctx.args.get("src")
    return ctx.broadcast(ctx.operand(source, target.dtype), target.shape)


@converter("aten.diagonal", "aten.diagonal_copy")
def _diagonal(ctx):
    x = ctx.tensor("self")
    offset = int(ctx.get("offset", 0))
    a, b = ctx.axis(ctx.get("dim1", 0), x.rank), ctx.axis(ctx.get("dim2", 1), x.rank)
    rest = [i for i in range(x.rank) if i not in (a, b)]
    moved = ctx.op("Transpose", [x], {"perm": rest + [a, b]}) if rest + [a, b] != \
        list(range(x.rank)) else x
    rows, cols = x.shape[a], x.shape[b]
    pairs = [(i, i + offset) for i in range(rows) if 0 <= i + offset < cols]
    batch = tuple(x.shape[i] for i in rest)
    flat = ctx.reshape(moved, batch + (rows * cols,))
    picks = ctx.const(np.array([i * cols + j for i, j in pairs], np.int64))
    return ctx.op("Gather", [flat, picks], {"axis": len(batch) or None})


@converter("aten.slice_scatter")
def _slice_scatter(ctx):
    """``self`` with ``src`` written over ``self[..., start:end:step, ...]``: joined around
    it for step 1, else a ScatterElements of the positions the slice covers."""
    x, source = ctx.tensor("self"), ctx.tensor("src")
    source = ctx.cast(source, x.dtype)
    axis = ctx.axis(ctx.get("dim", 0), x.rank)
    start, end = ctx.args.get("start"), ctx.args.get("end")
    step = int(ctx.get("step", 1))
    indices = range(*slice(None if start is None else int(start),
                           None if end is None else int(min(end, 2 ** 62)),
                           step).indices(x.shape[axis]))
    if len(indices) == 0:
        return x
    if step == 1:
        low, high = indices[0], indices[-1] + 1
        parts = [ctx.slice(x, axis, 0, low), source, ctx.slice(x, axis, high, x.shape[axis])]
        return ctx.concat(parts, axis)
    shape = [1] * x.rank
    shape[axis] = len(indices)
    positions = np.array(list(indices), np.int64).reshape(shape)
    index = ctx.const(np.broadcast_to(positions, source.shape).copy())
    return ctx.op("ScatterElements", [x, index, source], {"axis": axis})


@converter("aten.select_scatter")
def _select_scatter(ctx):
    """``self`` with ``src`` written over ``self.select(dim, index)``."""
    x, source = ctx.tensor("self"), ctx.tensor("src")
    axis = ctx.axis(ctx["dim"], x.rank)
    index = int(ctx["index"])
    index = index + x.shape[axis] if index < 0 else index
    row = ctx.reshape(ctx.cast(source, x.dtype), x.shape[:axis] + (1,) + x.shape[axis + 1:])
    parts = [ctx.slice(x, axis, 0, index), row, ctx.slice(x, axis, index + 1, x.shape[axis])]
    return ctx.concat(parts, axis)
