"""Constant folding: ops whose inputs are all constants are evaluated at compile time.

The registry's reference implementation computes the values (floats in float64, then cast to
each output's type); the outputs become constants under their own names and the op goes.
``Shape``, ``Size`` and ``Rank`` of any value whose shape is fully known fold as well. Ops
that are stateful, write pinned variables, feed nothing, fail, or would make a constant
larger than ``ctx.fold_limit`` bytes stay.
"""

import numpy as np

from myelin import limits
from myelin.errors import MyelinError, ShapeError
from myelin.flow import dtypes
from myelin.ops import registry
from myelin.ops.common import shape_fits
from myelin.optimize.cleanup import is_stateful, pinned

_SHAPE_QUERIES = frozenset({"Shape", "Size", "Rank"})
_ARRAY_TYPES = dtypes.FLOAT_TYPES | dtypes.INTEGER_TYPES | {"bool"}


def _arguments(op):
    """The reference's input arrays if ``op`` reads only constants (or is a shape query of a
    value of known shape, which reads a stand-in of that shape), else None."""
    if op.type in _SHAPE_QUERIES and op.inputs and op.inputs[0].shape_defined:
        return [np.broadcast_to(np.float64(0), op.inputs[0].shape)]
    if all(var.fixed for var in op.inputs):
        return [registry.as_float64(var.data) for var in op.inputs]
    return None


def _foldable(op):
    """True if folding ``op`` is allowed."""
    return (not is_stateful(op)
            and any(var.consumers for var in op.outputs)
            and all(not pinned(var) and var.dtype in _ARRAY_TYPES for var in op.outputs))


def _declared_fit(op, limit):
    """True unless an output of ``op`` of known shape is declared larger than ``limit``
    bytes (then folding it is not even tried)."""
    return all(not var.shape_defined
               or limits.tensor_bytes(var.shape, dtypes.itemsize(var.dtype)) <= limit
               for var in op.outputs if var.dtype in _ARRAY_TYPES)


def evaluate(op, limit, log=None):
    """The output arrays of ``op`` (each of its output's type) if it reads only constants;
    None if it does not, if an output is over ``limit`` bytes (as declared, checked before
    computing anything, or as computed) or if the reference fails (reported to ``log``)."""
    arguments = _arguments(op)
    if arguments is None or not _declared_fit(op, limit):
        return None
    try:
        with np.errstate(all="ignore"):
            results = registry.lookup(op.type).reference(op, arguments)
    except (MyelinError, ValueError) as exc:
        if log is not None:
            log(f"fold_constants: {op.name} ({op.type}) left to run time: {exc}")
        return None
    arrays = []
    for var, value in zip(op.outputs, results, strict=True):
        array = np.array(value, dtype=dtypes.to_numpy(var.dtype))
        if not shape_fits(array.shape, var.shape):
            raise ShapeError(f"op {op.name} ({op.type}): reference gave shape "
                             f"{list(array.shape)} for {var.name}, declared {list(var.shape)}")
        if array.nbytes > limit:
            return None
        arrays.append(array)
    return arrays


def replace_by_constants(flow, op, arrays):
    """Delete ``op``, making its outputs constants holding ``arrays``."""
    outputs = list(op.outputs)
    flow.delete_op(op)
    for var, array in zip(outputs, arrays):
        var.data, var.shape = array, array.shape


def fold_constants(flow, ctx):
    """Replace ops of constant inputs by their results; returns True if any op was folded."""
    changed = False
    for func in flow.funcs.values():
        for op in flow.order(func):
            if not _foldable(op):
                continue
            arrays = evaluate(op, ctx.fold_limit, ctx.log)
            if arrays is None:
                continue
            replace_by_constants(flow, op, arrays)
            ctx.log(f"fold_constants: folded {op.name} ({op.type})")
            changed = True
    return changed
