"""Element-wise TensorFlow ops: arithmetic, math functions, activations, comparisons, logic,
casts and selection.

Ops myelin has map one to one (the registry names them; TensorFlow broadcasts like NumPy, as
myelin does); activations TensorFlow has as ops of their own (Relu6, Elu, Selu, LeakyRelu) are
written with myelin's element-wise ops, which fusion merges back into one loop.
"""

import functools

from myelin.flow import dtypes
from myelin.importers.context import one_to_one
from myelin.importers.tensorflow.converters import converter

one_to_one("tensorflow", converter)     # the ops the registry names for TensorFlow


@converter("FloorDiv")
def _floor_div(ctx):
    x, y = ctx.inputs
    if dtypes.is_float(x.dtype):
        return ctx.op("Floor", [ctx.op("Div", [x, y])])
    # Integer division rounded down: the truncated quotient, less one when the remainder is
    # not zero and has the sign opposite to the divisor's.
    quotient = ctx.op("Div", [x, y])
    remainder = ctx.op("Sub", [x, ctx.op("Mul", [quotient, y])])
    zero = ctx.const(0, x.dtype)
    adjust = ctx.op("And", [ctx.op("NotEqual", [remainder, zero]), ctx.op(
        "NotEqual", [ctx.op("Less", [remainder, zero]), ctx.op("Less", [y, zero])])])
    return ctx.op("Sub", [quotient, ctx.cast(adjust, x.dtype)])


@converter("FloorMod")
def _floor_mod(ctx):
    return ctx.op("Mod", ctx.inputs)


@converter("TruncateMod", "Mod")
def _truncate_mod(ctx):
    return ctx.op("Mod", ctx.inputs, {"fmod": 1})


@converter("SquaredDifference")
def _squared_difference(ctx):
    return ctx.op("Square", [ctx.op("Sub", ctx.inputs)])


@converter("AddN")
def _add_n(ctx):
    return functools.reduce(lambda acc, var: ctx.op("Add", [acc, var]), ctx.inputs[1:],
                            ctx.inputs[0])


# Activations.
@converter("Relu6")
def _relu6(ctx):
    x = ctx.input(0)
    return ctx.op("Minimum", [ctx.op("Relu", [x]), ctx.const(6, x.dtype)])


def _elu(ctx, x, alpha, scale):
    """scale * (x if x > 0 else alpha * (exp(x) - 1))."""
    negative = ctx.op("Mul", [ctx.const(alpha * scale, x.dtype),
                              ctx.op("Sub", [ctx.op("Exp", [x]), ctx.const(1, x.dtype)])])
    positive = ctx.op("Mul", [x, ctx.const(scale, x.dtype)]) if scale != 1 else x
    return ctx.op("Cond", [ctx.op("Greater", [x, ctx.const(0, x.dtype)]), positive, negative])


@converter("Elu")
def _elu_op(ctx):
    return _elu(ctx, ctx.input(0), 1.0, 1.0)


@converter("Selu")
def _selu(ctx):
    return _elu(ctx, ctx.input(0), 1.6732632423543772, 1.0507009873554805)


@converter("LeakyRelu")
def _leaky_relu(ctx):
    x = ctx.input(0)
    scaled = ctx.op("Mul", [x, ctx.const(ctx.attr("alpha", 0.2), x.dtype)])
    return ctx.op("Cond", [ctx.op("Greater", [x, ctx.const(0, x.dtype)]), x, scaled])


# Types and selection.
@converter("Cast")
def _cast(ctx):
    return ctx.cast(ctx.input(0), ctx.dtype("DstT"))


@converter("Select", "SelectV2")
def _select(ctx):
    """``condition ? x : y``; TF1's Select picks whole rows with a vector condition."""
    condition, x, y = ctx.inputs
    if ctx.op_type == "Select" and condition.rank == 1 and x.rank > 1:
        condition = ctx.reshape(condition, condition.shape + (1,) * (x.rank - 1))
    return ctx.op("Cond", [condition, x, y])
