"""Quantization ONNX ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.

Myelin has no quantized types or kernels, so these are written with float and integer ops,
following the arithmetic of ONNX's reference implementation step by step so that results
are exact:

* quantizing is ``saturate(round_half_even(x / scale) + zero_point)`` computed in the float
  type of ``x / scale`` (float16 division is done in float32 and rounded to float16, as
  NumPy does), then clamped to the output type's range and converted;
* dequantizing is ``(float32(x) - zero_point) * scale`` (in float64 for int32 ``x``);
* integer matrix products are int32 MatMuls of the zero-point-shifted inputs; integer
  convolutions are float64 Convs of the shifted inputs, exact for every realistic size
  (sums below 2^53).

Scales and zero points are per tensor (scalars or one element), per axis (1-D along
``axis``) or blocked (``block_size``, opset 21: the same shape as the input except along
``axis``, each entry covering ``block_size`` elements). Float8, int4 and int2 types are not
myelin types: the importer raises UnsupportedTypeError for them.
"""

import numpy as np

from myelin.flow import dtypes
from myelin.importers.onnx import proto
from myelin.importers.onnx.converters import converter
from myelin.importers.onnx.converters.nn import matmul

_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535),
           "int16": (-32768, 32767), "int32": (-2 ** 31, 2 ** 31 - 1)}


def _broadcastable(ctx, param, shape, axis, block_size=0):
    """A scale or zero point reshaped (or repeated, when blocked) to broadcast against an
    input of ``shape``; ``axis`` is its quantization axis."""
    if param.rank == 0:
        return param
    if param.elements == 1:
        return ctx.reshape(param, ())
    axis = ctx.axis(axis, len(shape))
    if not block_size:
        if param.rank != 1 or param.shape[0] != shape[axis]:
            raise ctx.error(f"a per-axis parameter of shape {list(param.shape)} does not fit "
                            f"axis {axis} of {list(shape)}")
        dims = [1] * len(shape)
        dims[axis] = shape[axis]
        return ctx.reshape(param, dims)
    if block_size < 0 or param.rank != len(shape) or -(-shape[axis] // block_size) != \
            param.shape[axis]:
        raise ctx.error(f"blocked parameter of shape {list(param.shape)} does not fit "
                        f"{list(shape)} with block_size {block_size} on axis {axis}")
    index = ctx.const(np.arange(shape[axis]) // block_size, "int64")
    return ctx.op("Gather", [param, index], {"axis": axis or None})


def _div(ctx, x, scale):
    """x / scale in NumPy's arithmetic: float16 (bfloat16) operands are divided in float32
    and the quotient rounded to their type; the result is float32 or float64 (for the next
    steps)."""
    if x.dtype in dtypes.REDUCED_FLOAT_TYPES:
        quotient = ctx.op("Div", [ctx.cast(x, "float32"), ctx.cast(scale, "float32")])
        return ctx.cast(ctx.cast(quotient, x.dtype), "float32")
    return ctx.op("Div", [x, ctx.cast(scale, x.dtype)])


def _saturate(ctx, value, dtype):
    """Float ``value`` (integral) clamped to the range of integer ``dtype`` and converted."""
    if dtype not in _RANGES:
        raise ctx.error(f"cannot quantize to {dtype}")
    low, high = _RANGES[dtype]
    value = ctx.op("Maximum", [value, ctx.const(low, value.dtype)])
    value = ctx.op("Minimum", [value, ctx.const(high, value.dtype)])
    return ctx.cast(value, dtype)


def quantize_scaled(ctx, scaled, zero_point, dtype):
    """saturate(round(scaled) + zero_point) as ``dtype``; ``zero_point`` broadcastable or None."""
    value = ctx.op("Round", [scaled])
    if zero_point is not None:
        value = ctx.op("Add", [value, ctx.cast(zero_point, value.dtype)])
    return _saturate(ctx, value, dtype)


@converter("QuantizeLinear")
def _quantize_linear(ctx):
    x, scale = ctx.input(0), ctx.input(1)
    axis = ctx.attr("axis", 1)
    block_size = ctx.attr("block_size", 0)
    if ctx.has(2):
        dtype = ctx.input(2).dtype
    elif "output_dtype" in ctx.attrs and ctx.attrs["output_dtype"]:
        dtype = proto.dtype_of(ctx.attrs["output_dtype"], f"output of {ctx.name}")
    else:
        dtype = "uint8"
    if x.dtype not in dtypes.FLOAT_TYPES:  # int32 x: NumPy divides in float64
        x = ctx.cast(x, "float64")
    precision = ctx.attr("precision", 0)
    if precision:
        x = ctx.cast(x, proto.dtype_of(precision, f"precision of {ctx.name}"))
        scale = ctx.cast(scale, x.dtype)
    if x.dtype == "float32" and scale.dtype == "float64":
        x = ctx.cast(x, "float64")
    scale = _broadcastable(ctx, scale, x.shape, axis, block_size)
    zero_point = _broadcastable(ctx, ctx.input(2), x.shape, axis, block_size) \
        if ctx.has(2) else None
    return quantize_scaled(ctx, _div(ctx, x, scale), zero_point, dtype)


@converter("DequantizeLinear")
def _dequantize_linear(ctx):
    x, scale = ctx.input(0), ctx.input(1)
    axis = ctx.attr("axis", 1)
    block_size = ctx.attr("block_size", 0)
    out_dtype = scale.dtype
    if ctx.attr("output_dtype", 0):
        out_dtype = proto.dtype_of(ctx.attr("output_dtype"), f"output of {ctx.name}")
    # NumPy's float32(x) - zero_point: float32 unless the zero point is int32 (then float64).
    compute = "float64" if x.dtype in ("int32", "uint32") or scale.dtype == "float64" \
        else "float32"
    value = ctx.cast(ctx.cast(x, "float32"), compute)
    if ctx.has(2):
        zero_point = _broadcastable(ctx, ctx.input(2), x.shape, axis, block_size)
        value = ctx.op("Sub", [value, ctx.cast(zero_point, compute)])
    scale = _broadcastable(ctx, scale, x.shape, axis, block_size)
    return ctx.cast(ctx.op("Mul", [value, ctx.cast(scale, compute)]), out_dtype)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(ctx):
    return list(dynamic_quantize(ctx, ctx.input(0)))


def dynamic_quantize(ctx, x):
    """(y, scale, zero point): uint8 quantization of float32 x with the scale and zero point
    that map [min(x, 0), max(x, 0)] onto [0, 255] (as the reference: float32 math, the zero
    point clamped, then rounded half to even)."""

    def c(value):
        return ctx.const(value, x.dtype)
    high = ctx.op("Maximum", [ctx.op("Max", [x]), c(0)])
    low = ctx.op("Minimum", [ctx.op("Min", [x]), c(0)])
    # An all-zero x has scale 1 (ONNX Runtime; the reference gives 1/255).
    scale = ctx.op("Cond", [ctx.op("Equal", [high, low]), c(1),
                            ctx.op("Div", [ctx.op("Sub", [high, low]), c(255)])])
    initial = ctx.op("Neg", [ctx.op("Div", [low, scale])])
    initial = ctx.op("Minimum", [ctx.op("Maximum", [initial, c(0)]), c(255)])
    zero_point = ctx.op("Round", [initial])
    y = quantize_scaled(ctx, ctx.op("Div", [x, scale]), zero_point, "uint8")
    return y, scale, ctx.cast(zero_point, "uint8")


# Integer matrix products.
def _shifted(ctx, x, zero_point, dtype):
    """``x - zero_point`` in ``dtype``; zero_point already broadcastable (or None)."""
    value = ctx.cast(x, dtype)
    if zero_point is None:
        return value
    return ctx.op("Sub", [value, ctx.cast(zero_point, dtype)])


def _row_param(ctx, param, a):
    """A per-row parameter of matrix input ``a`` ([M] for a's rows) as [M, 1]."""
    if param is None or param.rank == 0 or param.elements == 1:
        return None if param is None else ctx.reshape(param, ())
    if a.rank >= 2 and param.rank == 1 and param.shape[0] == a.shape[-2]:
        return ctx.reshape(param, (param.shape[0], 1))
    return param


def column_param(ctx, param):
    """A per-column parameter of the second matrix ([N]) broadcasts as it is."""
    if param is not None and param.rank >= 1 and param.elements == 1:
        return ctx.reshape(param, ())
    return param


def _optional(ctx, index):
    return ctx.input(index) if ctx.has(index) else None


def integer_matmul(ctx, a, a_zero, b, b_zero):
    a_zero = _row_param(ctx, a_zero, a)
    b_zero = column_param(ctx, b_zero)
    return matmul(ctx, _shifted(ctx, a, a_zero, "int32"), _shifted(ctx, b, b_zero, "int32"))


@converter("MatMulInteger")
def _matmul_integer(ctx):
    """(A - a_zero_point) @ (B - b_zero_point) in int32; a_zero_point per tensor or per row
    of A, b_zero_point per tensor or per column of B."""
    return integer_matmul(ctx, ctx.input(0), _optional(ctx, 2), ctx.input(1),
                           _optional(ctx, 3))


def _multiplier(ctx, x_scale, w_scale, y_scale):
    """x_scale * w_scale / y_scale in the scales' type (float16 and bfloat16 emulated as
    NumPy does it), as float64 for the requantization."""
    if x_scale.dtype in dtypes.REDUCED_FLOAT_TYPES:
        narrow = x_scale.dtype
        product = ctx.cast(ctx.op("Mul", [ctx.cast(x_scale, "float32"),
                                          ctx.cast(w_scale, "float32")]), narrow)
        quotient = ctx.op("Div", [ctx.cast(product, "float32"), ctx.cast(y_scale, "float32")])
        return ctx.cast(ctx.cast(quotient, narrow), "float64")
    dtype = x_scale.dtype
    product = ctx.op("Mul", [x_scale, ctx.cast(w_scale, dtype)])
    return ctx.cast(ctx.op("Div", [product, ctx.cast(y_scale, dtype)]), "float64")


def _requantize(ctx, accumulated, multiplier, y_zero, dtype):
    """saturate(round(accumulated * multiplier + y_zero)) as ``dtype`` (float64 math, as the
    reference's int32 * float32 arithmetic)."""
    value = ctx.op("Mul", [ctx.cast(accumulated, "float64"), multiplier])
    if y_zero is not None:
        value = ctx.op("Add", [value, ctx.cast(y_zero, "float64")])
    return _saturate(ctx, ctx.op("Round", [value]), dtype)


@converter("QLinearMatMul")
def _qlinear_matmul(ctx):
    a, a_scale, a_zero = ctx.input(0), ctx.input(1), ctx.input(2)
    b, b_scale, b_zero = ctx.input(3), ctx.input(4), ctx.input(5)
    y_scale, y_zero = ctx.input(6), _optional(ctx, 7)
    accumulated = integer_matmul(ctx, a, a_zero, b, b_zero)
    multiplier = _multiplier(ctx, _row_param(ctx, a_scale, a), column_param(ctx, b_scale),
                             _row_param(ctx, y_scale, a))
    dtype = y_zero.dtype if y_zero is not None else a.dtype
    if y_zero is not None and y_zero.rank >= 1 and y_zero.elements == 1:
        y_zero = ctx.reshape(y_zero, ())
    return _requantize(ctx, accumulated, multiplier, y_zero, dtype)


# Integer convolutions.
_CONV_ATTRS = ("kernel_shape", "strides", "pads", "dilations", "group", "auto_pad")


def _channel_param(ctx, param, rank, axis):
    """A per-channel parameter ([C]) shaped to broadcast on ``axis`` of a rank-``rank``
    tensor; scalars and one-element parameters become scalars."""
    if param is None:
        return None
    if param.rank == 0 or param.elements == 1:
        return ctx.reshape(param, ())
    dims = [1] * rank
    dims[axis] = param.elements
    return ctx.reshape(param, dims)


def _integer_conv(ctx, x, x_zero, w, w_zero, bias=None):
    """The convolution of the zero-point-shifted inputs, computed exactly in float64."""
    x_zero = _channel_param(ctx, x_zero, x.rank, 1)
    w_zero = _channel_param(ctx, w_zero, w.rank, 0)
    inputs = [_shifted(ctx, x, x_zero, "float64"), _shifted(ctx, w, w_zero, "float64")]
    if bias is not None:
        inputs.append(ctx.cast(bias, "float64"))
    attrs = {name: ctx.attrs[name] for name in _CONV_ATTRS if name in ctx.attrs}
    return ctx.op("Conv", inputs, attrs)


@converter("ConvInteger")
def _conv_integer(ctx):
    """Conv(x - x_zero_point, w - w_zero_point) in int32 (w_zero_point per tensor or per
    output channel); padding is zero after the shift."""
    x, w = ctx.input(0), ctx.input(1)
    result = _integer_conv(ctx, x, _optional(ctx, 2), w, _optional(ctx, 3))
    return ctx.cast(result, "int32")


@converter("QLinearConv")
def _qlinear_conv(ctx):
    x, x_scale, x_zero = ctx.input(0), ctx.input(1), ctx.input(2)
    w, w_scale, w_zero = ctx.input(3), ctx.input(4), ctx.input(5)
    y_scale, y_zero = ctx.input(6), _optional(ctx, 7)
    accumulated = _integer_conv(ctx, x, x_zero, w, w_zero, _optional(ctx, 8))
    multiplier = _multiplier(ctx, ctx.reshape(x_scale, ()) if x_scale.elements == 1
                             else x_scale, _channel_param(ctx, w_scale, x.rank, 1),
                             ctx.reshape(y_scale, ()) if y_scale.elements == 1 else y_scale)
    dtype = y_zero.dtype if y_zero is not None else x.dtype
    if y_zero is not None and y_zero.elements == 1:
        y_zero = ctx.reshape(y_zero, ())
    return _requantize(ctx, accumulated, multiplier, y_zero, dtype)
