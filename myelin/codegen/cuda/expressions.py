"""Element-wise ops in CUDA C: one expression generator per op type.

``expression(op_type, args, in_dtypes, out_dtype, attrs)`` is the CUDA C expression of one op
applied to ``args``: C identifiers or literals of the inputs' compute types
(:mod:`~myelin.codegen.cuda.cudatypes`), each of which may appear more than once in the result.
This is the GPU back end's lowering table, the counterpart of the CPU's
:mod:`myelin.codegen.llvm.elementwise` (it covers the op registry's element-wise op types and
follows the same semantics: NaN-propagating Minimum/Maximum, integer division truncating toward
zero with ``x / 0 = 0``, wrapping integer arithmetic, ...). float16 is computed in float, so it
uses the ``f`` functions of CUDA's math library (``expf``, ``erff``); float64 the others. Helpers
too long for one expression (integer division, Mod, BitShift) are templates of the module prelude
(:mod:`~myelin.codegen.cuda.support`). A composite op that is not in the table is written as its
registry expansion (:func:`myelin.ops.expand`).
"""

from myelin import ops
from myelin.codegen.cuda import cudatypes
from myelin.errors import CompileError
from myelin.flow.attributes import Attributes


def _fn(name, dtype):
    """CUDA's math function ``name`` for ``dtype``: ``expf`` for float (and float16)."""
    return name if dtype == "float64" else name + "f"


def _one(dtype):
    return cudatypes.literal(1, dtype)


def _zero(dtype):
    return cudatypes.literal(0, dtype)


def _wide(dtype):
    """The unsigned type integer arithmetic of ``dtype`` wraps in (no signed overflow, and no
    promotion of 16-bit values to int that could overflow)."""
    return "uint64_t" if dtype in ("int64", "uint64") else "uint32_t"


def _wrapping(op):
    def generate(args, types, out, attrs):
        x, y = args
        if cudatypes.is_float(types[0]):
            return f"({x} {op} {y})"
        wide = _wide(types[0])
        return f"(({cudatypes.compute(out)})(({wide}){x} {op} ({wide}){y}))"
    return generate


def _div(args, types, out, attrs):
    x, y = args
    if cudatypes.is_float(types[0]):
        return f"({x} / {y})"
    return f"my_idiv<{cudatypes.compute(out)}, {_wide(out)}>({x}, {y})"


def _minmax(pick_less):
    def generate(args, types, out, attrs):
        x, y = args
        if types[0] == "bool":
            return f"({x} && {y})" if pick_less else f"({x} || {y})"
        chosen = f"({x} < {y} ? {x} : {y})" if pick_less else f"({x} < {y} ? {y} : {x})"
        if cudatypes.is_float(types[0]):   # a NaN in x or y gives NaN, as NumPy
            return f"(({x} != {x} || {y} != {y}) ? {x} + {y} : {chosen})"
        return chosen
    return generate


def _neg(args, types, out, attrs):
    (x,) = args
    if cudatypes.is_float(types[0]):
        return f"(-{x})"
    return f"(({cudatypes.compute(out)})(({_wide(out)})0 - ({_wide(out)}){x}))"


def _abs(args, types, out, attrs):
    (x,) = args
    if cudatypes.is_float(types[0]):
        return f"{_fn('fabs', out)}({x})"
    if types[0] in cudatypes.UNSIGNED:
        return x
    return f"({x} < 0 ? {_neg(args, types, out, attrs)} : {x})"


def _sign(args, types, out, attrs):
    (x,) = args
    value = f"(({cudatypes.compute(out)})(({x} > 0) - ({x} < 0)))"
    if cudatypes.is_float(types[0]):
        return f"({x} != {x} ? {x} : {value})"      # NaN stays NaN
    return value


def _relu(args, types, out, attrs):
    (x,) = args
    return f"({x} < {_zero(out)} ? {_zero(out)} : {x})"     # NaN stays NaN


def _square(args, types, out, attrs):
    (x,) = args
    return _wrapping("*")([x, x], types, out, attrs)


def _call(name):
    def generate(args, types, out, attrs):
        return f"{_fn(name, out)}({', '.join(args)})"
    return generate


def _recip(value, dtype):
    return f"({_one(dtype)} / {value})"


def _rsqrt(args, types, out, attrs):
    return f"{'rsqrt' if out == 'float64' else 'rsqrtf'}({args[0]})"


def _sigmoid(args, types, out, attrs):
    (x,) = args
    return _recip(f"({_one(out)} + {_fn('exp', out)}(-{x}))", out)


def _softplus(args, types, out, attrs):
    """max(x, 0) + log1p(exp(-|x|)): no overflow for large x."""
    (x,) = args
    zero = _zero(out)
    return (f"(({x} > {zero} ? {x} : {zero}) + "
            f"{_fn('log1p', out)}({_fn('exp', out)}(-{_fn('fabs', out)}({x}))))")


def _log_sigmoid(args, types, out, attrs):
    """min(x, 0) - log1p(exp(-|x|))."""
    (x,) = args
    zero = _zero(out)
    return (f"(({x} < {zero} ? {x} : {zero}) - "
            f"{_fn('log1p', out)}({_fn('exp', out)}(-{_fn('fabs', out)}({x}))))")


def _gelu(args, types, out, attrs):
    """x Phi(x) as 0.5 x erfc(-x / sqrt 2), or x / (1 + exp(-2u)) for the tanh form, without
    the cancellation of 1 + erf (or 1 + tanh) for negative x."""
    (x,) = args

    def c(value):
        return cudatypes.literal(value, out)
    if attrs.get_str("approximate", "none") == "tanh":
        u = f"({c(0.7978845608028654)} * ({x} + {c(0.044715)} * {x} * {x} * {x}))"
        return f"({x} / ({_one(out)} + {_fn('exp', out)}({c(-2.0)} * {u})))"
    return f"({c(0.5)} * {x} * {_fn('erfc', out)}({c(-0.7071067811865476)} * {x}))"


def _infix(op):
    """A C infix operator: comparisons (C's != is true for NaN operands and the others false,
    as IEEE and NumPy) and logic on bools."""
    def generate(args, types, out, attrs):
        return f"({args[0]} {op} {args[1]})"
    return generate


def _bitwise(op):
    def generate(args, types, out, attrs):
        return f"(({cudatypes.compute(out)})({args[0]} {op} {args[1]}))"
    return generate


def _bitwise_not(args, types, out, attrs):
    return f"(({cudatypes.compute(out)})(~{args[0]}))"


def _mod(args, types, out, attrs):
    x, y = args
    fmod = attrs.get_int("fmod", 0)
    if cudatypes.is_float(types[0]):
        return f"{_fn('fmod', out)}({x}, {y})" if fmod else f"my_mod({x}, {y})"
    return f"my_imod<{cudatypes.compute(out)}>({x}, {y}, {'true' if fmod else 'false'})"


def _bitshift(args, types, out, attrs):
    direction = attrs.get_str("direction", "LEFT")
    helper = "my_shift_left" if direction == "LEFT" else "my_shift_right"
    return f"{helper}<{cudatypes.compute(out)}, {_wide(out)}>({args[0]}, {args[1]})"


def _isinf(args, types, out, attrs):
    (x,) = args
    infinity = cudatypes.literal(float("inf"), types[0])
    tests = []
    if attrs.get_bool("detect_positive", True):
        tests.append(f"{x} == {infinity}")
    if attrs.get_bool("detect_negative", True):
        tests.append(f"{x} == -{infinity}")
    return f"({' || '.join(tests) or 'false'})"


def _cast(args, types, out, attrs):
    (x,) = args
    if out == "bool":
        return f"({x} != 0)"
    return f"(({cudatypes.compute(out)}){x})"


_TABLE = {
    "Add": _wrapping("+"),
    "Sub": _wrapping("-"),
    "Mul": _wrapping("*"),
    "Div": _div,
    "Minimum": _minmax(True),
    "Maximum": _minmax(False),
    "Pow": _call("pow"),
    "Neg": _neg,
    "Abs": _abs,
    "Sign": _sign,
    "Relu": _relu,
    "Square": _square,
    "Sqrt": _call("sqrt"),
    "Rsqrt": _rsqrt,
    "Reciprocal": lambda a, t, o, at: _recip(a[0], o),
    "Floor": _call("floor"),
    "Ceil": _call("ceil"),
    "Round": _call("rint"),
    "Trunc": _call("trunc"),
    "Exp": _call("exp"),
    "Exp2": _call("exp2"),
    "Expm1": _call("expm1"),
    "Log": _call("log"),
    "Log2": _call("log2"),
    "Log1p": _call("log1p"),
    "Erf": _call("erf"),
    "Erfc": _call("erfc"),
    "Sigmoid": _sigmoid,
    "Softplus": _softplus,
    "LogSigmoid": _log_sigmoid,
    "Gelu": _gelu,
    "Sin": _call("sin"),
    "Cos": _call("cos"),
    "Tan": _call("tan"),
    "Asin": _call("asin"),
    "Acos": _call("acos"),
    "Atan": _call("atan"),
    "Sinh": _call("sinh"),
    "Cosh": _call("cosh"),
    "Tanh": _call("tanh"),
    "Asinh": _call("asinh"),
    "Acosh": _call("acosh"),
    "Atanh": _call("atanh"),
    "Equal": _infix("=="),
    "NotEqual": _infix("!="),
    "Less": _infix("<"),
    "LessEqual": _infix("<="),
    "Greater": _infix(">"),
    "GreaterEqual": _infix(">="),
    "And": _infix("&&"),
    "Or": _infix("||"),
    "Xor": _infix("!="),
    "Not": lambda a, t, o, at: f"(!{a[0]})",
    "Cond": lambda a, t, o, at: f"({a[0]} ? {a[1]} : {a[2]})",
    "Select": lambda a, t, o, at: f"({a[0]} ? {a[1]} : {_zero(o)})",
    "Identity": lambda a, t, o, at: a[0],
    "Mod": _mod,
    "BitShift": _bitshift,
    "BitwiseAnd": _bitwise("&"),
    "BitwiseOr": _bitwise("|"),
    "BitwiseXor": _bitwise("^"),
    "BitwiseNot": _bitwise_not,
    "IsNaN": lambda a, t, o, at: f"({a[0]} != {a[0]})",
    "IsInf": _isinf,
    "Cast": _cast,
}


def op_types():
    """Every op type with a CUDA C expression of its own (composite ops expand into them)."""
    return frozenset(_TABLE)


def supported(op_type):
    """True if the op type has a CUDA C expression, or expands into ops that have one."""
    if op_type in _TABLE:
        return True
    uses = ops.expansion_uses(op_type)
    return uses is not None and all(supported(used) for used in uses)


class _Expansion(ops.Expander):
    """A composite op written as its registry expansion, on values of one type (``dtype``)."""

    def __init__(self, op_type, attrs, dtype):
        super().__init__(op_type, attrs)
        self.dtype = dtype

    def op(self, op_type, *args):
        return expression(op_type, args, [self.dtype] * len(args), self.dtype, Attributes())

    def const(self, value):
        return cudatypes.literal(value, self.dtype)


def expression(op_type, args, in_dtypes, out_dtype, attrs):
    """The CUDA C expression of ``op_type`` applied to ``args`` (identifiers or literals of
    the compute types of ``in_dtypes``); its value has the compute type of ``out_dtype``."""
    for dtype in list(in_dtypes) + [out_dtype]:
        cudatypes.check(dtype)
    generate = _TABLE.get(op_type)
    if generate is not None:
        return generate(list(args), list(in_dtypes), out_dtype, attrs)
    value = ops.expand(_Expansion(op_type, attrs, out_dtype), list(args))
    if value is None:
        raise CompileError(f"no CUDA C expression for op type {op_type}")
    return value
