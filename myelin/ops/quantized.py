"""The integer matrix product of quantized models, made by the pass
:mod:`myelin.optimize.quantized` from the int32 products the ONNX importer writes for
MatMulInteger, QLinearMatMul, QGemm, MatMulIntegerToFloat and DynamicQuantizeMatMul.

``MatMulInteger(a, b, a_zero)`` is ``(a - a_zero) x b`` accumulated exactly in int32:

* ``a`` is uint8 or int8, [..., m, k] (its leading axes are batch axes);
* ``b`` is int8 or int16, [k, n]: the weights with their zero points already subtracted;
* ``a_zero`` is one element of ``a``'s type, a's zero point (a variable where quantization is
  dynamic).

The output is int32 [..., m, n]. Sums that leave int32 wrap around, as the int32 product they
replace does (they need k of about 33,000 at the extremes of the types).
"""

import numpy as np

from myelin.ops.common import Domain, check_dtype, error
from myelin.ops.registry import Kind, OpDef, TensorType, register

BYTES = Domain("uint8 or int8", frozenset({"uint8", "int8"}))
WEIGHTS = Domain("int8 or int16", frozenset({"int8", "int16"}))


def _infer(op):
    a, b, a_zero = op.inputs
    check_dtype(op, a, BYTES)
    check_dtype(op, b, WEIGHTS)
    if a.rank < 2 or b.rank != 2:
        raise error(op, f"a must have rank 2 or more and b rank 2, got shapes "
                        f"{list(a.shape)} and {list(b.shape)}")
    if a.shape[-1] != b.shape[0] and -1 not in (a.shape[-1], b.shape[0]):
        raise error(op, f"inner dimensions {a.shape[-1]} and {b.shape[0]} differ")
    if a_zero.dtype != a.dtype or any(d != 1 for d in a_zero.shape):
        raise error(op, f"the zero point {a_zero.name} must be one element of {a.dtype}, "
                        f"not {a_zero.type_string()}")
    return [TensorType("int32", tuple(a.shape[:-1]) + (b.shape[1],))]


def _reference(op, inputs):
    a, b, a_zero = (np.asarray(x, np.int64) for x in inputs)
    return [np.matmul(a - a_zero.reshape(()), b).astype(np.int32)]


register(OpDef("MatMulInteger", Kind.OPAQUE, _infer, _reference, inputs=(3, 3),
               doc="(a - a_zero) x b of uint8/int8 a and int8/int16 b, in int32"))
