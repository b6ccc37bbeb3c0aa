"""Neural-network TensorFlow ops: matrix products, bias, convolution and pooling, batch
normalization, softmax, local response normalization.

myelin's Conv, pools, BatchNormalization and LRN work on channels-first (NCHW) tensors.
TensorFlow's default layout is channels-last (NHWC): such a node becomes the NCHW op between two
Transposes (NHWC to NCHW, and back), with its filter transposed from TensorFlow's HWIO to
OIHW (folded at import, the filter being constant). The optimizer removes the pair of Transposes
between two such ops, so a chain of convolutions stays in NCHW.
"""

from myelin.importers.tensorflow.converters import converter

_TO_NCHW = [0, 3, 1, 2]
_TO_NHWC = [0, 2, 3, 1]
_PADDINGS = {"SAME": "SAME_UPPER", "VALID": "VALID"}


# Products.
@converter("MatMul")
def _matmul(ctx):
    return ctx.product(ctx.input(0), ctx.input(1), ctx.attr("transpose_a", False),
                    ctx.attr("transpose_b", False))


@converter("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _batch_matmul(ctx):
    product = ctx.product(ctx.input(0), ctx.input(1), ctx.attr("adj_x", False),
                       ctx.attr("adj_y", False))
    return ctx.cast(product, ctx.dtype("Tout")) if "Tout" in ctx.node.attr else product


@converter("BiasAdd", "BiasAddV1")
def _bias_add(ctx):
    x, bias = ctx.inputs
    if _channels_last(ctx) or x.rank < 3:
        return ctx.op("Add", [x, bias])
    return ctx.op("Add", [x, ctx.reshape(bias, bias.shape + (1,) * (x.rank - 2))])


# Layouts.
def _channels_last(ctx):
    layout = ctx.attr("data_format", "NHWC")
    if layout not in ("NHWC", "NCHW"):
        raise ctx.error(f"data_format {layout} is not supported (NHWC or NCHW)")
    return layout == "NHWC"


def _channels_first_op(ctx, op_type, inputs, attrs):
    """``op_type`` (an NCHW op) on inputs[0] in the node's layout: between Transposes for
    NHWC."""
    x = ctx.input(0)
    if x.rank != 4:
        raise ctx.error(f"input of shape {list(x.shape)} is not 4-D")
    if not _channels_last(ctx):
        return ctx.op(op_type, inputs, attrs)
    x = ctx.op("Transpose", [inputs[0]], {"perm": _TO_NCHW})
    y = ctx.op(op_type, [x] + list(inputs[1:]), attrs)
    return ctx.op("Transpose", [y], {"perm": _TO_NHWC})


def _spatial(ctx, name, default):
    """The two spatial entries of a 4-entry attribute (strides, dilations, ksize)."""
    values = ctx.attr(name, None)
    if values is None:
        return [default, default]
    if len(values) != 4:
        raise ctx.error(f"attribute {name}={values} needs 4 values")
    return list(values[1:3]) if _channels_last(ctx) else list(values[2:4])


def _window(ctx, kernel):
    """Conv and pool attributes: kernel, strides, dilations and padding."""
    attrs = {"kernel_shape": list(kernel), "strides": _spatial(ctx, "strides", 1)}
    padding = ctx.attr("padding")
    if padding == "EXPLICIT":
        pads = ctx.attr("explicit_paddings")
        spatial = pads[2:6] if _channels_last(ctx) else pads[4:8]
        attrs["pads"] = [spatial[0], spatial[2], spatial[1], spatial[3]]
    elif padding in _PADDINGS:
        attrs["auto_pad"] = _PADDINGS[padding]
    else:
        raise ctx.error(f"padding {padding} is not supported")
    return attrs


# Convolution and pooling.
@converter("Conv2D")
def _conv2d(ctx):
    x, filters = ctx.inputs
    height, width, in_channels, _ = filters.shape
    channels = x.shape[3 if _channels_last(ctx) else 1]
    if channels % in_channels:
        raise ctx.error(f"{channels} input channels do not split into groups of "
                        f"{in_channels}")
    weights = ctx.op("Transpose", [filters], {"perm": [3, 2, 0, 1]})      # HWIO -> OIHW
    attrs = dict(_window(ctx, (height, width)), dilations=_spatial(ctx, "dilations", 1),
                 group=channels // in_channels if channels != in_channels else None)
    return _channels_first_op(ctx, "Conv", [x, weights], attrs)


@converter("DepthwiseConv2dNative")
def _depthwise_conv2d(ctx):
    """A grouped convolution with one group per input channel; output channel
    ``c * multiplier + m`` is filter ``[:, :, c, m]``."""
    x, filters = ctx.inputs
    height, width, channels, multiplier = filters.shape
    flat = ctx.reshape(filters, (height, width, 1, channels * multiplier))
    weights = ctx.op("Transpose", [flat], {"perm": [3, 2, 0, 1]})
    attrs = dict(_window(ctx, (height, width)), dilations=_spatial(ctx, "dilations", 1),
                 group=channels if channels != 1 else None)
    return _channels_first_op(ctx, "Conv", [x, weights], attrs)


@converter("MaxPool", "AvgPool")
def _pool(ctx):
    op_type = "MaxPool" if ctx.op_type == "MaxPool" else "AveragePool"
    return _channels_first_op(ctx, op_type, [ctx.input(0)],
                              _window(ctx, _spatial(ctx, "ksize", 1)))


# Normalization.
@converter("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def _fused_batch_norm(ctx):
    """Inference only; the batch statistics outputs are the given mean and variance."""
    if ctx.attr("is_training", True):
        raise ctx.error("training mode is not supported (inference only)")
    x, scale, offset, mean, variance = ctx.inputs
    attrs = {"epsilon": ctx.attr("epsilon", 1e-4)}
    if x.rank == 4:
        y = _channels_first_op(ctx, "BatchNormalization", ctx.inputs, attrs)
    elif x.rank == 2:
        y = ctx.op("BatchNormalization", ctx.inputs, attrs)
    else:
        raise ctx.error(f"input of shape {list(x.shape)} is not 2-D or 4-D")
    return [y, mean, variance, mean, variance]


@converter("LRN")
def _lrn(ctx):
    """TensorFlow sums squares over ``depth_radius`` channels each side and scales the sum
    by ``alpha``; myelin's LRN (ONNX's) divides ``alpha`` by the window size."""
    size = 2 * ctx.attr("depth_radius", 5) + 1
    attrs = {"size": size, "alpha": ctx.attr("alpha", 1.0) * size,
             "beta": ctx.attr("beta", 0.5), "bias": ctx.attr("bias", 1.0)}
    x = ctx.op("Transpose", [ctx.input(0)], {"perm": _TO_NCHW})
    return ctx.op("Transpose", [ctx.op("LRN", [x], attrs)], {"perm": _TO_NHWC})


# Softmax: the Builder's definitions, over the last axis.
@converter("Softmax")
def _softmax(ctx):
    return ctx.b.softmax(ctx.input(0))


@converter("LogSoftmax")
def _log_softmax(ctx):
    return ctx.b.log_softmax(ctx.input(0))
