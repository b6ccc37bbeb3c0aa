"""Neural-network ONNX ops: Gemm and MatMul, convolution and pooling, normalizations,
softmax, dropout.

Convolutions and pools map one to one onto myelin ops of the same name and attributes.
Normalizations and softmax are written with reductions and element-wise ops (fusion turns
them into a few loops).
"""

import numpy as np

from myelin.flow import dtypes
from myelin.importers.context import WIDENED_TYPES
from myelin.importers.onnx.converters import converter


@converter("MatMul")
def _matmul_op(ctx):
    return matmul(ctx, ctx.input(0), ctx.input(1))


def matmul(ctx, a, b):
    """NumPy's matmul: a vector operand becomes a one-row or one-column matrix, and the
    axis it added is dropped from the result."""
    a2 = ctx.reshape(a, (1,) + a.shape) if a.rank == 1 else a
    b2 = ctx.reshape(b, b.shape + (1,)) if b.rank == 1 else b
    result = ctx.product(a2, b2)
    shape = result.shape
    if b.rank == 1:
        shape = shape[:-1]
    if a.rank == 1:
        shape = shape[:-2] + shape[-1:] if b.rank != 1 else shape[:-1]
    return ctx.reshape(result, shape)


@converter("Gemm")
def _gemm(ctx):
    """alpha * op(A) @ op(B) + beta * C."""
    result = ctx.product(ctx.input(0), ctx.input(1), transpose_a=ctx.attr("transA", 0),
                      transpose_b=ctx.attr("transB", 0))
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if alpha != 1:
        result = ctx.op("Mul", [result, ctx.const(alpha, result.dtype)])
    if ctx.has(2) and beta != 0:
        c = ctx.input(2)
        if beta != 1:
            c = ctx.op("Mul", [c, ctx.const(beta, c.dtype)])
        result = ctx.op("Add", [result, c])
    return result


# Convolution and pooling: the same attributes on both sides.
_CONV_ATTRS = ("kernel_shape", "strides", "pads", "dilations", "group", "auto_pad",
               "output_padding", "output_shape", "ceil_mode", "count_include_pad",
               "storage_order", "p", "size", "alpha", "beta", "bias")


def _pass_through(ctx, op_type, extra=None, outputs=1):
    """The node as the myelin op of the same attributes. float16 and bfloat16 are computed in
    float32, and 8-bit integers (MaxPool) in float32, which holds them exactly."""
    attrs = {name: ctx.attrs[name] for name in _CONV_ATTRS if name in ctx.attrs}
    inputs = ctx.inputs
    original = inputs[0].dtype
    widened = original in WIDENED_TYPES
    if widened:
        inputs = [ctx.cast(var, "float32") for var in inputs]
    results = ctx.op(op_type, inputs, dict(attrs, **(extra or {})), outputs=outputs)
    if not widened:
        return results
    if isinstance(results, list):
        return [ctx.cast(var, original) if var.dtype == "float32" else var for var in results]
    return ctx.cast(results, original)


@converter("Conv", "ConvTranspose", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
           "LpPool", "GlobalLpPool", "LRN")
def _conv(ctx):
    return _pass_through(ctx, ctx.op_type)


@converter("MaxPool")
def _max_pool(ctx):
    if ctx.num_outputs > 1 and ctx.node.output[1]:
        values, indices = _pass_through(ctx, "MaxPool", {"indices": 1}, outputs=2)
        return [values, indices]
    return _pass_through(ctx, "MaxPool")


# Normalizations.
def _inference(ctx):
    """False for a node of an opset before 7 without ``is_test`` set: then it is in training
    mode, by default."""
    return ctx.attr("is_test", ctx.opset >= 7)


@converter("BatchNormalization")
def _batch_norm(ctx):
    if not _inference(ctx):
        raise ctx.error("training mode before opset 7 is not supported (inference only)")
    x, scale, bias, mean, var = ctx.inputs[:5]
    epsilon = ctx.attr("epsilon", 1e-5)
    if ctx.attr("training_mode", 0):
        return _batch_norm_training(ctx, x, scale, bias, mean, var, epsilon)
    if any(ctx.node.output[1:]):
        raise ctx.error("the running statistics outputs are given only in training mode")
    if all(p.constant for p in (scale, bias, mean, var)):
        # The optimizer folds this form into the weights of a preceding Conv or MatMul.
        return ctx.op("BatchNormalization", [x, scale, bias, mean, var], {"epsilon": epsilon})
    scale, bias, mean, var = (_per_channel(ctx, p, x.rank) for p in (scale, bias, mean, var))
    inv_std = ctx.op("Rsqrt", [ctx.op("Add", [var, ctx.const(epsilon, var.dtype)])])
    normalized = ctx.op("Mul", [ctx.op("Sub", [x, mean]), ctx.op("Mul", [inv_std, scale])])
    return ctx.op("Add", [normalized, bias])


def _batch_norm_training(ctx, x, scale, bias, mean, var, epsilon):
    """training_mode=1 (timm's weight standardization exports it): x normalized with its own
    mean and population variance over every axis but the channels'; the running statistics,
    when asked for, blend the given ones with those by ``momentum``, as ONNX defines."""
    axes = [0] + list(range(2, x.rank))
    normalized, batch_mean, batch_var, _ = _normalize(ctx, x, axes, epsilon)
    scale, bias = (_per_channel(ctx, p, x.rank) for p in (scale, bias))
    results = [ctx.op("Add", [ctx.op("Mul", [normalized, scale]), bias])]
    momentum = ctx.attr("momentum", 0.9)
    if ctx.num_outputs > 1:
        for given, batch in ((mean, batch_mean), (var, batch_var)):
            blended = ctx.op("Add", [ctx.op("Mul", [given, ctx.const(momentum, x.dtype)]),
                                     ctx.op("Mul", [ctx.reshape(batch, given.shape),
                                                    ctx.const(1 - momentum, x.dtype)])])
            results.append(blended)
    return results[:max(1, ctx.num_outputs)]


def _normalize(ctx, x, axes, epsilon):
    """(x - mean) / sqrt(var + epsilon) over ``axes``; returns it, the mean, the variance
    and 1/std."""
    mean = ctx.op("Mean", [x], {"axis": list(axes), "keepdims": True})
    centered = ctx.op("Sub", [x, mean])
    variance = ctx.op("Mean", [ctx.op("Square", [centered])], {"axis": list(axes),
                                                                "keepdims": True})
    inv_std = ctx.op("Rsqrt", [ctx.op("Add", [variance, ctx.const(epsilon, x.dtype)])])
    return ctx.op("Mul", [centered, inv_std]), mean, variance, inv_std


def _per_channel(ctx, param, rank):
    return ctx.reshape(param, (-1,) + (1,) * (rank - 2)) if param.rank == 1 else param


@converter("InstanceNormalization")
def _instance_norm(ctx):
    x = ctx.input(0)
    normalized, *_ = _normalize(ctx, x, range(2, x.rank), ctx.attr("epsilon", 1e-5))
    scale = _per_channel(ctx, ctx.input(1), x.rank)
    bias = _per_channel(ctx, ctx.input(2), x.rank)
    return ctx.op("Add", [ctx.op("Mul", [normalized, scale]), bias])


@converter("LayerNormalization")
def _layer_norm(ctx):
    """Normalization over the axes from ``axis`` on; optional outputs Mean and InvStdDev are
    computed in ``stash_type`` (float32) as ONNX defines them."""
    x = ctx.input(0)
    axis = ctx.attr("axis", -1)
    axis = axis + x.rank if axis < 0 else axis
    stash = ctx.cast(x, "float32") if x.dtype in dtypes.REDUCED_FLOAT_TYPES else x
    normalized, mean, _, inv_std = _normalize(ctx, stash, range(axis, x.rank),
                                           ctx.attr("epsilon", 1e-5))
    y = ctx.op("Mul", [ctx.cast(normalized, x.dtype), ctx.input(1)])
    if ctx.has(2):
        y = ctx.op("Add", [y, ctx.input(2)])
    return [y, mean, inv_std][:max(1, ctx.num_outputs)]


@converter("LpNormalization")
def _lp_normalization(ctx):
    x = ctx.input(0)
    axis, p = ctx.attr("axis", -1), ctx.attr("p", 2)
    if p == 1:
        norm = ctx.op("Sum", [ctx.op("Abs", [x])], {"axis": axis, "keepdims": True})
    elif p == 2:
        norm = ctx.op("Sqrt", [ctx.op("Sum", [ctx.op("Square", [x])], {"axis": axis,
                                                                        "keepdims": True})])
    else:
        raise ctx.error(f"p={p} is not 1 or 2")
    zero = ctx.const(0, x.dtype)
    return ctx.op("Cond", [ctx.op("Equal", [norm, zero]), zero, ctx.op("Div", [x, norm])])


@converter("MeanVarianceNormalization")
def _mean_variance_normalization(ctx):
    x = ctx.input(0)
    normalized, *_ = _normalize(ctx, x, ctx.attr("axes", [0, 2, 3]), 1e-9)
    return normalized


# Softmax family.
def _softmax_axes(ctx, x):
    """(input reshaped as softmax sees it, axes, shape to restore): before opset 13 the input
    is flattened to 2-D at ``axis`` (default 1) and normalized over the second part."""
    if ctx.opset < 13:
        axis = ctx.attr("axis", 1)
        axis = axis + x.rank if axis < 0 else axis
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        return ctx.reshape(x, (rows, -1) if x.elements else (rows, 0)), [1], x.shape
    return x, [ctx.attr("axis", -1)], x.shape


def _shifted(ctx, x, axes):
    return ctx.op("Sub", [x, ctx.op("Max", [x], {"axis": axes, "keepdims": True})])


@converter("Softmax")
def _softmax(ctx):
    x, axes, shape = _softmax_axes(ctx, ctx.input(0))
    e = ctx.op("Exp", [_shifted(ctx, x, axes)])
    y = ctx.op("Div", [e, ctx.op("Sum", [e], {"axis": axes, "keepdims": True})])
    return ctx.reshape(y, shape)


@converter("LogSoftmax")
def _log_softmax(ctx):
    x, axes, shape = _softmax_axes(ctx, ctx.input(0))
    shifted = _shifted(ctx, x, axes)
    total = ctx.op("Sum", [ctx.op("Exp", [shifted])], {"axis": axes, "keepdims": True})
    return ctx.reshape(ctx.op("Sub", [shifted, ctx.op("Log", [total])]), shape)


@converter("Dropout")
def _dropout(ctx):
    """The identity at inference (training_mode absent or false); the mask is all true."""
    if ctx.has(2) and np.any(ctx.value(2)) or not _inference(ctx):
        raise ctx.error("training mode is not supported (inference only)")
    x = ctx.input(0)
    if ctx.num_outputs > 1 and ctx.node.output[1]:
        return [x, ctx.const(np.ones(x.shape, bool))]
    return x
