"""The integer matrix product and convolution of quantized models: ``MatMulInteger``, made by
the pass :mod:`myelin.optimize.quantized` from the int32 products the ONNX importer writes for
MatMulInteger, QLinearMatMul, QGemm, MatMulIntegerToFloat and DynamicQuantizeMatMul, and
``ConvInteger``, made by :mod:`myelin.optimize.quantized_conv` from QDQ convolutions.

``MatMulInteger(a, b, a_zero)`` is ``(a - a_zero) x b`` accumulated exactly in int32:

* ``a`` is uint8 or int8, [..., m, k] (its leading axes are batch axes);
* ``b`` is int8 or int16, [k, n]: the weights with their zero points already subtracted;
* ``a_zero`` is one element of ``a``'s type, a's zero point (a variable where quantization is
  dynamic).

The output is int32 [..., m, n]. Sums that leave int32 wrap around, as the int32 product they
replace does (they need k of about 33,000 at the extremes of the types).
"""

import numpy as np

from myelin.ops import conv
from myelin.ops.common import Domain, check_dtype, error
from myelin.ops.fused import RecipePart
from myelin.ops.registry import Kind, OpDef, TensorType, lookup, register

BYTES = Domain("uint8 or int8", frozenset({"uint8", "int8"}))
WEIGHTS = Domain("int8 or int16", frozenset({"int8", "int16"}))


def _check_zero(op, x, zero):
    if zero.dtype != x.dtype or any(d != 1 for d in zero.shape):
        raise error(op, f"the zero point {zero.name} must be one element of {x.dtype}, "
                        f"not {zero.type_string()}")


def _infer(op):
    a, b, a_zero = op.inputs
    check_dtype(op, a, BYTES)
    check_dtype(op, b, WEIGHTS)
    if a.rank < 2 or b.rank != 2:
        raise error(op, f"a must have rank 2 or more and b rank 2, got shapes "
                        f"{list(a.shape)} and {list(b.shape)}")
    if a.shape[-1] != b.shape[0] and -1 not in (a.shape[-1], b.shape[0]):
        raise error(op, f"inner dimensions {a.shape[-1]} and {b.shape[0]} differ")
    _check_zero(op, a, a_zero)
    return [TensorType("int32", tuple(a.shape[:-1]) + (b.shape[1],))]


def _reference(op, inputs):
    a, b, a_zero = (np.asarray(x, np.int64) for x in inputs)
    return [np.matmul(a - a_zero.reshape(()), b).astype(np.int32)]


def conv_part(op):
    """The Conv of ``x`` by ``w`` with ``op``'s attributes that a ConvInteger ``op`` computes
    on its shifted bytes (for :func:`myelin.ops.conv.geometry`)."""
    part = RecipePart(op, "Conv", list(op.inputs[:2]))
    for key, value in op.attrs.items():
        part.attrs[key] = value
    return part


def _conv_infer(op):
    x, w, x_zero = op.inputs
    check_dtype(op, x, BYTES)
    check_dtype(op, w, WEIGHTS)
    _check_zero(op, x, x_zero)
    return [TensorType("int32", conv.geometry(conv_part(op)).output_shape)]


def _conv_reference(op, inputs):
    x, w, x_zero = (np.asarray(v, np.float64) for v in inputs)
    (y,) = lookup("Conv").reference(conv_part(op), [x - x_zero.reshape(()), w])
    return [y.astype(np.int32)]


register(OpDef("MatMulInteger", Kind.OPAQUE, _infer, _reference, inputs=(3, 3),
               doc="(a - a_zero) x b of uint8/int8 a and int8/int16 b, in int32"))
register(OpDef("ConvInteger", Kind.OPAQUE, _conv_infer, _conv_reference, inputs=(3, 3),
               attrs=dict(conv.CONV_ATTRS),
               doc="Conv of (x - x_zero) by w for uint8/int8 x and int8/int16 w, in int32"))
