"""Algebraic simplification: ops that return their input unchanged go, chains get shorter.

* ``x * 1``, ``1 * x``, ``x + 0``, ``0 + x``, ``x - 0``, ``x / 1``: a constant of ones or zeros
  that changes neither the shape nor the type of ``x``;
* ``x ^ 1``, ``x ^ 2`` and ``x ^ 3`` of floats (the exponent one constant element that changes
  neither the shape nor the type of ``x``): ``x``, ``Square(x)`` and ``Square(x) * x`` (a
  general power takes a logarithm and an exponential: GPT-2's GELU cubes its input; the
  products keep pow's signed zeros, infinities and NaN, and round twice at most);
* ``Identity``, ``Cast`` to the input's type, ``Reshape`` to the input's (known) shape,
  ``Transpose`` by the identity permutation;
* a ``Transpose`` that moves only axes of size 1 (PyTorch's exports of batch-first
  transformers swap a batch of 1 with the sequence) becomes a ``Reshape``: its output has
  the input's bytes in their order, a view rather than a copy; one read by a ``Reshape`` that
  only inserts or removes axes of size 1 moves past it, to meet the next Transpose or the
  Attention that takes it in (:mod:`myelin.optimize.attention`);
* ``Transpose(Transpose(x))`` becomes one Transpose of ``x``, ``Reshape(Reshape(x))`` one
  Reshape of ``x``, and ``Cast(Cast(x))`` one Cast of ``x`` when the inner cast is lossless,
  or converts integers within its type's range (a quantization's clamped, rounded values) to
  an integer type and back (so a QuantizeLinear-DequantizeLinear pair fuses into one float
  computation).

Removed ops are bypassed with :func:`myelin.optimize.cleanup.forward`, so function outputs keep
their names. A shortened chain leaves its first op to dead code elimination.
"""

import numpy as np

from myelin.errors import ShapeError
from myelin.flow import dtypes
from myelin.ops.array import transpose_permutation
from myelin.optimize.cleanup import apply_rules, forward, pinned

# op type -> (value of the constant that leaves the other operand unchanged, its positions)
_NEUTRAL = {"Mul": (1, (0, 1)), "Add": (0, (0, 1)), "Sub": (0, (1,)), "Div": (1, (1,))}


def _neutral(flow, op):
    """Remove an arithmetic op with a neutral constant operand."""
    value, positions = _NEUTRAL[op.type]
    out = op.outputs[0]
    for position in positions:
        const, x = op.inputs[position], op.inputs[1 - position]
        if (const.fixed and (x.dtype, x.shape) == (out.dtype, out.shape)
                and np.all(const.data == value)):
            return forward(flow, op, [x])
    return False


def _power(flow, op):
    """Replace a power of a float by a constant 1, 2 or 3 with products."""
    x, exponent = op.inputs
    out = op.outputs[0]
    if not (exponent.fixed and np.size(exponent.data) == 1
            and x.dtype in dtypes.FLOAT_TYPES and (x.dtype, x.shape) == (out.dtype, out.shape)):
        return False
    power = float(np.asarray(exponent.data).reshape(()))
    if power == 1:
        return forward(flow, op, [x])
    if power not in (2, 3):
        return False
    func = op.func
    flow.delete_op(op)
    square = flow.op(flow.unique_op_name(f"{op.name}/Square"), "Square", func, [x])
    if power == 2:
        square.add_output(out)
        return True
    square.add_output(flow.var(flow.unique_var_name(f"{square.name}:0"), x.dtype, x.shape))
    flow.op(flow.unique_op_name(f"{op.name}/Mul"), "Mul", func, [square.outputs[0], x], [out])
    return True


def _chained(op):
    """The producer of ``op``'s first input if it is an op of the same type and function."""
    inner = op.inputs[0].producer
    return inner if inner is not None and inner.type == op.type and inner.func is op.func else None


def _transpose(flow, op):
    """Compose a Transpose of a Transpose; remove a Transpose that keeps the axes in place;
    make one that moves only axes of size 1 a Reshape."""
    changed = False
    inner = _chained(op)
    if inner is not None:
        first = transpose_permutation(inner)
        op.attrs["perm"] = [first[axis] for axis in transpose_permutation(op)]
        op.replace_input(op.inputs[0], inner.inputs[0])
        changed = True
    source, out = op.inputs[0], op.outputs[0]
    if transpose_permutation(op) == tuple(range(source.rank)):
        return forward(flow, op, [source]) or changed
    if source.shape_defined:
        moved = [axis for axis in transpose_permutation(op) if source.shape[axis] != 1]
        if moved == sorted(moved):
            name, func = op.name, op.func
            flow.delete_op(op)
            flow.op(name, "Reshape", func, [source], [out], {"shape": list(out.shape)})
            return True
    return changed


def _reshape(flow, op):
    """Reshape the source of a Reshape of a Reshape; remove a Reshape to the same shape; move
    a Transpose past a Reshape that only inserts or removes axes of size 1."""
    changed = False
    inner = _chained(op)
    if inner is not None:
        op.replace_input(op.inputs[0], inner.inputs[0])
        changed = True
    source, out = op.inputs[0], op.outputs[0]
    if out.shape_defined and source.shape == out.shape:
        return forward(flow, op, [source]) or changed
    return _transpose_later(flow, op) or changed


def _transpose_later(flow, op):
    """Rewrite Reshape ``op`` of a Transpose of x, where the Reshape only inserts or removes
    axes of size 1 and the Transpose is read by it alone, as a Transpose of a Reshape of x
    (ones, then x's axes of other sizes in order): the Transpose meets the next Transpose, or
    the Attention that reads its operands through it. True if it did."""
    transpose, source, out = op.inputs[0].producer, op.inputs[0], op.outputs[0]
    if (transpose is None or transpose.type != "Transpose" or transpose.func is not op.func
            or source.consumers != [op] or pinned(source) or not out.shape_defined
            or not source.shape_defined):
        return False
    sizes = [n for n in out.shape if n != 1]
    if sizes != [n for n in source.shape if n != 1]:
        return False
    x, perm = transpose.inputs[0], transpose_permutation(transpose)
    kept = [axis for axis in range(x.rank) if x.shape[axis] != 1]     # x's, in order
    leading = out.rank - len(kept)
    # x's axis of each axis of another size of the Transpose's output, in order
    order = iter(leading + kept.index(perm[axis]) for axis in range(source.rank)
                 if source.shape[axis] != 1)
    ones = iter(range(leading))
    new_perm = [next(ones) if n == 1 else next(order) for n in out.shape]
    shape = [1] * leading + [x.shape[axis] for axis in kept]
    name, func = op.name, op.func
    flow.delete_op(op)
    moved = flow.var(flow.unique_var_name(f"{name}/ones"), x.dtype, shape)
    flow.op(flow.unique_op_name(f"{name}/ones"), "Reshape", func, [x], [moved],
            {"shape": shape})
    flow.op(name, "Transpose", func, [moved], [out], {"perm": new_perm})
    return True


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
    if inner is not None and (_lossless(inner.inputs[0].dtype, inner.outputs[0].dtype)
                              or _exact_round_trip(inner, op.outputs[0].dtype)):
        op.replace_input(op.inputs[0], inner.inputs[0])
        changed = True
    if op.inputs[0].dtype == op.outputs[0].dtype:
        return forward(flow, op, [op.inputs[0]]) or changed
    return changed


def _exact_round_trip(inner, target):
    """True if ``inner``, a Cast of float values to an integer type, is followed by a Cast to
    ``target`` that holds every value of that type, and its input holds integers within the
    type's range: a clamp ``Minimum(Maximum(v, low), high)`` (either order) of integral ``v``
    with constant bounds inside the range (a QuantizeLinear's output, which the
    DequantizeLinear after it converts back). NaN is the exception: its conversion to an
    integer is undefined, and it stays NaN."""
    source, middle = inner.inputs[0], inner.outputs[0]
    if source.dtype not in dtypes.FLOAT_TYPES or middle.dtype in dtypes.FLOAT_TYPES \
            or not _lossless(middle.dtype, target):
        return False
    try:
        limits = np.iinfo(dtypes.to_numpy(middle.dtype))
    except (ShapeError, ValueError):          # bool
        return False
    return clamped(source, limits.min, limits.max)


def clamped(value, low, high):
    """True if ``value`` is ``Minimum(Maximum(v, a), b)`` or ``Maximum(Minimum(v, b), a)`` of
    an integral ``v``, with constant integral bounds low <= a, b <= high."""
    outer = value.producer
    if outer is None or outer.type not in ("Minimum", "Maximum") or len(outer.inputs) != 2:
        return False
    inner_type = "Maximum" if outer.type == "Minimum" else "Minimum"
    for bound, rest in (outer.inputs, outer.inputs[::-1]):
        inner = rest.producer
        if not _integral_constant(bound, low, high) or inner is None \
                or inner.type != inner_type or len(inner.inputs) != 2:
            continue
        for other_bound, v in (inner.inputs, inner.inputs[::-1]):
            if _integral_constant(other_bound, low, high) and _integral(v):
                return True
    return False


def _integral_constant(value, low, high):
    """True if ``value`` is a constant of integers in [low, high]."""
    if not value.fixed:
        return False
    data = np.asarray(value.data, np.float64)
    return bool(np.all(np.isfinite(data)) and np.all(data == np.round(data))
                and np.all((data >= low) & (data <= high)))


# Ops whose result is an integer where their operands are (their NaN aside).
_INTEGRAL_PRESERVING = frozenset({"Add", "Sub", "Mul", "Neg", "Abs", "Maximum", "Minimum"})
_ROUNDING = frozenset({"Round", "Floor", "Ceil"})


def _integral(value, depth=8):
    """True if every element of ``value`` is an integer (or NaN or infinite): a rounding, a
    conversion from an integer type, an integral constant, or sums and products of those."""
    if value.fixed:
        data = np.asarray(value.data, np.float64)
        return bool(np.all(~np.isfinite(data) | (data == np.round(data))))
    op = value.producer
    if op is None or depth == 0:
        return False
    if op.type in _ROUNDING:
        return True
    if op.type == "Cast":
        return op.inputs[0].dtype not in dtypes.FLOAT_TYPES
    return op.type in _INTEGRAL_PRESERVING and all(_integral(x, depth - 1) for x in op.inputs)


_RULES = {"Identity": lambda flow, op: forward(flow, op, [op.inputs[0]]),
          "Transpose": _transpose, "Reshape": _reshape, "Cast": _cast, "Pow": _power,
          **{optype: _neutral for optype in _NEUTRAL}}


def simplify_algebra(flow, ctx):
    """Apply the rules above to every op; returns True if the flow changed."""
    return apply_rules(flow, ctx, _RULES, "simplify_algebra")
