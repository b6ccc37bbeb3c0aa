"""Element-wise ATen ops: arithmetic with PyTorch's type promotion, comparisons, logic,
casts, and activations (those outside core ATen written with myelin's element-wise ops,
which fusion merges back into one loop).

An arithmetic op computes in the type of its result (PyTorch's, from the node's meta):
operands are cast to it, Python numbers become constants of it. A comparison compares in the
type PyTorch promotes its operands to.
"""

import math

import numpy as np

from myelin import ops
from myelin.flow import dtypes
from myelin.importers.torch.converters import converter


def _unary(op_type):
    def convert(ctx):
        return ctx.op(op_type, [ctx.operand(ctx["self"], ctx.out_dtype)])
    return convert


def _compare(op_type):
    """A binary op computed in the type PyTorch promotes its operands to (comparisons)."""
    def convert(ctx):
        a, b = ctx["self"], ctx["other"]
        dtype = ctx.promoted(a, b)
        return ctx.op(op_type, [ctx.operand(a, dtype), ctx.operand(b, dtype)])
    return convert


# The ATen ops the registry names one to one: unary ones in the type of their result,
# binary ones (comparisons) in their operands' promoted type.
for _name, _op_type in ops.named("torch").items():
    _convert = _unary if ops.lookup(_op_type).inputs == (1, 1) else _compare
    converter(f"aten.{_name}")(_convert(_op_type))


@converter("aten.round")
def _round(ctx):
    x = ctx.operand(ctx["self"], ctx.out_dtype)
    decimals = ctx.get("decimals", 0)
    if not decimals:
        return ctx.op("Round", [x])
    scale = ctx.scalar(10.0 ** decimals, x.dtype)
    return ctx.op("Div", [ctx.op("Round", [ctx.op("Mul", [x, scale])]), scale])


@converter("aten.log10")
def _log10(ctx):
    x = ctx.operand(ctx["self"], ctx.out_dtype)
    return ctx.op("Mul", [ctx.op("Log", [x]), ctx.scalar(1 / math.log(10.0), x.dtype)])


# Arithmetic.
def _scaled(ctx, value, alpha, dtype):
    operand = ctx.operand(value, dtype)
    if alpha is None or alpha == 1:
        return operand
    return ctx.op("Mul", [operand, ctx.scalar(alpha, dtype)])


@converter("aten.add")
def _add(ctx):
    dtype = ctx.out_dtype
    if dtype == "bool":
        return ctx.op("Or", [ctx.operand(ctx["self"], dtype), ctx.operand(ctx["other"], dtype)])
    return ctx.op("Add", [ctx.operand(ctx["self"], dtype),
                          _scaled(ctx, ctx["other"], ctx.args.get("alpha"), dtype)])


@converter("aten.sub")
def _sub(ctx):
    dtype = ctx.out_dtype
    return ctx.op("Sub", [ctx.operand(ctx["self"], dtype),
                          _scaled(ctx, ctx["other"], ctx.args.get("alpha"), dtype)])


@converter("aten.rsub")
def _rsub(ctx):
    dtype = ctx.out_dtype
    return ctx.op("Sub", [_scaled(ctx, ctx["other"], 1, dtype),
                          _scaled(ctx, ctx["self"], ctx.args.get("alpha"), dtype)])


@converter("aten.mul")
def _mul(ctx):
    dtype = ctx.out_dtype
    if dtype == "bool":
        return ctx.op("And", [ctx.operand(ctx["self"], dtype), ctx.operand(ctx["other"], dtype)])
    return ctx.op("Mul", [ctx.operand(ctx["self"], dtype), ctx.operand(ctx["other"], dtype)])


@converter("aten.div")
def _div(ctx):
    """True division in the result's float type, or rounded toward zero (``trunc``) or down
    (``floor``) in the promoted type."""
    mode = ctx.args.get("rounding_mode")
    dtype = ctx.out_dtype
    a, b = ctx.operand(ctx["self"], dtype), ctx.operand(ctx["other"], dtype)
    if mode is None:
        return ctx.op("Div", [a, b])
    if dtypes.is_float(dtype):
        return ctx.op("Floor" if mode == "floor" else "Trunc", [ctx.op("Div", [a, b])])
    if mode == "trunc":
        return ctx.op("Div", [a, b])           # integer division truncates
    # Floor division of integers: the truncated quotient, less one where the remainder is
    # not zero and has the other sign than the divisor.
    quotient = ctx.op("Div", [a, b])
    remainder = ctx.op("Sub", [a, ctx.op("Mul", [quotient, b])])
    zero = ctx.scalar(0, dtype)
    inexact = ctx.op("NotEqual", [remainder, zero])
    signs = ctx.op("NotEqual", [ctx.op("Less", [remainder, zero]), ctx.op("Less", [b, zero])])
    return ctx.op("Cond", [ctx.op("And", [inexact, signs]),
                           ctx.op("Sub", [quotient, ctx.scalar(1, dtype)]), quotient])


@converter("aten.floor_divide")
def _floor_divide(ctx):
    ctx.args["rounding_mode"] = "floor"
    return _div(ctx)


@converter("aten.pow")
def _pow(ctx):
    """x ** y in the result's type; integer powers computed in float64 and rounded."""
    dtype = ctx.out_dtype
    base, exponent = ctx.args["self"], ctx.args["exponent"]
    if not isinstance(exponent, (int, float)) or isinstance(base, (int, float)) or \
            not dtypes.is_float(dtype):
        pass
    elif exponent == 2:
        return ctx.op("Square", [ctx.operand(base, dtype)])
    elif exponent == 1:
        return ctx.operand(base, dtype)
    elif exponent == 0.5:
        return ctx.op("Sqrt", [ctx.operand(base, dtype)])
    elif exponent == -1:
        return ctx.op("Reciprocal", [ctx.operand(base, dtype)])
    elif exponent == -0.5:
        return ctx.op("Rsqrt", [ctx.operand(base, dtype)])
    elif exponent == 3:
        x = ctx.operand(base, dtype)
        return ctx.op("Mul", [ctx.op("Square", [x]), x])
    if dtypes.is_float(dtype):
        return ctx.op("Pow", [ctx.operand(base, dtype), ctx.operand(exponent, dtype)])
    result = ctx.op("Pow", [ctx.operand(base, "float64"), ctx.operand(exponent, "float64")])
    return ctx.cast(ctx.op("Round", [result]), dtype)


@converter("aten.maximum", "aten.fmax")
def _maximum(ctx):
    dtype = ctx.out_dtype
    return ctx.op("Maximum", [ctx.operand(ctx["self"], dtype), ctx.operand(ctx["other"], dtype)])


@converter("aten.minimum", "aten.fmin")
def _minimum(ctx):
    dtype = ctx.out_dtype
    return ctx.op("Minimum", [ctx.operand(ctx["self"], dtype), ctx.operand(ctx["other"], dtype)])


@converter("aten.remainder")
def _remainder(ctx):
    """Python's modulo (the sign of the divisor), as ONNX's Mod with fmod=0."""
    dtype = ctx.out_dtype
    a, b = ctx.operand(ctx["self"], dtype), ctx.operand(ctx["other"], dtype)
    if dtypes.is_float(dtype):
        return ctx.op("Sub", [a, ctx.op("Mul", [ctx.op("Floor", [ctx.op("Div", [a, b])]), b])])
    return ctx.op("Mod", [a, b], {"fmod": 0})


@converter("aten.fmod")
def _fmod(ctx):
    dtype = ctx.out_dtype
    a, b = ctx.operand(ctx["self"], dtype), ctx.operand(ctx["other"], dtype)
    return ctx.op("Mod", [a, b], {"fmod": 1})


@converter("aten.atan2")
def _atan2(ctx):
    """atan(y / x), moved to the right quadrant."""
    dtype = ctx.out_dtype
    y, x = ctx.operand(ctx["self"], dtype), ctx.operand(ctx["other"], dtype)
    zero = ctx.scalar(0, dtype)
    base = ctx.op("Atan", [ctx.op("Div", [y, x])])
    pi = ctx.scalar(math.pi, dtype)
    shift = ctx.op("Cond", [ctx.op("Less", [y, zero]), ctx.op("Neg", [pi]), pi])
    shifted = ctx.op("Add", [base, shift])
    result = ctx.op("Cond", [ctx.op("Less", [x, zero]), shifted, base])
    half = ctx.scalar(math.pi / 2, dtype)
    on_axis = ctx.op("Cond", [ctx.op("Less", [y, zero]), ctx.op("Neg", [half]),
                              ctx.op("Cond", [ctx.op("Greater", [y, zero]), half, zero])])
    return ctx.op("Cond", [ctx.op("Equal", [x, zero]), on_axis, result])


# Logic.
def _logical(op_type):
    def convert(ctx):
        return ctx.op(op_type, [_truth(ctx, ctx["self"]), _truth(ctx, ctx["other"])])
    return convert


def _truth(ctx, value):
    """``value`` as bool: nonzero is true."""
    if not hasattr(value, "dtype"):
        return ctx.scalar(bool(value), "bool")
    if value.dtype == "bool":
        return value
    return ctx.op("NotEqual", [value, ctx.scalar(0, value.dtype)])


converter("aten.logical_and")(_logical("And"))
converter("aten.logical_or")(_logical("Or"))
converter("aten.logical_xor")(_logical("Xor"))


@converter("aten.logical_not")
def _logical_not(ctx):
    return ctx.op("Not", [_truth(ctx, ctx["self"])])


def _bitwise(op_type, logical):
    def convert(ctx):
        dtype = ctx.out_dtype
        a, b = ctx.operand(ctx["self"], dtype), ctx.operand(ctx["other"], dtype)
        return ctx.op(logical if dtype == "bool" else op_type, [a, b])
    return convert


converter("aten.bitwise_and")(_bitwise("BitwiseAnd", "And"))
converter("aten.bitwise_or")(_bitwise("BitwiseOr", "Or"))
converter("aten.bitwise_xor")(_bitwise("BitwiseXor", "Xor"))


@converter("aten.bitwise_not")
def _bitwise_not(ctx):
    x = ctx.tensor("self")
    return ctx.op("Not" if x.dtype == "bool" else "BitwiseNot", [x])


@converter("aten.isnan")
def _isnan(ctx):
    x = ctx.tensor("self")
    if not dtypes.is_float(x.dtype):
        return ctx.broadcast(ctx.scalar(False, "bool"), x.shape)
    return ctx.op("IsNaN", [x])


@converter("aten.isinf")
def _isinf(ctx):
    x = ctx.tensor("self")
    if not dtypes.is_float(x.dtype):
        return ctx.broadcast(ctx.scalar(False, "bool"), x.shape)
    return ctx.op("IsInf", [x])


@converter("aten.where")
def _where(ctx):
    dtype = ctx.out_dtype
    condition = _truth(ctx, ctx["condition"])
    return ctx.op("Cond", [condition, ctx.operand(ctx["self"], dtype),
                           ctx.operand(ctx["other"], dtype)])


@converter("aten.masked_fill")
def _masked_fill(ctx):
    dtype = ctx.out_dtype
    return ctx.op("Cond", [_truth(ctx, ctx["mask"]), ctx.operand(ctx["value"], dtype),
                           ctx.operand(ctx["self"], dtype)])


# Casts and copies.
@converter("aten._to_copy", "aten.to", "aten.type_as")
def _to_copy(ctx):
    return ctx.cast(ctx.tensor("self"), ctx.out_dtype)


@converter("aten.clone", "aten.alias", "aten.lift_fresh_copy", "aten.detach", "aten.contiguous",
           "aten.lift_fresh", "aten.dropout", "aten.feature_dropout", "aten.alpha_dropout")
def _identity(ctx):
    if ctx.args.get("train"):
        raise ctx.error("dropout in training mode: myelin compiles inference (call "
                        "module.eval())")
    return ctx.tensor("self" if "self" in ctx.args else "input")


@converter("aten.native_dropout")
def _native_dropout(ctx):
    if ctx["train"]:
        raise ctx.error("dropout in training mode: myelin compiles inference (call "
                        "module.eval())")
    x = ctx.tensor("input")
    return [x, ctx.broadcast(ctx.scalar(True, "bool"), x.shape)]


# Clamps and activations.
def _clamp(ctx, x, low, high):
    dtype = ctx.out_dtype
    x = ctx.operand(x, dtype)
    if low is not None:
        x = ctx.op("Maximum", [x, ctx.operand(low, dtype)])
    if high is not None:
        x = ctx.op("Minimum", [x, ctx.operand(high, dtype)])
    return x


@converter("aten.clamp")
def _clamp_op(ctx):
    return _clamp(ctx, ctx["self"], ctx.args.get("min"), ctx.args.get("max"))


@converter("aten.clamp_min")
def _clamp_min(ctx):
    return _clamp(ctx, ctx["self"], ctx["min"], None)


@converter("aten.clamp_max")
def _clamp_max(ctx):
    return _clamp(ctx, ctx["self"], None, ctx["max"])


@converter("aten.hardtanh")
def _hardtanh(ctx):
    return _clamp(ctx, ctx["self"], ctx.get("min_val", -1.0), ctx.get("max_val", 1.0))


@converter("aten.relu6.default", preserve=True)
def _relu6(ctx):
    return _clamp(ctx, ctx["self"], 0.0, 6.0)


def _c(ctx, value, like):
    return ctx.scalar(value, like.dtype)


@converter("aten.leaky_relu")
def _leaky_relu(ctx):
    x = ctx.tensor("self")
    slope = ctx.get("negative_slope", 0.01)
    negative = ctx.op("Less", [x, _c(ctx, 0, x)])
    return ctx.op("Cond", [negative, ctx.op("Mul", [x, _c(ctx, slope, x)]), x])


@converter("aten._prelu_kernel", "aten.prelu")
def _prelu(ctx):
    x, weight = ctx.tensor("self"), ctx.tensor("weight")
    if weight.rank == 1 and x.rank >= 2 and weight.shape[0] == x.shape[1] and x.rank > 2:
        weight = ctx.reshape(weight, (-1,) + (1,) * (x.rank - 2))
    negative = ctx.op("Less", [x, _c(ctx, 0, x)])
    return ctx.op("Cond", [negative, ctx.op("Mul", [x, weight]), x])


@converter("aten.elu")
def _elu(ctx):
    """scale * (x if x > 0 else alpha * (exp(x * input_scale) - 1)); SELU and CELU are ELUs."""
    x = ctx.tensor("self")
    alpha, scale = ctx.get("alpha", 1.0), ctx.get("scale", 1.0)
    input_scale = ctx.get("input_scale", 1.0)
    scaled = x if input_scale == 1 else ctx.op("Mul", [x, _c(ctx, input_scale, x)])
    negative = ctx.op("Mul", [ctx.op("Sub", [ctx.op("Exp", [scaled]), _c(ctx, 1, x)]),
                              _c(ctx, alpha, x)])
    y = ctx.op("Cond", [ctx.op("Greater", [x, _c(ctx, 0, x)]), x, negative])
    return y if scale == 1 else ctx.op("Mul", [y, _c(ctx, scale, x)])


@converter("aten.gelu")
def _gelu(ctx):
    return ctx.op("Gelu", [ctx.tensor("self")], {"approximate": ctx.get("approximate", "none")})


@converter("aten.silu.default", preserve=True)
def _silu(ctx):
    x = ctx.tensor("self")
    return ctx.op("Mul", [x, ctx.op("Sigmoid", [x])])


def _hard_sigmoid(ctx, x):
    linear = ctx.op("Add", [ctx.op("Mul", [x, _c(ctx, 1 / 6, x)]), _c(ctx, 0.5, x)])
    return ctx.op("Minimum", [ctx.op("Maximum", [linear, _c(ctx, 0, x)]), _c(ctx, 1, x)])


@converter("aten.hardsigmoid.default", preserve=True)
def _hardsigmoid(ctx):
    return _hard_sigmoid(ctx, ctx.tensor("self"))


@converter("aten.hardswish.default", preserve=True)
def _hardswish(ctx):
    x = ctx.tensor("self")
    return ctx.op("Mul", [x, _hard_sigmoid(ctx, x)])


@converter("aten.mish.default", preserve=True)
def _mish(ctx):
    x = ctx.tensor("self")
    return ctx.op("Mul", [x, ctx.op("Tanh", [ctx.op("Softplus", [x])])])


@converter("aten.softplus.default", preserve=True)
def _softplus(ctx):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold."""
    x = ctx.tensor("self")
    beta, threshold = ctx.get("beta", 1.0), ctx.get("threshold", 20.0)
    scaled = x if beta == 1 else ctx.op("Mul", [x, _c(ctx, beta, x)])
    soft = ctx.op("Softplus", [scaled])
    if beta != 1:
        soft = ctx.op("Mul", [soft, _c(ctx, 1 / beta, x)])
    return ctx.op("Cond", [ctx.op("Greater", [scaled, _c(ctx, threshold, x)]), x, soft])


@converter("aten.log_sigmoid_forward")
def _log_sigmoid_forward(ctx):
    x = ctx.tensor("self")
    return [ctx.op("LogSigmoid", [x]), None]


@converter("aten.threshold")
def _threshold(ctx):
    dtype = ctx.out_dtype
    x = ctx.operand(ctx["self"], dtype)
    above = ctx.op("Greater", [x, ctx.operand(ctx["threshold"], dtype)])
    return ctx.op("Cond", [above, x, ctx.operand(ctx["value"], dtype)])


@converter("aten.nan_to_num")
def _nan_to_num(ctx):
    x = ctx.tensor("self")
    if not dtypes.is_float(x.dtype):
        return x
    info = np.finfo(dtypes.to_numpy(x.dtype))
    nan, posinf, neginf = ctx.get("nan", 0.0), ctx.get("posinf", float(info.max)), \
        ctx.get("neginf", float(info.min))
    y = ctx.op("Cond", [ctx.op("IsNaN", [x]), _c(ctx, nan, x), x])
    y = ctx.op("Cond", [ctx.op("IsInf", [y], {"detect_negative": False}), _c(ctx, posinf, x), y])
    return ctx.op("Cond", [ctx.op("IsInf", [y], {"detect_positive": False}), _c(ctx, neginf, x),
                           y])


# Constants and fills.
@converter("aten.fill")
def _fill(ctx):
    return ctx.broadcast(ctx.operand(ctx["value"], ctx.out_dtype), ctx.out_shape)


@converter("aten.full", "aten.full_like", "aten.new_full")
def _full(ctx):
    return ctx.broadcast(ctx.scalar(ctx["fill_value"], ctx.out_dtype), ctx.out_shape)


@converter("aten.zeros", "aten.zeros_like", "aten.new_zeros", "aten.empty", "aten.empty_like",
           "aten.new_empty", "aten.empty_strided", "aten.new_empty_strided")
def _zeros(ctx):
    return ctx.broadcast(ctx.scalar(0, ctx.out_dtype), ctx.out_shape)


@converter("aten.ones", "aten.ones_like", "aten.new_ones")
def _ones(ctx):
    return ctx.broadcast(ctx.scalar(1, ctx.out_dtype), ctx.out_shape)


@converter("aten.scalar_tensor")
def _scalar_tensor(ctx):
    return ctx.scalar(ctx["s"], ctx.out_dtype)


@converter("aten.arange")
def _arange(ctx):
    start = ctx.get("start", 0)
    end = ctx["end"]
    step = ctx.get("step", 1)
    values = np.arange(start, end, step, dtype=np.float64)
    ctx.check_size(values.shape, ctx.out_dtype)
    return ctx.const(values.astype(dtypes.to_numpy(ctx.out_dtype)))
