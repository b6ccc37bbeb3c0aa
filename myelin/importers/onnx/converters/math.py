"""Element-wise ONNX ops: math, comparisons, logic, casts and activations.

Ops myelin has map one to one (the registry names them: :func:`myelin.ops.named`), ONNX
Runtime's contrib ops among them; activations ONNX defines by formula (LeakyRelu, Elu, Selu,
HardSigmoid, ...) are written with myelin's element-wise ops, which fusion merges back into
one loop.
"""

import functools

from myelin import ops
from myelin.flow import dtypes
from myelin.importers.context import one_to_one
from myelin.importers.onnx import proto
from myelin.importers.onnx.converters import FLOAT_TYPES, contrib, converter

_ATTRIBUTE_TYPES = {bool: "INT", int: "INT", float: "FLOAT", str: "STRING"}
_NAMED = ops.named("onnx")                 # ONNX name -> myelin op type


def _named(name):
    """The converter decorator of the ONNX op ``name`` the registry names: ``domain.type``
    for an op of another domain than ONNX's, whose schema the registry's entry gives (one
    float input per input, its attributes, none required)."""
    domain, _, op_type = name.rpartition(".")
    if not domain:
        return converter(op_type)
    opdef = ops.lookup(_NAMED[name])
    attributes = [(attr, _ATTRIBUTE_TYPES[type(default)], False)
                  for attr, default in opdef.attrs.items()]
    return contrib(op_type, [f"X{i}" for i in range(opdef.inputs[0])], attributes=attributes,
                   types=FLOAT_TYPES, domain=domain)


one_to_one("onnx", _named)     # the ops the registry names for ONNX


@converter("Identity")
def _identity(ctx):
    return ctx.input(0)


@converter("Pow")
def _pow(ctx):
    """x ^ y; the exponent may have another type than x, and integer powers are computed in
    float64, rounded and converted back."""
    x, y = ctx.input(0), ctx.input(1)
    if dtypes.is_float(x.dtype):
        return ctx.op("Pow", [x, ctx.cast(y, x.dtype)])
    result = ctx.op("Pow", [ctx.cast(x, "float64"), ctx.cast(y, "float64")])
    return ctx.cast(ctx.op("Round", [result]), x.dtype)


def _fold(op_type, ctx):
    return functools.reduce(lambda acc, var: ctx.op(op_type, [acc, var]), ctx.inputs[1:],
                            ctx.inputs[0])


@converter("Max")
def _max(ctx):
    return _fold("Maximum", ctx)


@converter("Min")
def _min(ctx):
    return _fold("Minimum", ctx)


@converter("Sum")
def _sum(ctx):
    return _fold("Add", ctx)


@converter("Mean")
def _mean(ctx):
    total = _fold("Add", ctx)
    return ctx.op("Mul", [total, ctx.const(1 / len(ctx.inputs), total.dtype)])


@converter("Mod")
def _mod(ctx):
    return ctx.op("Mod", ctx.inputs, {"fmod": ctx.attr("fmod", 0)})


@converter("BitShift")
def _bit_shift(ctx):
    return ctx.op("BitShift", ctx.inputs, {"direction": ctx.attr("direction")})


@converter("Where")
def _where(ctx):
    return ctx.op("Cond", ctx.inputs)


@converter("Cast")
def _cast(ctx):
    return ctx.cast(ctx.input(0), proto.dtype_of(ctx.attr("to"), f"Cast node {ctx.name}"))


@converter("CastLike")
def _cast_like(ctx):
    return ctx.cast(ctx.input(0), ctx.input(1).dtype)


@converter("Clip")
def _clip(ctx):
    """min(max(x, low), high); bounds are attributes before opset 11, optional inputs after."""
    x = ctx.input(0)
    if ctx.opset < 11:
        low, high = ctx.attr("min", None), ctx.attr("max", None)
        low = None if low is None else ctx.const(low, x.dtype)
        high = None if high is None else ctx.const(high, x.dtype)
    else:
        low = ctx.input(1) if ctx.has(1) else None
        high = ctx.input(2) if ctx.has(2) else None
    if low is not None:
        x = ctx.op("Maximum", [x, low])
    if high is not None:
        x = ctx.op("Minimum", [x, high])
    return x


# Activations written with element-wise ops.
def _c(ctx, value, like):
    return ctx.const(value, like.dtype)


def _exp_minus_one(ctx, x):
    return ctx.op("Sub", [ctx.op("Exp", [x]), _c(ctx, 1, x)])


@converter("LeakyRelu")
def _leaky_relu(ctx):
    x = ctx.input(0)
    negative = ctx.op("Less", [x, _c(ctx, 0, x)])
    return ctx.op("Cond", [negative, ctx.op("Mul", [x, _c(ctx, ctx.attr("alpha", 0.01), x)]), x])


@converter("PRelu")
def _prelu(ctx):
    x, slope = ctx.input(0), ctx.input(1)
    if slope.rank == 1 and x.rank > 2 and slope.shape[0] not in (1, x.shape[-1]):
        slope = ctx.reshape(slope, (-1,) + (1,) * (x.rank - 2))  # one slope per channel
    negative = ctx.op("Less", [x, _c(ctx, 0, x)])
    return ctx.op("Cond", [negative, ctx.op("Mul", [x, slope]), x])


@converter("ThresholdedRelu")
def _thresholded_relu(ctx):
    x = ctx.input(0)
    above = ctx.op("Greater", [x, _c(ctx, ctx.attr("alpha", 1.0), x)])
    return ctx.op("Cond", [above, x, _c(ctx, 0, x)])


@converter("Elu")
def _elu(ctx):
    x = ctx.input(0)
    negative = ctx.op("Less", [x, _c(ctx, 0, x)])
    scaled = ctx.op("Mul", [_exp_minus_one(ctx, x), _c(ctx, ctx.attr("alpha", 1.0), x)])
    return ctx.op("Cond", [negative, scaled, x])


@converter("Selu")
def _selu(ctx):
    x = ctx.input(0)
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    positive = ctx.op("Greater", [x, _c(ctx, 0, x)])
    negative = ctx.op("Mul", [_exp_minus_one(ctx, x), _c(ctx, alpha, x)])
    return ctx.op("Mul", [ctx.op("Cond", [positive, x, negative]), _c(ctx, gamma, x)])


@converter("Celu")
def _celu(ctx):
    x = ctx.input(0)
    alpha = ctx.attr("alpha", 1.0)
    scaled = ctx.op("Mul", [_exp_minus_one(ctx, ctx.op("Mul", [x, _c(ctx, 1 / alpha, x)])),
                            _c(ctx, alpha, x)])
    return ctx.op("Add", [ctx.op("Maximum", [x, _c(ctx, 0, x)]),
                          ctx.op("Minimum", [scaled, _c(ctx, 0, x)])])


def _hard_sigmoid(ctx, x, alpha, beta):
    linear = ctx.op("Add", [ctx.op("Mul", [x, _c(ctx, alpha, x)]), _c(ctx, beta, x)])
    return ctx.op("Minimum", [ctx.op("Maximum", [linear, _c(ctx, 0, x)]), _c(ctx, 1, x)])


@converter("HardSigmoid")
def _hard_sigmoid_op(ctx):
    return _hard_sigmoid(ctx, ctx.input(0), ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5))


@converter("HardSwish")
def _hard_swish(ctx):
    x = ctx.input(0)
    return ctx.op("Mul", [x, _hard_sigmoid(ctx, x, 1 / 6, 0.5)])


@converter("Mish")
def _mish(ctx):
    x = ctx.input(0)
    return ctx.op("Mul", [x, ctx.op("Tanh", [ctx.op("Softplus", [x])])])


@converter("Shrink")
def _shrink(ctx):
    x = ctx.input(0)
    bias, lambd = ctx.attr("bias", 0.0), ctx.attr("lambd", 0.5)
    low = ctx.op("Less", [x, _c(ctx, -lambd, x)])
    high = ctx.op("Greater", [x, _c(ctx, lambd, x)])
    shifted_up = ctx.op("Add", [x, _c(ctx, bias, x)])
    shifted_down = ctx.op("Sub", [x, _c(ctx, bias, x)])
    inner = ctx.op("Cond", [high, shifted_down, _c(ctx, 0, x)])
    return ctx.op("Cond", [low, shifted_up, inner])


