"""Parts in place: a ``Gather`` of one constant index, a ``Split`` or a ``Slice`` whose every
output is one run of its input's bytes (the axes before the one it cuts all of size 1 in the
output, those after it whole) copies nothing: each output becomes a slice of the input
(:attr:`~myelin.plan.cell.TensorSpec.slice_of`) that code addresses at its offset, and the
step goes away. PyTorch's exports of attention take the query, key and value so from one
product (``Gather`` of 0, 1 and 2 along the leading axis); a decoder's step of one token
splits its row so.

It is done only where the input's storage is the instance's (not a caller's array nor a
global) and every output is a local of the cell, not a view or already a slice (of a
``Concat``'s output, :mod:`myelin.plan.concat`), of the input's type. The memory plan keeps
the input's storage for as long as any of its slices lives.
"""

import math

import numpy as np

from myelin.plan.cell import LOCAL


def fold_slices(steps):
    """``steps`` without those whose outputs now lie in their input (see the module); the
    other steps stay, in their order."""
    kept = []
    for step in steps:
        parts = None if step.empty else _parts(step)
        if parts is None or not _may_fold(step, [out for out, _ in parts]):
            kept.append(step)
            continue
        for out, offset in parts:
            out.slice_of, out.slice_offset = step.inputs[0], offset
    return kept


def _may_fold(step, outputs):
    """Whether each of ``outputs`` may become a slice of the step's input."""
    source = step.inputs[0]
    owner = source.owner()[0]
    if not owner.in_instance or owner.ref:
        return False
    return all(out.kind == LOCAL and not out.is_output and not out.ref
               and out.view_of is None and out.slice_of is None and out.dtype == source.dtype
               for out in outputs)


def _parts(step):
    """(output, its byte offset in input 0) for each output of ``step`` if every output is
    one run of the input's bytes, else None."""
    source = step.inputs[0]
    shape = tuple(source.shape)
    if not shape:
        return None
    blocks = _blocks(step, shape)
    if blocks is None:
        return None
    strides = [math.prod(shape[axis + 1:]) for axis in range(len(shape))]
    parts = []
    for out, begin, size in blocks:
        if not _one_run(shape, size):
            return None
        parts.append((out, sum(b * s for b, s in zip(begin, strides)) * source.itemsize))
    return parts


def _blocks(step, shape):
    """(output, begin, size) of the block of the input that each output of ``step`` holds,
    begin and size per axis of the input; None where the step is none of these or its
    numbers are not constants."""
    rank = len(shape)
    if step.type == "Gather" and len(step.inputs) == 2:
        index = _constant(step, 1)
        axis = step.attrs.get_int("axis", 0) % rank
        if index is None or index.size != 1:
            return None
        row = int(index.reshape(-1)[0])
        if not 0 <= row < shape[axis]:
            return None          # (the kernel stops the cell with its error)
        begin, size = [0] * rank, list(shape)
        begin[axis], size[axis] = row, 1
        return [(step.outputs[0], begin, size)]
    if step.type == "Split":
        axis = _constant(step, 2)
        if axis is None:
            return None
        axis = int(axis.reshape(-1)[0]) % rank
        blocks, start = [], 0
        for out in step.outputs:
            begin = [0] * rank
            begin[axis] = start
            blocks.append((out, begin, list(out.shape)))
            start += out.shape[axis]
        return blocks
    if step.type == "Slice":
        begin = _constant(step, 1)
        out = step.outputs[0]
        if begin is None or begin.size != rank or len(out.shape) != rank:
            return None
        return [(out, [int(b) for b in begin.reshape(-1)], list(out.shape))]
    return None


def _constant(step, index):
    """Input ``index`` of the step as an array if it is a constant, else None."""
    if step.op is None or index >= len(step.op.inputs):
        return None
    data = step.op.inputs[index].data
    return None if data is None else np.asarray(data)


def _one_run(shape, size):
    """Whether a block of ``size`` (per axis) of an array of ``shape`` is one run of its
    bytes: the axes before the first it cuts of size 1 in the block, those after it whole."""
    cut = next((axis for axis, (n, s) in enumerate(zip(shape, size)) if s != n), len(shape))
    return (math.prod(size[:cut]) == 1
            and all(s == n for n, s in zip(shape[cut + 1:], size[cut + 1:])))
