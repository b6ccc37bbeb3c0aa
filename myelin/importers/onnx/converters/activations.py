"""ONNX activation ops of opset 24 and later, written with myelin's element-wise ops:
Swish (``x * sigmoid(alpha * x)``) and SwiGLU (``swish_alpha(a) * b``)."""

import numpy as np

from myelin.flow import dtypes
from myelin.importers.onnx.converters import converter


def _swish(ctx, x, alpha):
    scaled = x if alpha == 1.0 else \
        ctx.op("Mul", [x, ctx.const(np.asarray(alpha, dtypes.to_numpy(x.dtype)), x.dtype)])
    return ctx.op("Mul", [x, ctx.op("Sigmoid", [scaled])])


@converter("Swish")
def _swish_op(ctx):
    return _swish(ctx, ctx.input(0), float(ctx.attr("alpha", 1.0)))


@converter("SwiGLU")
def _swiglu(ctx):
    a, b = ctx.input(0), ctx.input(1)
    if a.shape != b.shape:
        raise ctx.error(f"inputs must have the same shape, got {list(a.shape)} and "
                        f"{list(b.shape)}")
    return ctx.op("Mul", [_swish(ctx, a, float(ctx.attr("alpha", 1.0))), b])
