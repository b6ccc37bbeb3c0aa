"""ONNX Runtime's quantized contrib ops (domain ``com.microsoft``), which its quantizer emits
in the QOperator format: QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
QLinearSoftmax, QLinearGlobalAveragePool, QLinearAveragePool, QLinearReduceMean,
QLinearConcat, QLinearWhere, QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul and
DynamicQuantizeLSTM.

Each computes what its documentation defines: the element-wise and pooling ops dequantize
their inputs (``(float32(x) - zero_point) * scale``), apply the float op (through that op's
own converter) and quantize the result (``saturate(round_half_even(y / scale) +
zero_point)``); the products accumulate exactly in int32 (:mod:`.quantize`) and scale the sums
in float. ONNX Runtime computes some of them with fixed-point multipliers and lookup tables
(QLinearAdd, QLinearMul, the activations, the pools), whose results may differ from these by
one quantization step where the exact value lies near a rounding boundary.

Scales and zero points are per tensor, except the weights' of QGemm, MatMulIntegerToFloat and
DynamicQuantizeMatMul, which may be per output column. Each op's schema (inputs, outputs,
attributes), as ONNX Runtime registers it, is declared here for the importer's checks.
"""

from myelin.importers.onnx.converters import contrib, find, quantize


def _optional(ctx, index):
    return ctx.input(index) if ctx.has(index) else None


def _scalar(ctx, param):
    """A per-tensor scale or zero point as a scalar (ShapeError for per-axis ones)."""
    if param is None:
        return None
    if param.elements != 1:
        raise ctx.error(f"a scale or zero point of shape {list(param.shape)}: this op takes "
                        f"them per tensor")
    return ctx.reshape(param, ())


def _dequantize(ctx, x, scale, zero_point):
    """float32: (float32(x) - zero_point) * scale, per tensor."""
    value = ctx.cast(x, "float32")
    if zero_point is not None:
        value = ctx.op("Sub", [value, ctx.cast(_scalar(ctx, zero_point), "float32")])
    return ctx.op("Mul", [value, ctx.cast(_scalar(ctx, scale), "float32")])


def _requantize(ctx, y, scale, zero_point, like):
    """Float ``y`` quantized with a per-tensor scale and zero point, to the zero point's
    type (``like``'s when there is none)."""
    dtype = zero_point.dtype if zero_point is not None else like.dtype
    scaled = ctx.op("Div", [y, ctx.cast(_scalar(ctx, scale), y.dtype)])
    return quantize.quantize_scaled(ctx, scaled, _scalar(ctx, zero_point), dtype)


def _float_op(ctx, op_type, inputs, attrs=None, opset=None):
    """The ai.onnx ``op_type`` on float ``inputs``, converted by its own converter."""
    return find(op_type)(ctx.as_op(op_type, inputs, attrs or {}, opset))


def _elementwise(op_type, operands, opset=None):
    """A converter: dequantize the ``operands`` (each three inputs: x, scale, zero point),
    apply ``op_type`` (in the form of ``opset``: the node's attributes are that form's), and
    quantize with the last scale and zero point."""
    def convert(ctx):
        values = [_dequantize(ctx, ctx.input(3 * i), ctx.input(3 * i + 1),
                              _optional(ctx, 3 * i + 2)) for i in range(operands)]
        y = _float_op(ctx, op_type, values, _float_attrs(ctx), opset)
        return _requantize(ctx, y, ctx.input(3 * operands), _optional(ctx, 3 * operands + 1),
                           ctx.input(0))
    return convert


def _float_attrs(ctx):
    """The node's attributes that its float op takes (not the QOperator ones)."""
    return {name: value for name, value in ctx.attrs.items()
            if name not in ("channels_last", "opset")}


_X = ("X", "X_scale", "X_zero_point?", "Y_scale", "Y_zero_point?")
_AB = ("A", "A_scale", "A_zero_point?", "B", "B_scale", "B_zero_point?", "C_scale",
       "C_zero_point?")

contrib("QLinearAdd", _AB, ("C",))(_elementwise("Add", 2))
contrib("QLinearMul", _AB, ("C",))(_elementwise("Mul", 2))
contrib("QLinearSigmoid", _X)(_elementwise("Sigmoid", 1))
contrib("QLinearLeakyRelu", _X, attributes=[("alpha", "FLOAT", False)])(
    _elementwise("LeakyRelu", 1))
contrib("QLinearReduceMean", ("data", "data_scale", "data_zero_point?", "reduced_scale",
                               "reduced_zero_point?"), ("reduced",),
         [("axes", "INTS", True), ("keepdims", "INT", True)])(
    _elementwise("ReduceMean", 1, opset=13))


@contrib("QLinearSoftmax", ("X", "X_scale", "x_zero_point?", "y_scale", "y_zero_point"),
          attributes=[("axis", "INT", False), ("opset", "INT", True)])
def _qlinear_softmax(ctx):
    """Softmax in the form of the ai.onnx opset named by attribute ``opset``."""
    x = _dequantize(ctx, ctx.input(0), ctx.input(1), _optional(ctx, 2))
    attrs = {"axis": ctx.attrs["axis"]} if "axis" in ctx.attrs else {}
    y = _float_op(ctx, "Softmax", [x], attrs, opset=ctx.attr("opset"))
    return _requantize(ctx, y, ctx.input(3), ctx.input(4), ctx.input(0))


def _channels_first(ctx, x, rank):
    """NHWC ``x`` (channels_last=1) as NCHW."""
    return ctx.op("Transpose", [x], {"perm": [0, rank - 1] + list(range(1, rank - 1))})


def _channels_last(ctx, y, rank):
    return ctx.op("Transpose", [y], {"perm": [0] + list(range(2, rank)) + [1]})


def _pool(op_type):
    """A converter of a quantized pool (``channels_last`` images are transposed around it)."""
    def convert(ctx):
        x = _dequantize(ctx, ctx.input(0), ctx.input(1), _optional(ctx, 2))
        last = ctx.attr("channels_last", 0)
        if last:
            x = _channels_first(ctx, x, x.rank)
        y = _float_op(ctx, op_type, [x], _float_attrs(ctx))
        if last:
            y = _channels_last(ctx, y, y.rank)
        return _requantize(ctx, y, ctx.input(3), _optional(ctx, 4), ctx.input(0))
    return convert


contrib("QLinearGlobalAveragePool",
         ("X", "x_scale", "x_zero_point", "y_scale", "y_zero_point"),
         attributes=[("channels_last", "INT", False)])(_pool("GlobalAveragePool"))
contrib("QLinearAveragePool", ("X", "x_scale", "x_zero_point?", "y_scale", "y_zero_point?"),
         attributes=[("auto_pad", "STRING", False), ("ceil_mode", "INT", False),
                     ("channels_last", "INT", False), ("count_include_pad", "INT", False),
                     ("kernel_shape", "INTS", True), ("pads", "INTS", False),
                     ("strides", "INTS", False)])(_pool("AveragePool"))


@contrib("QLinearConcat", ("Y_scale", "Y_zero_point", "inputs*"),
          attributes=[("axis", "INT", True)])
def _qlinear_concat(ctx):
    """Inputs (x, scale, zero point) from input 2 on, each dequantized, then concatenated."""
    if (len(ctx) - 2) % 3 or len(ctx) < 5:
        raise ctx.error(f"takes Y_scale, Y_zero_point and triples (x, scale, zero point), "
                        f"not {len(ctx)} inputs")
    parts = [_dequantize(ctx, ctx.input(i), ctx.input(i + 1), ctx.input(i + 2))
             for i in range(2, len(ctx), 3)]
    y = _float_op(ctx, "Concat", parts, {"axis": ctx.attr("axis")})
    return _requantize(ctx, y, ctx.input(0), ctx.input(1), ctx.input(2))


@contrib("QLinearWhere", ("condition", "X", "x_scale", "x_zero_point", "Y", "y_scale",
                           "y_zero_point", "z_scale", "z_zero_point"), ("Z",))
def _qlinear_where(ctx):
    x = _dequantize(ctx, ctx.input(1), ctx.input(2), ctx.input(3))
    y = _dequantize(ctx, ctx.input(4), ctx.input(5), ctx.input(6))
    z = _float_op(ctx, "Where", [ctx.input(0), x, y])
    return _requantize(ctx, z, ctx.input(7), ctx.input(8), ctx.input(1))


# Products.
def _scaled_product(ctx, a, a_scale, a_zero, b, b_scale, b_zero, bias=None):
    """float32 (A - a_zero)(B - b_zero) * a_scale * b_scale (+ bias): the int32 product
    scaled by the scales' float32 product, a scale of B per tensor or per column."""
    accumulated = quantize.integer_matmul(ctx, a, a_zero, b, b_zero)
    scale = ctx.op("Mul", [ctx.cast(_scalar(ctx, a_scale), "float32"),
                           ctx.cast(quantize.column_param(ctx, b_scale), "float32")])
    y = ctx.op("Mul", [ctx.cast(accumulated, "float32"), scale])
    return y if bias is None else ctx.op("Add", [y, ctx.cast(bias, "float32")])


@contrib("MatMulIntegerToFloat", ("A", "B", "a_scale", "b_scale", "a_zero_point?",
                                   "b_zero_point?", "bias?"))
def _matmul_integer_to_float(ctx):
    return _scaled_product(ctx, ctx.input(0), ctx.input(2), _optional(ctx, 4), ctx.input(1),
                           ctx.input(3), _optional(ctx, 5), _optional(ctx, 6))


@contrib("DynamicQuantizeMatMul", ("A", "B", "b_scale", "b_zero_point?", "bias?"))
def _dynamic_quantize_matmul(ctx):
    """Float A quantized to uint8 as DynamicQuantizeLinear does, then as
    MatMulIntegerToFloat."""
    a, a_scale, a_zero = quantize.dynamic_quantize(ctx, ctx.input(0))
    return _scaled_product(ctx, a, a_scale, a_zero, ctx.input(1), ctx.input(2),
                           _optional(ctx, 3), _optional(ctx, 4))


@contrib("QGemm", ("A", "a_scale", "a_zero_point", "B", "b_scale", "b_zero_point", "C?",
                    "y_scale?", "y_zero_point?"),
          attributes=[("alpha", "FLOAT", False), ("transA", "INT", False),
                      ("transB", "INT", False)])
def _qgemm(ctx):
    """alpha (A - a_zero)(B - b_zero) a_scale b_scale + C a_scale b_scale (C an int32 bias),
    quantized with y_scale and y_zero_point when given, else float32."""
    a, b = ctx.input(0), ctx.input(3)
    if ctx.attr("transA", 0):
        a = ctx.op("Transpose", [a], {"perm": [1, 0]})
    b_scale, b_zero = ctx.input(4), ctx.input(5)
    if ctx.attr("transB", 0):
        b = ctx.op("Transpose", [b], {"perm": [1, 0]})
    accumulated = quantize.integer_matmul(ctx, a, ctx.input(2), b, b_zero)
    if ctx.has(6):
        accumulated = ctx.op("Add", [accumulated, ctx.cast(ctx.input(6), "int32")])
    scale = ctx.op("Mul", [ctx.cast(_scalar(ctx, ctx.input(1)), "float32"),
                           ctx.cast(quantize.column_param(ctx, b_scale), "float32")])
    alpha = ctx.attr("alpha", 1.0)
    if alpha != 1.0:
        scale = ctx.op("Mul", [scale, ctx.const(alpha, "float32")])
    y = ctx.op("Mul", [ctx.cast(accumulated, "float32"), scale])
    if not ctx.has(7):
        return y
    return _requantize(ctx, y, ctx.input(7), _optional(ctx, 8), ctx.input(0))


@contrib("DynamicQuantizeLSTM", ("X", "W", "R", "B?", "sequence_lens?", "initial_h?",
                                  "initial_c?", "P?", "W_scale", "W_zero_point", "R_scale",
                                  "R_zero_point"), ("Y?", "Y_h?", "Y_c?"),
          attributes=[("activation_alpha", "FLOATS", False),
                      ("activation_beta", "FLOATS", False), ("activations", "STRINGS", False),
                      ("clip", "FLOAT", False), ("direction", "STRING", False),
                      ("hidden_size", "INT", False), ("input_forget", "INT", False)])
def _dynamic_quantize_lstm(ctx):
    """An LSTM whose int8 weights W [directions, input, 4 hidden] and R [directions, hidden,
    4 hidden] (transposed against LSTM's) are dequantized with a scale and zero point per
    direction or per direction and column: the float LSTM of those weights. ONNX Runtime
    also quantizes X and the hidden state at each step, so its results carry that rounding
    (about 1/255 of their range) and differ from these by it."""
    weights = []
    for index, scale_index in ((1, 8), (2, 10)):
        w, scale, zero = ctx.input(index), ctx.input(scale_index), ctx.input(scale_index + 1)
        shape = [w.shape[0], 1, w.shape[2]] if scale.rank == 2 else [w.shape[0], 1, 1]
        value = ctx.op("Sub", [ctx.cast(w, "float32"),
                               ctx.cast(ctx.reshape(zero, shape), "float32")])
        value = ctx.op("Mul", [value, ctx.cast(ctx.reshape(scale, shape), "float32")])
        weights.append(ctx.op("Transpose", [value], {"perm": [0, 2, 1]}))
    inputs = [ctx.input(0)] + weights + [_optional(ctx, i) for i in range(3, 8)]
    return _float_op(ctx, "LSTM", inputs, ctx.attrs)
