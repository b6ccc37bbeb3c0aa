"""Concat in place: each input of a ``Concat`` that a step of the cell computes is written by
that step straight into its part of the output, and the Concat step goes away (as SLING
Myelin does), so DenseNet's, Inception's and U-Net's concatenations copy nothing.

The inputs become slices of the output (:attr:`~myelin.plan.cell.TensorSpec.slice_of`): code
addresses each as a tensor of its own, at its offset in the output's storage, and the memory
plan keeps the output's storage for as long as any of them lives. It is done only where
every part of the output is one run of bytes (the axes before the concatenated one are all
of size 1, as a batch-1 network's channel concatenation) and every input may take its place:

* a local of the cell, not a view or already a slice, of the output's type, written by one
  step, and given once to this Concat;
* the output is a local or an output of the cell, not a view.

Concatenations that share inputs, as DenseNet's (each of a block's layers concatenates all
the features before it), are taken from the last: the last, the largest, gets the inputs;
an earlier one whose inputs are then consecutive slices of that output, in order, becomes a
slice of it as well.
"""

import math

import numpy as np

from myelin.plan.cell import LOCAL, OUTPUT


def fold_concats(steps):
    """``steps`` without the Concats whose inputs now lie in their outputs (see the module);
    the other steps stay, in their order."""
    writers = {}
    for step in steps:
        for tensor in step.outputs:
            writers.setdefault(id(tensor), []).append(step)
    folded = set()
    for step in reversed(steps):
        parts = _parts(step)
        if parts is None:
            continue
        out = step.outputs[0]
        if _fold_into(out, parts, writers) or _fold_as_slice(out, parts):
            folded.add(id(step))
    return [step for step in steps if id(step) not in folded]


def _parts(step):
    """The inputs of a Concat ``step`` whose parts of the output are runs of bytes, or None."""
    if step.type != "Concat" or len(step.outputs) != 1 or len(step.inputs) < 2:
        return None
    out = step.outputs[0]
    axis = step.op.inputs[-1].data if step.op is not None else None
    if axis is None or np.size(axis) != 1 or not out.shape:
        return None
    axis = int(np.asarray(axis).reshape(-1)[0]) % len(out.shape)
    parts = step.inputs[:-1]
    if (math.prod(out.shape[:axis]) != 1 or out.view_of is not None or out.ref
            or out.kind not in (LOCAL, OUTPUT) or not out.in_instance
            or any(part.dtype != out.dtype for part in parts)
            or sum(part.size for part in parts) != out.size):
        return None
    return parts


def _fold_into(out, parts, writers):
    """Make each part a slice of ``out`` if every part may become one; True if done."""
    for part in parts:
        producers = writers.get(id(part), [])
        if (part.kind != LOCAL or part.view_of is not None or part.slice_of is not None
                or part.ref or part.is_output or len(producers) != 1
                or producers[0].noop or sum(1 for other in parts if other is part) != 1):
            return False
    offset = 0
    for part in parts:
        part.slice_of, part.slice_offset = out, offset
        offset += part.size
    return True


def _fold_as_slice(out, parts):
    """Make ``out`` a slice of the tensor its parts are consecutive slices of; True if done."""
    owner = parts[0].slice_of
    if owner is None or out.kind != LOCAL or out.slice_of is not None or out.is_output:
        return False
    offset = parts[0].slice_offset
    for part in parts:
        if part.slice_of is not owner or part.slice_offset != offset:
            return False
        offset += part.size
    out.slice_of, out.slice_offset = owner, parts[0].slice_offset
    return True
