"""ONNX sequence ops, resolved at import time: SequenceEmpty, SequenceConstruct, SequenceInsert,
SequenceErase, SequenceAt, SequenceLength, ConcatFromSequence, SplitToSequence.

A sequence is a :class:`~myelin.importers.onnx.context.Sequence` of variables. Its length and
the positions its ops use are known while importing (positions are read as constants, like
shapes), so these ops only rearrange variables; the tensors themselves come from Concat,
Slice and Reshape. A sequence may not be a graph input or output.
"""

import numpy as np

from myelin.flow import dtypes
from myelin.importers.onnx import proto
from myelin.importers.onnx.context import Sequence
from myelin.importers.onnx.converters import converter
from myelin.importers.onnx.converters.array import _slice


def _position(ctx, index, length, default, insert=False):
    """The position input ``index`` (``default`` if absent), made non-negative; it must lie in
    [-length, length - 1], or [-length, length] for an insertion."""
    value = ctx.value(index)
    if value is None:
        return default
    if np.ndim(value) != 0 or np.asarray(value).dtype.kind not in "iu":
        raise ctx.error(f"position must be an integer scalar, got {np.asarray(value)!r}")
    position = int(value)
    high = length if insert else length - 1
    if not -length <= position <= high:
        raise ctx.error(f"position {position} is out of range for a sequence of {length}")
    return position + length if position < 0 else position


def _check_type(ctx, seq, tensor):
    if seq and seq[0].dtype != tensor.dtype:
        raise ctx.error(f"a sequence of {seq[0].dtype} cannot hold a {tensor.dtype} tensor")


@converter("SequenceEmpty")
def _sequence_empty(ctx):
    proto.dtype_of(ctx.attr("dtype", 1), f"node {ctx.name}'s dtype")
    return Sequence()


@converter("SequenceConstruct")
def _sequence_construct(ctx):
    tensors = ctx.inputs
    if not tensors:
        raise ctx.error("needs at least one tensor")
    for tensor in tensors[1:]:
        _check_type(ctx, tensors, tensor)
    return Sequence(tensors)


@converter("SequenceInsert")
def _sequence_insert(ctx):
    seq, tensor = ctx.sequence(0), ctx.input(1)
    _check_type(ctx, seq, tensor)
    position = _position(ctx, 2, len(seq), len(seq), insert=True)
    return Sequence(seq[:position] + (tensor,) + seq[position:])


@converter("SequenceErase")
def _sequence_erase(ctx):
    seq = ctx.sequence(0)
    if not seq:
        raise ctx.error("cannot erase from an empty sequence")
    position = _position(ctx, 1, len(seq), len(seq) - 1)
    return Sequence(seq[:position] + seq[position + 1:])


@converter("SequenceAt")
def _sequence_at(ctx):
    seq = ctx.sequence(0)
    if not ctx.has(1):
        raise ctx.error("input 1 (position) is missing")
    return seq[_position(ctx, 1, len(seq), None)]


@converter("SequenceLength")
def _sequence_length(ctx):
    return ctx.const(np.int64(len(ctx.sequence(0))))


@converter("ConcatFromSequence")
def _concat_from_sequence(ctx):
    seq = ctx.sequence(0)
    if not seq:
        raise ctx.error("cannot concatenate an empty sequence")
    new_axis = ctx.attr("new_axis", 0)
    rank = seq[0].rank + (1 if new_axis else 0)
    axis = ctx.axis(ctx.attr("axis"), rank)
    parts = list(seq)
    if new_axis:
        parts = [ctx.reshape(t, t.shape[:axis] + (1,) + t.shape[axis:]) for t in parts]
    for part in parts[1:]:
        _check_type(ctx, parts, part)
        if part.rank != parts[0].rank or any(
                a != b for i, (a, b) in enumerate(zip(part.shape, parts[0].shape)) if i != axis):
            raise ctx.error(f"cannot concatenate shapes {list(parts[0].shape)} and "
                            f"{list(part.shape)} on axis {axis}")
    nonempty = [part for part in parts if 0 not in part.shape]
    if len(nonempty) <= 1:
        if not nonempty:
            shape = list(parts[0].shape)
            shape[axis] = sum(part.shape[axis] for part in parts)
            return ctx.const(np.zeros(shape, dtypes.to_numpy(parts[0].dtype)))
        return nonempty[0]
    return ctx.op("Concat", nonempty + [ctx.const(axis, "int32")], {"N": len(nonempty)})


@converter("SplitToSequence")
def _split_to_sequence(ctx):
    x = ctx.input(0)
    axis = ctx.axis(ctx.attr("axis", 0), x.rank)
    length = x.shape[axis]
    split = ctx.value(1)
    if split is None:
        sizes = [1] * length
    elif np.ndim(split) == 0:
        chunk = int(split)
        if chunk <= 0:
            raise ctx.error(f"split {chunk} must be positive")
        sizes = [min(chunk, length - start) for start in range(0, length, chunk)]
    else:
        sizes = [int(s) for s in np.asarray(split).reshape(-1)]
        if any(s < 0 for s in sizes) or sum(sizes) != length:
            raise ctx.error(f"split sizes {sizes} do not add up to {length}")
    parts, start = [], 0
    for size in sizes:
        begins, ends = [0] * x.rank, list(x.shape)
        begins[axis], ends[axis] = start, start + size
        parts.append(_slice(ctx, x, begins, ends))
        start += size
    if split is None and not ctx.attr("keepdims", 1):
        parts = [ctx.reshape(part, part.shape[:axis] + part.shape[axis + 1:]) for part in parts]
    return Sequence(parts)
