"""Indexing ATen ops: embeddings, ``index_select``, ``gather``, advanced indexing
(``index.Tensor``) and its writes (``index_put``), scatters, one-hot, and what depends on
values (``nonzero``, boolean masks), computed at import when those values are known.

Negative indices count from the end in PyTorch: constant indices are wrapped at import,
computed ones by a Cond at run time.
"""

import numpy as np

from myelin.flow.graph import Variable
from myelin.importers.torch.converters import converter
from myelin.importers.torch.converters.array import transpose


def wrapped(ctx, indices, size):
    """``indices`` (int) with negative entries counted from the end of an axis of ``size``."""
    if indices.dtype == "bool":
        raise ctx.error("boolean indices need their values at import (a mask computed at "
                        "run time gives a shape known only then)")
    if indices.data is not None:
        data = np.asarray(indices.data)
        return ctx.const(np.where(data < 0, data + size, data).astype(np.int64))
    negative = ctx.op("Less", [indices, ctx.scalar(0, indices.dtype)])
    shifted = ctx.op("Add", [indices, ctx.scalar(size, indices.dtype)])
    return ctx.op("Cond", [negative, shifted, indices])


@converter("aten.embedding")
def _embedding(ctx):
    weight, indices = ctx.tensor("weight"), ctx.tensor("indices")
    return ctx.op("Gather", [weight, wrapped(ctx, indices, weight.shape[0])])


@converter("aten.index_select")
def _index_select(ctx):
    x = ctx.tensor("self")
    axis = ctx.axis(ctx["dim"], x.rank)
    index = ctx.tensor("index")
    if x.rank == 0:
        return ctx.reshape(x, index.shape)
    return ctx.op("Gather", [x, wrapped(ctx, index, x.shape[axis])], {"axis": axis or None})


@converter("aten.gather")
def _gather(ctx):
    x, index = ctx.tensor("self"), ctx.tensor("index")
    axis = ctx.axis(ctx["dim"], x.rank)
    return ctx.op("GatherElements", [x, wrapped(ctx, index, x.shape[axis])], {"axis": axis})


def _index_tensors(ctx, x, indices):
    """The index tensors of ``x[indices]`` (None for a whole axis), boolean masks of known
    values turned into the integer indices of their true entries."""
    result = []
    for index in indices:
        if isinstance(index, Variable) and index.dtype == "bool":
            if index.data is None:
                raise ctx.error("a boolean mask computed at run time selects a number of "
                                "elements known only then")
            positions = np.nonzero(np.asarray(index.data))
            result.extend(ctx.const(p.astype(np.int64)) for p in positions)
        else:
            result.append(index)
    return result + [None] * (x.rank - len(result))


def _advanced(ctx, x, indices):
    """(data with the indexed axes first, their stacked indices [B..., k], the axis where
    the result's index axes go, the broadcast shape B of the indices, the positions)."""
    positions = [i for i, index in enumerate(indices) if index is not None]
    tensors = [wrapped(ctx, ctx.cast(indices[i], "int64"), x.shape[i]) for i in positions]
    shape = tuple(np.broadcast_shapes(*(t.shape for t in tensors)))
    stacked = ctx.concat([ctx.reshape(ctx.broadcast(t, shape), shape + (1,)) for t in tensors],
                         len(shape))
    rest = [i for i in range(x.rank) if i not in positions]
    data = transpose(ctx, x, positions + rest)
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    return data, stacked, (positions[0] if adjacent else 0), shape, positions


@converter("aten.index.Tensor", "aten._unsafe_index.Tensor")
def _index(ctx):
    """``x[i, j, ...]`` with index tensors (None: the whole axis): a Gather for one index, a
    GatherND of the indexed axes moved first for several; the index axes of the result stand
    where the indexed axes were when these are adjacent, else first (NumPy's rule)."""
    x = ctx.tensor("self")
    indices = _index_tensors(ctx, x, ctx["indices"])
    positions = [i for i, index in enumerate(indices) if index is not None]
    if not positions:
        return x
    if len(positions) == 1:
        axis = positions[0]
        index = wrapped(ctx, ctx.cast(indices[axis], "int64"), x.shape[axis])
        return ctx.op("Gather", [x, index], {"axis": axis or None})
    data, stacked, where, shape, positions = _advanced(ctx, x, indices)
    gathered = ctx.op("GatherND", [data, stacked])
    if where == 0:
        return gathered
    batch = len(shape)
    perm = list(range(batch, batch + where)) + list(range(batch)) + \
        list(range(batch + where, gathered.rank))
    return transpose(ctx, gathered, perm)


@converter("aten.index_put", "aten._unsafe_index_put")
def _index_put(ctx):
    """``x[i, j, ...] = values`` (added with ``accumulate``): a ScatterND on the indexed
    axes moved first, its updates the values broadcast to the selection's shape."""
    x = ctx.tensor("self")
    indices = _index_tensors(ctx, x, ctx["indices"])
    values = ctx.operand(ctx["values"], x.dtype)
    positions = [i for i, index in enumerate(indices) if index is not None]
    if not positions:
        return ctx.broadcast(values, x.shape)
    data, stacked, where, shape, positions = _advanced(ctx, x, indices)
    rest = [i for i in range(x.rank) if i not in positions]
    selection = tuple(shape) + tuple(x.shape[i] for i in rest)
    if where:
        # The values are given in the result's layout (index axes at ``where``): move them
        # first, as the scatter wants them.
        batch = len(shape)
        laid_out = tuple(x.shape[i] for i in rest[:where]) + tuple(shape) + \
            tuple(x.shape[i] for i in rest[where:])
        values = ctx.broadcast(values, laid_out)
        perm = list(range(where, where + batch)) + list(range(where)) + \
            list(range(where + batch, len(laid_out)))
        values = transpose(ctx, values, perm)
    updates = ctx.broadcast(values, selection)
    reduction = "add" if ctx.get("accumulate") else "none"
    scattered = ctx.op("ScatterND", [data, stacked, updates], {"reduction": reduction})
    order = positions + rest
    inverse = [order.index(i) for i in range(x.rank)]
    return transpose(ctx, scattered, inverse)


@converter("aten.scatter")
def _scatter(ctx):
    x, index = ctx.tensor("self"), ctx.tensor("index")
    axis = ctx.axis(ctx["dim"], x.rank)
    source = ctx.args.get("src")
    if source is None:
        source = ctx.broadcast(ctx.operand(ctx["value"], x.dtype), index.shape)
    elif source.shape != index.shape:
        source = _cropped(ctx, source, index.shape)
    reduction = {None: "none", "add": "add", "multiply": "mul"}[ctx.args.get("reduce")]
    return ctx.op("ScatterElements", [x, wrapped(ctx, index, x.shape[axis]),
                                      ctx.cast(source, x.dtype)],
                  {"axis": axis, "reduction": reduction})


def _cropped(ctx, x, shape):
    for axis, size in enumerate(shape):
        x = ctx.slice(x, axis, 0, size)
    return x


@converter("aten.scatter_add")
def _scatter_add(ctx):
    x, index, source = ctx.tensor("self"), ctx.tensor("index"), ctx.tensor("src")
    axis = ctx.axis(ctx["dim"], x.rank)
    if source.shape != index.shape:
        source = _cropped(ctx, source, index.shape)
    return ctx.op("ScatterElements", [x, wrapped(ctx, index, x.shape[axis]),
                                      ctx.cast(source, x.dtype)],
                  {"axis": axis, "reduction": "add"})


@converter("aten.scatter_reduce")
def _scatter_reduce(ctx):
    x, index, source = ctx.tensor("self"), ctx.tensor("index"), ctx.tensor("src")
    axis = ctx.axis(ctx["dim"], x.rank)
    reduction = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}.get(ctx["reduce"])
    if reduction is None or not ctx.get("include_self", True):
        raise ctx.error(f"scatter_reduce {ctx['reduce']!r} (include_self="
                        f"{ctx.get('include_self', True)}) is not supported")
    if source.shape != index.shape:
        source = _cropped(ctx, source, index.shape)
    return ctx.op("ScatterElements", [x, wrapped(ctx, index, x.shape[axis]),
                                      ctx.cast(source, x.dtype)],
                  {"axis": axis, "reduction": reduction})


@converter("aten.one_hot")
def _one_hot(ctx):
    x = ctx.tensor("self")
    depth = int(ctx.get("num_classes", -1))
    if depth < 0:
        if x.data is None:
            raise ctx.error("one_hot without num_classes needs its indices at import")
        depth = int(np.max(x.data)) + 1
    values = ctx.const(np.array([0, 1], np.int64))
    return ctx.op("OneHot", [x, values], {"depth": depth})


@converter("aten.nonzero")
def _nonzero(ctx):
    x = ctx.tensor("self")
    if x.data is None:
        raise ctx.error("nonzero of values computed at run time gives a shape known only "
                        "then; myelin compiles for shapes known at import")
    return ctx.const(np.argwhere(np.asarray(x.data)).astype(np.int64))


@converter("aten.masked_select")
def _masked_select(ctx):
    x, mask = ctx.tensor("self"), ctx.tensor("mask")
    if mask.data is None:
        raise ctx.error("masked_select with a mask computed at run time gives a shape known "
                        "only then")
    shape = tuple(np.broadcast_shapes(x.shape, mask.shape))
    picks = np.flatnonzero(np.broadcast_to(np.asarray(mask.data), shape))
    flat = ctx.reshape(ctx.broadcast(x, shape), (int(np.prod(shape, dtype=np.int64)),))
    return ctx.op("Gather", [flat, ctx.const(picks.astype(np.int64))])
