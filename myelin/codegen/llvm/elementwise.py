"""Element-wise op lowering: one emitter per op type, for scalars and vectors alike.

``emit(builder, op_type, args, dtypes, out_dtype, attrs)`` computes one op on values in their
compute types (see irutil). This is the CPU back end's lowering table: the op's semantics are
defined by its registry entry, and this table says how to express them in LLVM IR; a composite
op that is not in it is lowered as its registry expansion (:func:`myelin.ops.expand`).
Transcendental functions come from :mod:`mathlib` (vectorizable polynomials, no libm calls).
"""

from myelin import ops
from myelin.codegen.llvm import irutil, mathlib
from myelin.errors import CompileError
from myelin.flow.attributes import Attributes


def _is_float(value):
    return irutil.is_float(value.type)


def _zero(value):
    return irutil.const(value.type, 0)


def _one(value):
    return irutil.const(value.type, 1)


def _recip(b, x):
    return b.fdiv(_one(x), x)


def _arith(float_op, signed_op, unsigned_op=None):
    def emit(b, args, types, attrs):
        x, y = args
        if _is_float(x):
            return getattr(b, float_op)(x, y)
        if types[0] in irutil.UNSIGNED and unsigned_op:
            return getattr(b, unsigned_op)(x, y)
        return getattr(b, signed_op)(x, y)
    return emit


def _minmax(pick_less):
    def emit(b, args, types, attrs):
        x, y = args
        if _is_float(x):
            # Propagate NaN like NumPy: a NaN in x or y gives NaN.
            less = b.fcmp_ordered("<", x, y)
            chosen = b.select(less, x, y) if pick_less else b.select(less, y, x)
            return b.select(b.fcmp_unordered("uno", x, y), b.fadd(x, y), chosen)
        if types[0] == "bool":
            return b.and_(x, y) if pick_less else b.or_(x, y)
        cmp = b.icmp_unsigned if types[0] in irutil.UNSIGNED else b.icmp_signed
        less = cmp("<", x, y)
        return b.select(less, x, y) if pick_less else b.select(less, y, x)
    return emit


def _int_div(b, x, y, types):
    return b.udiv(x, y) if types[0] in irutil.UNSIGNED else b.sdiv(x, y)


def _div(b, args, types, attrs):
    x, y = args
    return b.fdiv(x, y) if _is_float(x) else _int_div(b, x, y, types)


def _neg(b, args, types, attrs):
    (x,) = args
    return b.fneg(x) if _is_float(x) else b.sub(_zero(x), x)


def _abs(b, args, types, attrs):
    (x,) = args
    if _is_float(x):
        return mathlib.intrinsic(b, "llvm.fabs", [x])
    if types[0] in irutil.UNSIGNED:
        return x
    return b.select(b.icmp_signed("<", x, _zero(x)), b.sub(_zero(x), x), x)


def _sign(b, args, types, attrs):
    (x,) = args
    zero = _zero(x)
    if _is_float(x):
        positive = b.uitofp(b.fcmp_ordered(">", x, zero), x.type)
        negative = b.uitofp(b.fcmp_ordered("<", x, zero), x.type)
        result = b.fsub(positive, negative)
        return b.select(b.fcmp_unordered("uno", x, x), x, result)
    positive = b.zext(b.icmp_signed(">", x, zero), x.type)
    negative = b.zext(b.icmp_signed("<", x, zero), x.type)
    return b.sub(positive, negative)


def _relu(b, args, types, attrs):
    (x,) = args
    zero = _zero(x)
    if _is_float(x):
        # NaN stays NaN (as NumPy's maximum(x, 0) and ONNX Runtime): only x < 0 becomes 0.
        return b.select(b.fcmp_ordered("<", x, zero), zero, x)
    if types[0] in irutil.UNSIGNED:
        return x
    return b.select(b.icmp_signed("<", x, zero), zero, x)


def _square(b, args, types, attrs):
    (x,) = args
    return b.fmul(x, x) if _is_float(x) else b.mul(x, x)


def _float_fn(function):
    def emit(b, args, types, attrs):
        return function(b, *args)
    return emit


def _intrinsic(name):
    def emit(b, args, types, attrs):
        return mathlib.intrinsic(b, name, list(args))
    return emit


def _gelu(b, args, types, attrs):
    if attrs.get("approximate", "none") == "tanh":
        return mathlib.gelu_tanh(b, args[0])
    return mathlib.gelu_erf(b, args[0])


def _compare(float_pred, int_pred):
    def emit(b, args, types, attrs):
        x, y = args
        if _is_float(x):
            # "!=" is true for NaN operands, the others are false (IEEE, as NumPy).
            if float_pred == "!=":
                return b.fcmp_unordered(float_pred, x, y)
            return b.fcmp_ordered(float_pred, x, y)
        if types[0] in irutil.UNSIGNED or types[0] == "bool":
            return b.icmp_unsigned(int_pred, x, y)
        return b.icmp_signed(int_pred, x, y)
    return emit


def _logic(method):
    def emit(b, args, types, attrs):
        return getattr(b, method)(*args)
    return emit


def _not(b, args, types, attrs):
    (x,) = args
    return b.xor(x, irutil.const(x.type, 1))


def _cond(b, args, types, attrs):
    c, x, y = args
    return b.select(c, x, y)


def _select(b, args, types, attrs):
    c, x = args
    return b.select(c, x, _zero(x))


def _identity(b, args, types, attrs):
    return args[0]


def _pow(b, args, types, attrs):
    x, y = args
    return mathlib.pow(b, x, y)


def _mod(b, args, types, attrs):
    """ONNX Mod: the remainder with the sign of the divisor, or of the dividend with ``fmod``=1.
    For integers a zero divisor gives 0 (and -1 is replaced by 1, whose remainder is also 0, so
    the overflowing INT_MIN % -1 is never computed). For floats ``fmod``=0 follows ``np.mod``:
    a nonzero C remainder whose sign differs from y's gets y added (so -3 mod inf is inf), and
    a zero one takes y's sign; NaN stays NaN."""
    x, y = args
    if _is_float(x):
        remainder = b.frem(x, y)
        if attrs.get_int("fmod", 0):
            return remainder
        zero = _zero(remainder)
        signs_differ = b.xor(b.fcmp_ordered("<", remainder, zero), b.fcmp_ordered("<", y, zero))
        adjust = b.and_(b.fcmp_ordered("!=", remainder, zero), signs_differ)
        adjusted = b.select(adjust, b.fadd(remainder, y), remainder)
        signed_zero = mathlib.intrinsic(b, "llvm.copysign", [zero, y])
        return b.select(b.fcmp_ordered("==", remainder, zero), signed_zero, adjusted)
    zero, one = _zero(y), _one(y)
    if types[0] in irutil.UNSIGNED:
        return b.urem(x, b.select(b.icmp_unsigned("==", y, zero), one, y))
    bad = b.or_(b.icmp_signed("==", y, zero), b.icmp_signed("==", y, irutil.const(y.type, -1)))
    divisor = b.select(bad, one, y)
    remainder = b.srem(x, divisor)
    if attrs.get_int("fmod", 0):
        return remainder
    signs_differ = b.xor(b.icmp_signed("<", remainder, zero), b.icmp_signed("<", divisor, zero))
    adjust = b.and_(b.icmp_signed("!=", remainder, zero), signs_differ)
    return b.select(adjust, b.add(remainder, divisor), remainder)


def _bitshift(b, args, types, attrs):
    """x << y, or x >> y (logical for unsigned, arithmetic for signed x). An amount out of
    [0, bits) (one unsigned compare catches negative amounts too) gives 0; for a signed RIGHT
    shift it becomes bits - 1, which gives -1 for negative x and 0 otherwise."""
    x, y = args
    scalar = x.type.element if hasattr(x.type, "element") else x.type
    zero = _zero(x)
    large = b.icmp_unsigned(">=", y, irutil.const(y.type, scalar.width))
    if attrs.get_str("direction", "LEFT") == "RIGHT" and types[0] not in irutil.UNSIGNED:
        return b.ashr(x, b.select(large, irutil.const(y.type, scalar.width - 1), y))
    amount = b.select(large, zero, y)
    left = attrs.get_str("direction", "LEFT") == "LEFT"
    shifted = b.shl(x, amount) if left else b.lshr(x, amount)
    return b.select(large, zero, shifted)


def _bitwise_not(b, args, types, attrs):
    (x,) = args
    return b.xor(x, irutil.const(x.type, -1))


def _isnan(b, args, types, attrs):
    (x,) = args
    return b.fcmp_unordered("uno", x, x)


def _isinf(b, args, types, attrs):
    (x,) = args
    result = irutil.const(irutil.vector_of(irutil.I1, irutil.width_of(x)), 0)
    for attr, value in (("detect_positive", float("inf")), ("detect_negative", float("-inf"))):
        if attrs.get_bool(attr, True):
            result = b.or_(result, b.fcmp_ordered("==", x, irutil.const(x.type, value)))
    return result


_TABLE = {
    "Add": _arith("fadd", "add"),
    "Sub": _arith("fsub", "sub"),
    "Mul": _arith("fmul", "mul"),
    "Div": _div,
    "Minimum": _minmax(True),
    "Maximum": _minmax(False),
    "Pow": _pow,
    "Neg": _neg,
    "Abs": _abs,
    "Sign": _sign,
    "Relu": _relu,
    "Square": _square,
    "Sqrt": _intrinsic("llvm.sqrt"),
    "Rsqrt": lambda b, a, t, at: _recip(b, mathlib.intrinsic(b, "llvm.sqrt", list(a))),
    "Reciprocal": lambda b, a, t, at: _recip(b, a[0]),
    "Floor": _intrinsic("llvm.floor"),
    "Ceil": _intrinsic("llvm.ceil"),
    "Round": _intrinsic("llvm.rint"),
    "Trunc": _intrinsic("llvm.trunc"),
    "Gelu": _gelu,
    "Equal": _compare("==", "=="),
    "NotEqual": _compare("!=", "!="),
    "Less": _compare("<", "<"),
    "LessEqual": _compare("<=", "<="),
    "Greater": _compare(">", ">"),
    "GreaterEqual": _compare(">=", ">="),
    "And": _logic("and_"),
    "Or": _logic("or_"),
    "Xor": _logic("xor"),
    "Not": _not,
    "Cond": _cond,
    "Select": _select,
    "Identity": _identity,
    "Mod": _mod,
    "BitShift": _bitshift,
    "BitwiseAnd": _logic("and_"),
    "BitwiseOr": _logic("or_"),
    "BitwiseXor": _logic("xor"),
    "BitwiseNot": _bitwise_not,
    "IsNaN": _isnan,
    "IsInf": _isinf,
}
for _name, _function in mathlib.LIBRARY.items():
    _TABLE.setdefault(_name, _float_fn(_function))

# Ops whose emitter needs a conversion between input and output types.
CONVERSIONS = frozenset({"Cast"})


def supported(op_type):
    """True if the op type has an element-wise lowering, or expands into ops that have one."""
    if op_type in _TABLE or op_type in CONVERSIONS:
        return True
    uses = ops.expansion_uses(op_type)
    return uses is not None and all(supported(used) for used in uses)


class _Expansion(ops.Expander):
    """A composite op lowered as its registry expansion, on values of one type (``dtype``)."""

    def __init__(self, builder, op_type, attrs, dtype, like):
        super().__init__(op_type, attrs)
        self.builder, self.dtype, self.like = builder, dtype, like

    def op(self, op_type, *args):
        return emit(self.builder, op_type, args, [self.dtype] * len(args), self.dtype,
                    Attributes())

    def const(self, value):
        return irutil.const(self.like.type, value)


def emit(builder, op_type, args, in_dtypes, out_dtype, attrs):
    """The value of ``op_type`` applied to ``args`` (compute-type values of ``in_dtypes``)."""
    if op_type == "Cast":
        return irutil.convert(builder, args[0], in_dtypes[0], out_dtype)
    function = _TABLE.get(op_type)
    if function is not None:
        return function(builder, list(args), list(in_dtypes), attrs)
    value = ops.expand(_Expansion(builder, op_type, attrs, in_dtypes[0], args[0]), list(args))
    if value is None:
        raise CompileError(f"no element-wise lowering for op type {op_type}")
    return value
