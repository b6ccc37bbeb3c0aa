"""Loop-invariant work in a cell that loops (``Compiler(loops=...)``, a cell repeating its
steps with some of its inputs as the loop's state): its other inputs and the globals keep
their values from one round to the next, and so does everything computed from them alone.

- :func:`project_rows`: a matrix product of rows gathered from an invariant matrix with an
  invariant matrix (an RNN's input projection ``x[t]·W``) becomes rows gathered from the
  product of the whole matrices. That product is invariant, so the cell computes it once,
  as one matrix-matrix product, instead of a matrix-vector product in every round.
- :func:`invariant_ops`: the ops of a function whose inputs do not change between rounds,
  which the cell runs once, before its loop.
"""

import math

from myelin.builder import Builder
from myelin.flow import dtypes
from myelin.optimize.cleanup import forward, is_stateful

PROJECTION_BYTES = 64 << 20    # the largest precomputed product project_rows makes


def project_rows(flow, func, state):
    """Rewrite each ``MatMul(Reshape(Gather(X, i)), W)`` of ``func`` (the Reshape optional,
    gathering whole rows of X along axis 0 as rows of the product) where X and W are inputs
    not in ``state`` (names of the inputs that change) or globals, into
    ``Reshape(Gather(MatMul(X', W), i))``. Returns True if it rewrote any."""
    fixed = _fixed_sources(func, state)
    changed = False
    for op in [op for op in flow.order(func) if op.type == "MatMul"]:
        gathered = _gathered_rows(op, fixed)
        if gathered is None:
            continue
        matrix, indices = gathered
        f = Builder(flow, func)
        columns = op.outputs[0].shape[1]
        if matrix.rank != 2:
            matrix = f.reshape(matrix, [matrix.shape[0], op.inputs[0].shape[1]])
        product = f.matmul(matrix, op.inputs[1],
                           transpose_b=op.attrs.get_bool("transpose_b"))
        rows = f.reshape(f.gather(product, indices), [op.outputs[0].shape[0], columns])
        forward(flow, op, [rows])
        changed = True
    return changed


def _fixed_sources(func, state):
    """The variables of ``func`` that keep their values in every round: inputs not in
    ``state`` and globals no op of ``func`` assigns."""
    assigned = {id(op.inputs[0]) for op in func.ops if op.type == "Assign"}
    return {id(var) for op in func.ops for var in op.inputs
            if var.producer is None and id(var) not in assigned
            and (var.is_global or (var.is_input and var.name not in state))}


def _gathered_rows(op, fixed):
    """(X, indices) if ``op`` qualifies for :func:`project_rows`, else None."""
    left, right = op.inputs
    if (op.attrs.get_bool("transpose_a") or left.rank != 2 or right.rank != 2
            or not op.outputs[0].shape_defined or id(right) not in fixed):
        return None
    gathered = left
    if left.producer is not None and left.producer.type == "Reshape":
        gathered = left.producer.inputs[0]
    gather = gathered.producer
    if (gather is None or gather.type != "Gather" or len(gather.inputs) != 2
            or (gather.attrs.get_int("axis", 0) or 0) != 0):
        return None
    matrix, indices = gather.inputs
    if (id(matrix) not in fixed or matrix.rank < 2 or not matrix.shape_defined
            or math.prod(matrix.shape[1:]) != left.shape[1]):
        return None
    product_bytes = matrix.shape[0] * op.outputs[0].shape[1] * dtypes.itemsize(matrix.dtype)
    return (matrix, indices) if product_bytes <= PROJECTION_BYTES else None


def invariant_ops(flow, func, state):
    """The ops of ``func``, in order, that compute the same values in every round: their
    inputs are fixed (see :func:`_fixed_sources`) or made by such ops, and they have no
    side effects."""
    fixed = _fixed_sources(func, state)
    invariant, made = [], set()
    for op in flow.order(func):
        if not is_stateful(op) and all(id(v) in fixed or id(v) in made
                                       for v in op.inputs):
            invariant.append(op)
            made.update(id(v) for v in op.outputs)
    return invariant
