"""Neural-network layers with inference semantics: BatchNormalization and Dropout (as ONNX).

* ``BatchNormalization(X, scale, B, mean, var)``: ``(X - mean) / sqrt(var + epsilon) * scale
  + B`` with the statistics given (no training mode). ``X`` has rank 2 or more, channels on
  axis 1; the other inputs are vectors with one entry per channel. Attribute ``epsilon``
  (default 1e-5). Float types only.
* ``Dropout(x)``: the identity at inference; attribute ``ratio`` (default 0.5) in [0, 1).

The optimizer's inference pass (:mod:`myelin.optimize.inference`) rewrites both into plain
element-wise ops.
"""

import numpy as np

from myelin.ops.common import FLOAT, common_dtype, elementwise_gradient, error, shape_fits
from myelin.ops.registry import Kind, OpDef, TensorType, attribute, register


def _batch_norm_infer(op):
    x = op.inputs[0]
    dtype = common_dtype(op, op.inputs, FLOAT)
    if x.rank < 2:
        raise error(op, f"input {x.name} must have rank 2 or more (channels on axis 1), got "
                        f"shape {list(x.shape)}")
    channels = x.shape[1]
    for param in op.inputs[1:]:
        if not (shape_fits(param.shape, (channels,)) or shape_fits((channels,), param.shape)):
            raise error(op, f"input {param.name} has shape {list(param.shape)}, but input "
                            f"{x.name} of shape {list(x.shape)} needs [{channels}]")
    return [TensorType(dtype, x.shape)]


def _batch_norm_reference(op, inputs):
    x, scale, bias, mean, var = inputs
    per_channel = (-1,) + (1,) * (x.ndim - 2)
    scale, bias, mean, var = (p.reshape(per_channel) for p in (scale, bias, mean, var))
    return [(x - mean) / np.sqrt(var + attribute(op, "epsilon")) * scale + bias]


def _dropout_infer(op):
    x = op.inputs[0]
    ratio = attribute(op, "ratio")
    if not 0 <= ratio < 1:
        raise error(op, f"attribute ratio={ratio} must be in [0, 1)")
    return [TensorType(common_dtype(op, [x], FLOAT), x.shape)]


register(OpDef("BatchNormalization", Kind.BROADCAST, _batch_norm_infer, _batch_norm_reference,
               attrs={"epsilon": 1e-5}, inputs=(5, 5),
               doc="(X - mean) / sqrt(var + epsilon) * scale + B over channel axis 1"))
register(OpDef("Dropout", Kind.ELEMWISE, _dropout_infer, lambda op, inputs: [inputs[0]],
               attrs={"ratio": 0.5}, doc="x unchanged (inference)",
               gradient=elementwise_gradient(lambda b, g, dy: dy)))
