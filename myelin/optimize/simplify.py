"""Algebraic simplification: ops that return their input unchanged go, chains get shorter.

* ``x * 1``, ``1 * x``, ``x + 0``, ``0 + x``, ``x - 0``, ``x / 1``: a constant of ones or zeros
  that changes neither the shape nor the type of ``x``;
* ``Identity``, ``Cast`` to the input's type, ``Reshape`` to the input's (known) shape,
  ``Transpose`` by the identity permutation;
* ``Transpose(Transpose(x))`` becomes one Transpose of ``x``, ``Reshape(Reshape(x))`` one
  Reshape of ``x``, and ``Cast(Cast(x))`` one Cast of ``x`` when the inner cast is lossless.

Removed ops are bypassed with :func:`myelin.optimize.cleanup.forward`, so function outputs keep
their names. A shortened chain leaves its first op to dead code elimination.
"""

import numpy as np

from myelin.errors import ShapeError
from myelin.flow import dtypes
from myelin.optimize.cleanup import apply_rules, forward

# op type -> (value of the constant that leaves the other operand unchanged, its positions)
_NEUTRAL = {"Mul": (1, (0, 1)), "Add": (0, (0, 1)), "Sub": (0, (1,)), "Div": (1, (1,))}


def _neutral(flow, op):
    """Remove an arithmetic op with a neutral constant operand."""
    value, positions = _NEUTRAL[op.type]
    out = op.outputs[0]
    for position in positions:
        const, x = op.inputs[position], op.inputs[1 - position]
        if (const.constant and not const.learnable and (x.dtype, x.shape) == (out.dtype, out.shape)
                and np.all(const.data == value)):
            return forward(flow, op, [x])
    return False


def _chained(op):
    """The producer of ``op``'s first input if it is an op of the same type and function."""
    inner = op.inputs[0].producer
    return inner if inner is not None and inner.type == op.type and inner.func is op.func else None


def _permutation(op):
    """The axis permutation of a Transpose (reversed axes when it has no ``perm``)."""
    perm = op.attrs.get_ints("perm")
    return tuple(reversed(range(op.inputs[0].rank))) if perm is None else tuple(perm)


def _transpose(flow, op):
    """Compose a Transpose of a Transpose; remove a Transpose that keeps the axes in place."""
    changed = False
    inner = _chained(op)
    if inner is not None:
        first = _permutation(inner)
        op.attrs["perm"] = [first[axis] for axis in _permutation(op)]
        op.replace_input(op.inputs[0], inner.inputs[0])
        changed = True
    if _permutation(op) == tuple(range(op.inputs[0].rank)):
        return forward(flow, op, [op.inputs[0]]) or changed
    return changed


def _reshape(flow, op):
    """Reshape the source of a Reshape of a Reshape; remove a Reshape to the same shape."""
    changed = False
    inner = _chained(op)
    if inner is not None:
        op.replace_input(op.inputs[0], inner.inputs[0])
        changed = True
    source, out = op.inputs[0], op.outputs[0]
    if out.shape_defined and source.shape == out.shape:
        return forward(flow, op, [source]) or changed
    return changed


def _lossless(source, target):
    """True if converting type ``source`` to ``target`` keeps every value exactly."""
    try:
        a, b = dtypes.to_numpy(source), dtypes.to_numpy(target)
    except ShapeError:
        return False
    if a == b or a.kind == "b":
        return True
    if a.kind in "iu" and b.kind in "fc":
        return np.iinfo(a).bits - (a.kind == "i") <= np.finfo(b).nmant + 1
    return b.kind != "b" and bool(np.can_cast(a, b, "safe"))


def _cast(flow, op):
    """Cast the source of a lossless Cast directly; remove a Cast to the input's type."""
    changed = False
    inner = _chained(op)
    if inner is not None and _lossless(inner.inputs[0].dtype, inner.outputs[0].dtype):
        op.replace_input(op.inputs[0], inner.inputs[0])
        changed = True
    if op.inputs[0].dtype == op.outputs[0].dtype:
        return forward(flow, op, [op.inputs[0]]) or changed
    return changed


_RULES = {"Identity": lambda flow, op: forward(flow, op, [op.inputs[0]]),
          "Transpose": _transpose, "Reshape": _reshape, "Cast": _cast,
          **{optype: _neutral for optype in _NEUTRAL}}


def simplify_algebra(flow, ctx):
    """Apply the rules above to every op; returns True if the flow changed."""
    return apply_rules(flow, ctx, _RULES, "simplify_algebra")
