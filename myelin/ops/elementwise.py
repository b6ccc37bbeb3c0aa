"""Element-wise ops: unary math, broadcasting arithmetic, comparisons, logic, Cond/Select, Cast.

Unary and binary ops are defined from tables of (op type, NumPy function, accepted types, doc,
facts), an entry per op; the facts (:func:`_facts`) are what other layers derive their tables
from: the names ONNX, TensorFlow and PyTorch give the op, its Builder method, the inputs tests
draw, and for a composite op (``Cot``, ``Softsign``, ``QuickGelu``) its expansion into other
ops, which back ends lower instead of a lowering of its own. Conventions:

* Binary ops broadcast like NumPy; all value inputs must have the same element type, and the
  output has that type, except comparisons, whose output is ``bool``.
* Integer ``Div`` truncates toward zero like C (``-7 / 2 == -3``); integer division by zero
  gives 0 in the reference (it is undefined in C).
* ``Round`` rounds half to even (``np.rint``). ``Acot``, ``Asec``, ``Acsc``, ``Acoth``,
  ``Asech``, ``Acsch`` are the inverse functions applied to ``1/x`` (so ``Acot`` has the range
  (-pi/2, pi/2)).
* Float-only ops (``Exp``, ``Sqrt``, trig, ``Pow``, ...) reject integer inputs with ShapeError.
* ``Mod`` (ONNX): attribute ``fmod`` 0 gives the remainder with the sign of the divisor
  (Python's ``%``, ``np.mod``), 1 the remainder with the sign of the dividend (C ``fmod``), for
  integers and floats alike. A zero divisor gives 0 for integers and NaN for floats; with
  ``fmod=0`` a zero float remainder takes the divisor's sign and ``x mod ±inf`` is ``x`` or
  ``±inf`` (``np.mod``).
* ``BitShift`` (integers): attribute ``direction`` LEFT or RIGHT. LEFT shifts the bits as
  unsigned (wrapping); RIGHT is logical for unsigned and arithmetic for signed types. A shift
  amount below 0 or of the bit width or more gives 0, except RIGHT of a negative x, which gives
  -1. ``BitwiseAnd/Or/Xor/Not`` take integers; ``IsNaN`` and ``IsInf``
  (attributes ``detect_negative``, ``detect_positive``) take floats and give bool.
"""

import math

import numpy as np

from myelin.flow import dtypes
from myelin.ops.common import (ANY, BOOL, FLOAT, INTEGER, NUMERIC, NUMERIC_OR_BOOL,
                               check_dtype, common_dtype, elementwise_gradient, error,
                               no_gradient)
from myelin.ops.registry import (Kind, OpDef, TensorType, attribute, broadcast_shapes,
                                 register)

_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _gelu(op, x):
    """x Phi(x), written without the cancellation of 1 + erf (or 1 + tanh) for negative x."""
    if attribute(op, "approximate") == "tanh":
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
        with np.errstate(over="ignore"):
            return x / (1 + np.exp(-2 * u))
    return 0.5 * x * _erfc(-x / math.sqrt(2))


def _cast(op, x):
    target = dtypes.canonical(attribute(op, "dtype"))
    return x.astype(np.float64 if dtypes.is_float(target) else dtypes.to_numpy(target))


def _divide(x, y):
    """Division: true division for floats, C-style truncation toward zero for integers."""
    if x.dtype.kind == "f":
        return x / y
    quotient = np.floor_divide(x, y)
    inexact = (np.remainder(x, y) != 0) & ((x < 0) != (y < 0))
    return quotient + inexact


def _facts(domain=None, helper="", onnx=(), tensorflow=(), torch=(), expansion=None):
    """The OpDef fields beyond type, reference, types and doc: ``domain``, ``helper`` and
    ``expansion`` as OpDef has them, and the names its front ends give the op (a name or a
    tuple of names each; ATen names without ``aten.``)."""
    names = {front_end: (name,) if isinstance(name, str) else tuple(name)
             for front_end, name in (("onnx", onnx), ("tensorflow", tensorflow),
                                     ("torch", torch)) if name}
    return {"names": names, "helper": helper, "domain": domain, "expansion": expansion}


def _reciprocal_of(op_type):
    """The expansion 1 / f(x) of f = ``op_type``."""
    return lambda e, x: e.op("Reciprocal", e.op(op_type, x))


def _of_reciprocal(op_type):
    """The expansion f(1 / x) of f = ``op_type``."""
    return lambda e, x: e.op(op_type, e.op("Reciprocal", x))


def _quick_gelu(x, alpha):
    """x sigmoid(alpha x), without overflow for large |x|."""
    return x * np.exp(-np.logaddexp(0, -alpha * x))


_AROUND_0 = (-3, 3)      # the inputs tests draw for ops defined everywhere

# (op type, function of one array, accepted types, doc, facts: see _facts)
_UNARY = [
    ("Neg", np.negative, NUMERIC, "-x",
     _facts(_AROUND_0, onnx="Neg", tensorflow="Neg", torch="neg")),
    ("Abs", np.abs, NUMERIC, "|x|", _facts(_AROUND_0, onnx="Abs", tensorflow="Abs", torch="abs")),
    ("Sign", np.sign, NUMERIC, "-1, 0 or 1 by the sign of x",
     _facts(_AROUND_0, onnx="Sign", tensorflow="Sign", torch=("sign", "sgn"))),
    ("Relu", lambda x: np.maximum(x, 0), NUMERIC, "max(x, 0)",
     _facts(_AROUND_0, onnx="Relu", tensorflow="Relu", torch="relu")),
    ("Square", np.square, NUMERIC, "x * x", _facts(_AROUND_0, tensorflow="Square", torch="square")),
    ("Sqrt", np.sqrt, FLOAT, "square root",
     _facts((0.1, 5), onnx="Sqrt", tensorflow="Sqrt", torch="sqrt")),
    ("Rsqrt", lambda x: 1 / np.sqrt(x), FLOAT, "1 / sqrt(x)",
     _facts((0.1, 5), tensorflow="Rsqrt", torch="rsqrt")),
    ("Reciprocal", lambda x: 1 / x, FLOAT, "1 / x",
     _facts((0.5, 5), "rcp", onnx="Reciprocal", tensorflow=("Reciprocal", "Inv"),
            torch="reciprocal")),
    ("Exp", np.exp, FLOAT, "e^x", _facts(_AROUND_0, onnx="Exp", tensorflow="Exp", torch="exp")),
    ("Exp2", np.exp2, FLOAT, "2^x", _facts(_AROUND_0, torch="exp2")),
    ("Expm1", np.expm1, FLOAT, "e^x - 1, accurate near 0",
     _facts(_AROUND_0, tensorflow="Expm1", torch="expm1")),
    ("Log", np.log, FLOAT, "natural logarithm",
     _facts((0.1, 10), onnx="Log", tensorflow="Log", torch="log")),
    ("Log2", np.log2, FLOAT, "base-2 logarithm", _facts((0.1, 10), torch="log2")),
    ("Log1p", np.log1p, FLOAT, "log(1 + x), accurate near 0",
     _facts((-0.9, 10), tensorflow="Log1p", torch="log1p")),
    ("Sigmoid", lambda x: np.exp(-np.logaddexp(0, -x)), FLOAT, "1 / (1 + e^-x)",
     _facts((-5, 5), onnx="Sigmoid", tensorflow="Sigmoid", torch="sigmoid")),
    ("Tanh", np.tanh, FLOAT, "hyperbolic tangent",
     _facts(_AROUND_0, onnx="Tanh", tensorflow="Tanh", torch="tanh")),
    ("Erf", _erf, FLOAT, "Gauss error function",
     _facts((-2, 2), onnx="Erf", tensorflow="Erf", torch="erf")),
    ("Erfc", _erfc, FLOAT, "complementary error function 1 - erf(x), accurate for large x",
     _facts(_AROUND_0, tensorflow="Erfc", torch="erfc")),
    ("Softsign", lambda x: x / (1 + np.abs(x)), FLOAT, "x / (1 + |x|)",
     _facts(_AROUND_0, onnx="Softsign", tensorflow="Softsign",
            expansion=lambda e, x: e.op("Div", x, e.op("Add", e.const(1), e.op("Abs", x))))),
    ("Softplus", lambda x: np.logaddexp(0, x), FLOAT, "log(1 + e^x)",
     _facts((-5, 5), onnx="Softplus", tensorflow="Softplus")),
    ("LogSigmoid", lambda x: -np.logaddexp(0, -x), FLOAT, "log(sigmoid(x))", _facts((-5, 5))),
    ("Floor", np.floor, FLOAT, "round toward -inf",
     _facts(_AROUND_0, onnx="Floor", tensorflow="Floor", torch="floor")),
    ("Ceil", np.ceil, FLOAT, "round toward +inf",
     _facts(_AROUND_0, onnx="Ceil", tensorflow="Ceil", torch="ceil")),
    ("Round", np.rint, FLOAT, "round to nearest, half to even",
     _facts(_AROUND_0, onnx="Round", tensorflow=("Round", "Rint"))),
    ("Trunc", np.trunc, FLOAT, "round toward zero", _facts(_AROUND_0, torch="trunc")),
    ("Sin", np.sin, FLOAT, "sine", _facts(_AROUND_0, onnx="Sin", tensorflow="Sin", torch="sin")),
    ("Cos", np.cos, FLOAT, "cosine", _facts(_AROUND_0, onnx="Cos", tensorflow="Cos", torch="cos")),
    ("Tan", np.tan, FLOAT, "tangent",
     _facts((-1.2, 1.2), onnx="Tan", tensorflow="Tan", torch="tan")),
    ("Cot", lambda x: 1 / np.tan(x), FLOAT, "cotangent",
     _facts((0.2, 1.4), expansion=_reciprocal_of("Tan"))),
    ("Sec", lambda x: 1 / np.cos(x), FLOAT, "secant",
     _facts((-1.2, 1.2), expansion=_reciprocal_of("Cos"))),
    ("Csc", lambda x: 1 / np.sin(x), FLOAT, "cosecant",
     _facts((0.2, 3), expansion=_reciprocal_of("Sin"))),
    ("Asin", np.arcsin, FLOAT, "inverse sine",
     _facts((-0.9, 0.9), onnx="Asin", tensorflow="Asin", torch="asin")),
    ("Acos", np.arccos, FLOAT, "inverse cosine",
     _facts((-0.9, 0.9), onnx="Acos", tensorflow="Acos", torch="acos")),
    ("Atan", np.arctan, FLOAT, "inverse tangent",
     _facts((-5, 5), onnx="Atan", tensorflow="Atan", torch="atan")),
    ("Acot", lambda x: np.arctan(1 / x), FLOAT, "inverse cotangent, atan(1/x)",
     _facts((0.1, 5), expansion=_of_reciprocal("Atan"))),
    ("Asec", lambda x: np.arccos(1 / x), FLOAT, "inverse secant, acos(1/x)",
     _facts((1.1, 5), expansion=_of_reciprocal("Acos"))),
    ("Acsc", lambda x: np.arcsin(1 / x), FLOAT, "inverse cosecant, asin(1/x)",
     _facts((1.1, 5), expansion=_of_reciprocal("Asin"))),
    ("Sinh", np.sinh, FLOAT, "hyperbolic sine",
     _facts(_AROUND_0, onnx="Sinh", tensorflow="Sinh", torch="sinh")),
    ("Cosh", np.cosh, FLOAT, "hyperbolic cosine",
     _facts(_AROUND_0, onnx="Cosh", tensorflow="Cosh", torch="cosh")),
    ("Coth", lambda x: 1 / np.tanh(x), FLOAT, "hyperbolic cotangent",
     _facts((0.3, 3), expansion=_reciprocal_of("Tanh"))),
    ("Sech", lambda x: 1 / np.cosh(x), FLOAT, "hyperbolic secant",
     _facts(_AROUND_0, expansion=_reciprocal_of("Cosh"))),
    ("Csch", lambda x: 1 / np.sinh(x), FLOAT, "hyperbolic cosecant",
     _facts((0.3, 3), expansion=_reciprocal_of("Sinh"))),
    ("Asinh", np.arcsinh, FLOAT, "inverse hyperbolic sine",
     _facts((-5, 5), onnx="Asinh", tensorflow="Asinh", torch="asinh")),
    ("Acosh", np.arccosh, FLOAT, "inverse hyperbolic cosine",
     _facts((1.1, 5), onnx="Acosh", tensorflow="Acosh", torch="acosh")),
    ("Atanh", np.arctanh, FLOAT, "inverse hyperbolic tangent",
     _facts((-0.9, 0.9), onnx="Atanh", tensorflow="Atanh", torch="atanh")),
    ("Acoth", lambda x: np.arctanh(1 / x), FLOAT, "inverse hyperbolic cotangent, atanh(1/x)",
     _facts((1.1, 5), expansion=_of_reciprocal("Atanh"))),
    ("Asech", lambda x: np.arccosh(1 / x), FLOAT, "inverse hyperbolic secant, acosh(1/x)",
     _facts((0.1, 0.9), expansion=_of_reciprocal("Acosh"))),
    ("Acsch", lambda x: np.arcsinh(1 / x), FLOAT, "inverse hyperbolic cosecant, asinh(1/x)",
     _facts((0.1, 5), expansion=_of_reciprocal("Asinh"))),
    ("Identity", lambda x: x, ANY, "x unchanged", _facts(_AROUND_0)),
    ("Not", np.logical_not, BOOL, "logical not",
     _facts(helper="logical_not", onnx="Not", tensorflow="LogicalNot")),
    ("BitwiseNot", np.invert, INTEGER, "bitwise not",
     _facts(onnx="BitwiseNot", tensorflow="Invert")),
]

# (op type, function of two arrays, accepted types, output type or None for the input type,
# doc, facts: see _facts; a domain has a (low, high) for each input)
_BINARY = [
    ("Add", np.add, NUMERIC, None, "x + y",
     _facts((_AROUND_0, _AROUND_0), onnx="Add", tensorflow=("Add", "AddV2"))),
    ("Sub", np.subtract, NUMERIC, None, "x - y",
     _facts((_AROUND_0, _AROUND_0), onnx="Sub", tensorflow="Sub")),
    ("Mul", np.multiply, NUMERIC, None, "x * y",
     _facts((_AROUND_0, _AROUND_0), onnx="Mul", tensorflow="Mul")),
    ("Div", _divide, NUMERIC, None, "x / y (integers truncate toward zero)",
     _facts((_AROUND_0, (0.5, 3)), onnx="Div", tensorflow=("RealDiv", "Div", "TruncateDiv"))),
    ("Minimum", np.minimum, NUMERIC, None, "element-wise min(x, y)",
     _facts((_AROUND_0, _AROUND_0), tensorflow="Minimum")),
    ("Maximum", np.maximum, NUMERIC, None, "element-wise max(x, y)",
     _facts((_AROUND_0, _AROUND_0), tensorflow="Maximum")),
    ("Pow", np.power, FLOAT, None, "x ^ y", _facts(((0.5, 2), (-2, 2)), tensorflow="Pow")),
    ("Equal", np.equal, NUMERIC_OR_BOOL, "bool", "x == y",
     _facts(onnx="Equal", tensorflow="Equal", torch="eq")),
    ("NotEqual", np.not_equal, NUMERIC_OR_BOOL, "bool", "x != y",
     _facts(tensorflow="NotEqual", torch="ne")),
    ("Less", np.less, NUMERIC, "bool", "x < y", _facts(onnx="Less", tensorflow="Less", torch="lt")),
    ("LessEqual", np.less_equal, NUMERIC, "bool", "x <= y",
     _facts(onnx="LessOrEqual", tensorflow="LessEqual", torch="le")),
    ("Greater", np.greater, NUMERIC, "bool", "x > y",
     _facts(onnx="Greater", tensorflow="Greater", torch="gt")),
    ("GreaterEqual", np.greater_equal, NUMERIC, "bool", "x >= y",
     _facts(onnx="GreaterOrEqual", tensorflow="GreaterEqual", torch="ge")),
    ("And", np.logical_and, BOOL, None, "logical and",
     _facts(helper="logical_and", onnx="And", tensorflow="LogicalAnd")),
    ("Or", np.logical_or, BOOL, None, "logical or",
     _facts(helper="logical_or", onnx="Or", tensorflow="LogicalOr")),
    ("Xor", np.logical_xor, BOOL, None, "logical exclusive or",
     _facts(helper="logical_xor", onnx="Xor")),
    ("BitwiseAnd", np.bitwise_and, INTEGER, None, "bitwise and",
     _facts(onnx="BitwiseAnd", tensorflow="BitwiseAnd")),
    ("BitwiseOr", np.bitwise_or, INTEGER, None, "bitwise or",
     _facts(onnx="BitwiseOr", tensorflow="BitwiseOr")),
    ("BitwiseXor", np.bitwise_xor, INTEGER, None, "bitwise exclusive or",
     _facts(onnx="BitwiseXor", tensorflow="BitwiseXor")),
]


def _unary_infer(domain, out_dtype=None):
    """Shape rule of a unary op: the input's shape; the input's type unless ``out_dtype(op)``."""
    def infer(op):
        x = op.inputs[0]
        check_dtype(op, x, domain)
        return [TensorType(out_dtype(op) if out_dtype else x.dtype, x.shape)]
    return infer


def _broadcast_infer(domain, out_dtype=None, conditional=False):
    """Shape rule of a broadcasting op over all its inputs (after a bool condition if
    ``conditional``): one shared type in ``domain``; output ``out_dtype`` or that type."""
    def infer(op):
        values = op.inputs[1:] if conditional else op.inputs
        if conditional:
            check_dtype(op, op.inputs[0], BOOL)
        dtype = common_dtype(op, values, domain)
        shape = broadcast_shapes(op, *(v.shape for v in op.inputs))
        return [TensorType(out_dtype or dtype, shape)]
    return infer


_float_unary_infer = _unary_infer(FLOAT)


def _gelu_infer(op):
    approximate = attribute(op, "approximate")
    if approximate not in ("none", "tanh"):
        raise error(op, f"attribute approximate={approximate!r} must be 'none' or 'tanh'")
    return _float_unary_infer(op)


def _cast_dtype(op):
    target = attribute(op, "dtype")
    if target is None or not dtypes.known(target):
        raise error(op, f"attribute dtype={target!r} is not a data type")
    return dtypes.canonical(target)


def _mod_infer(op):
    fmod = attribute(op, "fmod")
    if fmod not in (0, 1):
        raise error(op, f"attribute fmod={fmod} must be 0 or 1")
    return _broadcast_infer(NUMERIC)(op)


def _mod(op, x, y):
    """Remainder with the sign of the divisor (fmod=0) or of the dividend (fmod=1); for
    integers x % 0 = 0, for floats NaN."""
    if x.dtype.kind == "f":
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.fmod(x, y) if attribute(op, "fmod") else np.mod(x, y)
    safe = np.where(y == 0, 1, y).astype(y.dtype)
    result = np.fmod(x, safe) if attribute(op, "fmod") else np.mod(x, safe)
    return np.where(y == 0, 0, result).astype(x.dtype)


def _bitshift_infer(op):
    direction = attribute(op, "direction")
    if direction not in ("LEFT", "RIGHT"):
        raise error(op, f"attribute direction={direction!r} must be LEFT or RIGHT")
    return _broadcast_infer(INTEGER)(op)


def _bitshift(op, x, y):
    """x << y (bits shifted as unsigned) or x >> y (arithmetic for signed x); an amount out of
    [0, bits) gives 0, or -1 for RIGHT of a negative x."""
    bits = x.dtype.itemsize * 8
    x, y = np.broadcast_arrays(x, y)
    valid = (y >= 0) & (y < bits)
    unsigned = np.dtype(f"u{x.dtype.itemsize}")
    amount = np.where(valid, y, 0).astype(unsigned)
    if attribute(op, "direction") == "LEFT":
        shifted = np.left_shift(x.view(unsigned), amount).view(x.dtype)
        return np.where(valid, shifted, 0).astype(x.dtype)
    shifted = np.right_shift(x, amount.astype(x.dtype))
    return np.where(valid, shifted, np.where(x < 0, -1, 0)).astype(x.dtype)


def _isinf(op, x):
    return ((np.isposinf(x) & attribute(op, "detect_positive"))
            | (np.isneginf(x) & attribute(op, "detect_negative")))


# Gradients (see myelin.autodiff.context): the term each input's adjoint gets, as a function
# of the gradient function's builder ``b``, the op's context ``g`` (forward values g.x, g.y,
# g.input(i)) and the adjoint ``dy`` of the output.
def _inverse_sqrt_of(b, value, dy):
    """dy / sqrt(value)."""
    return b.div(dy, b.sqrt(value))


def _gelu_derivative(b, g):
    """d/dx of x Phi(x): Phi(x) + x phi(x), or of the tanh approximation 0.5 x (1 + tanh u)."""
    x = g.x
    if attribute(g.op, "approximate") == "tanh":
        c, a = math.sqrt(2 / math.pi), 0.044715
        t = b.tanh(b.mul(b.add(x, b.mul(b.mul(b.square(x), x), a)), c))
        du = b.mul(b.add(b.mul(b.square(x), 3 * a), 1.0), c)
        return b.mul(b.add(b.add(t, 1.0), b.mul(b.mul(x, b.sub(1.0, b.square(t))), du)), 0.5)
    cdf = b.mul(b.add(b.erf(b.mul(x, math.sqrt(0.5))), 1.0), 0.5)
    pdf = b.mul(b.exp(b.mul(b.square(x), -0.5)), 1 / math.sqrt(2 * math.pi))
    return b.add(cdf, b.mul(x, pdf))


def _quick_gelu_derivative(b, g):
    """d/dx of x s(a x), s the sigmoid: s + a x s (1 - s)."""
    alpha = attribute(g.op, "alpha")
    s = b.sigmoid(b.mul(g.x, alpha))
    return b.add(s, b.mul(b.mul(g.x, alpha), b.mul(s, b.sub(1.0, s))))


_UNARY_GRADIENTS = {
    "Neg": lambda b, g, dy: b.neg(dy),
    "Abs": lambda b, g, dy: b.mul(dy, b.sign(g.x)),
    # From the output: the forward pass keeps only y (a product's epilogue computes x in
    # registers), and y > 0 exactly where x > 0.
    "Relu": lambda b, g, dy: b.select(b.greater(g.y, 0.0), dy),
    "Square": lambda b, g, dy: b.mul(dy, b.mul(g.x, 2.0)),
    "Sqrt": lambda b, g, dy: b.div(b.mul(dy, 0.5), g.y),
    "Rsqrt": lambda b, g, dy: b.mul(b.mul(dy, -0.5), b.mul(b.square(g.y), g.y)),
    "Reciprocal": lambda b, g, dy: b.neg(b.mul(dy, b.square(g.y))),
    "Exp": lambda b, g, dy: b.mul(dy, g.y),
    "Exp2": lambda b, g, dy: b.mul(dy, b.mul(g.y, math.log(2))),
    "Expm1": lambda b, g, dy: b.mul(dy, b.add(g.y, 1.0)),
    "Log": lambda b, g, dy: b.div(dy, g.x),
    "Log2": lambda b, g, dy: b.div(dy, b.mul(g.x, math.log(2))),
    "Log1p": lambda b, g, dy: b.div(dy, b.add(g.x, 1.0)),
    "Sigmoid": lambda b, g, dy: b.mul(dy, b.mul(g.y, b.sub(1.0, g.y))),
    "Tanh": lambda b, g, dy: b.mul(dy, b.sub(1.0, b.square(g.y))),
    "Erf": lambda b, g, dy: b.mul(dy, b.mul(b.exp(b.neg(b.square(g.x))),
                                            2 / math.sqrt(math.pi))),
    "Erfc": lambda b, g, dy: b.mul(dy, b.mul(b.exp(b.neg(b.square(g.x))),
                                             -2 / math.sqrt(math.pi))),
    "Softsign": lambda b, g, dy: b.div(dy, b.square(b.add(b.abs(g.x), 1.0))),
    "Softplus": lambda b, g, dy: b.mul(dy, b.sigmoid(g.x)),
    "LogSigmoid": lambda b, g, dy: b.mul(dy, b.sigmoid(b.neg(g.x))),
    "Sin": lambda b, g, dy: b.mul(dy, b.cos(g.x)),
    "Cos": lambda b, g, dy: b.neg(b.mul(dy, b.sin(g.x))),
    "Tan": lambda b, g, dy: b.mul(dy, b.add(b.square(g.y), 1.0)),
    "Cot": lambda b, g, dy: b.neg(b.mul(dy, b.add(b.square(g.y), 1.0))),
    "Sec": lambda b, g, dy: b.mul(dy, b.mul(b.square(g.y), b.sin(g.x))),
    "Csc": lambda b, g, dy: b.neg(b.mul(dy, b.mul(b.square(g.y), b.cos(g.x)))),
    "Asin": lambda b, g, dy: _inverse_sqrt_of(b, b.sub(1.0, b.square(g.x)), dy),
    "Acos": lambda b, g, dy: b.neg(_inverse_sqrt_of(b, b.sub(1.0, b.square(g.x)), dy)),
    "Atan": lambda b, g, dy: b.div(dy, b.add(b.square(g.x), 1.0)),
    "Acot": lambda b, g, dy: b.neg(b.div(dy, b.add(b.square(g.x), 1.0))),
    "Asec": lambda b, g, dy: _inverse_sqrt_of(
        b, b.mul(b.square(g.x), b.sub(b.square(g.x), 1.0)), dy),
    "Acsc": lambda b, g, dy: b.neg(_inverse_sqrt_of(
        b, b.mul(b.square(g.x), b.sub(b.square(g.x), 1.0)), dy)),
    "Sinh": lambda b, g, dy: b.mul(dy, b.cosh(g.x)),
    "Cosh": lambda b, g, dy: b.mul(dy, b.sinh(g.x)),
    "Coth": lambda b, g, dy: b.mul(dy, b.sub(1.0, b.square(g.y))),
    "Sech": lambda b, g, dy: b.neg(b.mul(dy, b.mul(b.square(g.y), b.sinh(g.x)))),
    "Csch": lambda b, g, dy: b.neg(b.mul(dy, b.mul(b.square(g.y), b.cosh(g.x)))),
    "Asinh": lambda b, g, dy: _inverse_sqrt_of(b, b.add(b.square(g.x), 1.0), dy),
    "Acosh": lambda b, g, dy: _inverse_sqrt_of(b, b.sub(b.square(g.x), 1.0), dy),
    "Atanh": lambda b, g, dy: b.div(dy, b.sub(1.0, b.square(g.x))),
    "Acoth": lambda b, g, dy: b.div(dy, b.sub(1.0, b.square(g.x))),
    "Asech": lambda b, g, dy: b.neg(_inverse_sqrt_of(
        b, b.mul(b.square(g.x), b.sub(1.0, b.square(g.x))), dy)),
    "Acsch": lambda b, g, dy: b.neg(_inverse_sqrt_of(
        b, b.mul(b.square(g.x), b.add(b.square(g.x), 1.0)), dy)),
    "Identity": lambda b, g, dy: dy,
    "Gelu": lambda b, g, dy: b.mul(dy, _gelu_derivative(b, g)),
    "QuickGelu": lambda b, g, dy: b.mul(dy, _quick_gelu_derivative(b, g)),
    "Cast": lambda b, g, dy: b.cast(dy, g.op.inputs[0].dtype),
}
# Piecewise constant: the gradient is zero (where it exists).
_ZERO_GRADIENTS = ("Sign", "Floor", "Ceil", "Round", "Trunc")

# Binary and conditional ops: the term of each input (None: the input gets no gradient). On a
# tie, Minimum and Maximum give the whole adjoint to their second input.
_BINARY_GRADIENTS = {
    "Add": (lambda b, g, dy: dy, lambda b, g, dy: dy),
    "Sub": (lambda b, g, dy: dy, lambda b, g, dy: b.neg(dy)),
    "Mul": (lambda b, g, dy: b.mul(dy, g.input(1)), lambda b, g, dy: b.mul(dy, g.input(0))),
    "Div": (lambda b, g, dy: b.div(dy, g.input(1)),
            lambda b, g, dy: b.neg(b.mul(dy, b.div(g.y, g.input(1))))),
    "Minimum": (lambda b, g, dy: b.select(b.less(g.input(0), g.input(1)), dy),
                lambda b, g, dy: b.select(b.greater_equal(g.input(0), g.input(1)), dy)),
    "Maximum": (lambda b, g, dy: b.select(b.greater(g.input(0), g.input(1)), dy),
                lambda b, g, dy: b.select(b.less_equal(g.input(0), g.input(1)), dy)),
    "Pow": (lambda b, g, dy: b.mul(dy, b.mul(g.input(1), b.pow(g.input(0),
                                                               b.sub(g.input(1), 1.0)))),
            lambda b, g, dy: b.mul(dy, b.mul(g.y, b.log(g.input(0))))),
    "Cond": (None, lambda b, g, dy: b.select(g.input(0), dy),
             lambda b, g, dy: b.select(b.logical_not(g.input(0)), dy)),
    "Select": (None, lambda b, g, dy: b.select(g.input(0), dy)),
}


def _gradient(optype):
    """The gradient rule of element-wise op ``optype``, or None if it has none."""
    if optype in _ZERO_GRADIENTS:
        return no_gradient
    if optype in _UNARY_GRADIENTS:
        return elementwise_gradient(_UNARY_GRADIENTS[optype])
    if optype in _BINARY_GRADIENTS:
        return elementwise_gradient(*_BINARY_GRADIENTS[optype])
    return None


def _define_all():
    for optype, fn, accepted, doc, facts in _UNARY:
        register(OpDef(optype, Kind.ELEMWISE, _unary_infer(accepted),
                       lambda op, inputs, fn=fn: [fn(inputs[0])], doc=doc,
                       gradient=_gradient(optype), **facts))
    for optype, fn, accepted, out_dtype, doc, facts in _BINARY:
        register(OpDef(optype, Kind.BROADCAST, _broadcast_infer(accepted, out_dtype),
                       lambda op, inputs, fn=fn: [fn(inputs[0], inputs[1])], inputs=(2, 2),
                       doc=doc, gradient=_gradient(optype), **facts))
    register(OpDef("Gelu", Kind.ELEMWISE, _gelu_infer,
                   lambda op, inputs: [_gelu(op, inputs[0])], attrs={"approximate": "none"},
                   doc="Gaussian error linear unit, exact (erf) or tanh approximation",
                   gradient=_gradient("Gelu"), domain=_AROUND_0, names={"onnx": ("Gelu",)}))
    register(OpDef("QuickGelu", Kind.ELEMWISE, _float_unary_infer,
                   lambda op, inputs: [_quick_gelu(inputs[0], attribute(op, "alpha"))],
                   attrs={"alpha": 1.702}, doc="x sigmoid(alpha x), GELU's sigmoid approximation",
                   gradient=_gradient("QuickGelu"), domain=_AROUND_0,
                   names={"onnx": ("com.microsoft.QuickGelu",)},
                   expansion=lambda e, x: e.op("Mul", x, e.op(
                       "Sigmoid", e.op("Mul", x, e.const(e.attribute("alpha")))))))
    register(OpDef("Cast", Kind.ELEMWISE, _unary_infer(ANY, _cast_dtype),
                   lambda op, inputs: [_cast(op, inputs[0])], attrs={"dtype": None},
                   doc="convert to the type in attribute dtype (floats to ints truncate)",
                   gradient=_gradient("Cast")))
    register(OpDef("Mod", Kind.BROADCAST, _mod_infer,
                   lambda op, inputs: [_mod(op, *inputs)], attrs={"fmod": 0}, inputs=(2, 2),
                   doc="remainder: sign of the divisor (fmod=0) or of x (fmod=1)"))
    register(OpDef("BitShift", Kind.BROADCAST, _bitshift_infer,
                   lambda op, inputs: [_bitshift(op, *inputs)], attrs={"direction": None},
                   inputs=(2, 2),
                   doc="x << y or x >> y (direction LEFT or RIGHT; arithmetic for signed x)"))
    register(OpDef("IsNaN", Kind.ELEMWISE, _unary_infer(FLOAT, lambda op: "bool"),
                   lambda op, inputs: [np.isnan(inputs[0])], doc="true where x is NaN",
                   helper="is_nan", names={"onnx": ("IsNaN",), "tensorflow": ("IsNan",)}))
    register(OpDef("IsInf", Kind.ELEMWISE, _unary_infer(FLOAT, lambda op: "bool"),
                   lambda op, inputs: [_isinf(op, inputs[0])],
                   attrs={"detect_negative": True, "detect_positive": True},
                   names={"onnx": ("IsInf",), "tensorflow": ("IsInf",)},
                   doc="true where x is +inf (detect_positive) or -inf (detect_negative)"))
    register(OpDef("Cond", Kind.BROADCAST, _broadcast_infer(ANY, conditional=True),
                   lambda op, inputs: [np.where(*inputs)], inputs=(3, 3),
                   doc="where(c, x, y): x where c is true, else y", gradient=_gradient("Cond")))
    register(OpDef("Select", Kind.BROADCAST, _broadcast_infer(ANY, conditional=True),
                   lambda op, inputs: [np.where(inputs[0], inputs[1], 0)], inputs=(2, 2),
                   doc="where(c, x, 0): x where c is true, else zero",
                   gradient=_gradient("Select")))


_define_all()
