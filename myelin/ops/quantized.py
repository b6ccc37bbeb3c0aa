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

``ConvInteger(x, w, x_zero)`` (Conv's attributes) is the convolution of ``x - x_zero`` by
``w`` in int32, the padding zero after the shift: ``x`` uint8 or int8 [N, C, spatial...],
``w`` int8 or int16 [M, C / group, kernel...] (the weights less their zero points),
``x_zero`` one element of ``x``'s type. ``ConvInteger(x, w, x_zero, scale, bias, s...)``
dequantizes it: ``float(sum) * scale + bias`` (float [M] each, per output channel), then
applies the recipe ``expr`` (element-wise, on that value as ``%0`` and the one-element
inputs ``s`` as ``%1``, ...: a ReLU, the next quantization's division, rounding and clamp)
and converts to ``dtype`` (default: the scale's type; a byte type where the recipe ends in a
clamp to its range, so the next quantized layer reads bytes).
"""

import numpy as np

from myelin.ops import conv
from myelin.ops import recipe as recipes
from myelin.ops.common import FLOAT, Domain, check_dtype, error
from myelin.ops.fused import RecipePart, ValueType, _infer_recipe, _run_recipe
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


_FIRST_RECIPE_INPUT = 5     # a ConvInteger's recipe reads its inputs from this one on


def recipe_inputs(op):
    """The inputs of a ConvInteger ``op`` that its recipe reads as ``%1``, ``%2``, ..."""
    return list(op.inputs[_FIRST_RECIPE_INPUT:])


def conv_part(op):
    """The Conv of ``x`` by ``w`` with ``op``'s attributes that a ConvInteger ``op`` computes
    on its shifted bytes (for :func:`myelin.ops.conv.geometry`)."""
    part = RecipePart(op, "Conv", list(op.inputs[:2]))
    for key, value in op.attrs.items():
        if key in conv.CONV_ATTRS:
            part.attrs[key] = value
    return part


def epilogue(op):
    """The parsed recipe of a ConvInteger ``op`` applied after its dequantization, or None."""
    expr = op.attrs.get_str("expr")
    return recipes.parse(expr) if expr else None


def _conv_infer(op):
    x, w, x_zero = op.inputs[:3]
    check_dtype(op, x, BYTES)
    check_dtype(op, w, WEIGHTS)
    _check_zero(op, x, x_zero)
    shape = conv.geometry(conv_part(op)).output_shape
    if len(op.inputs) == 3:
        if op.attrs.get_str("expr") or op.attrs.get_str("dtype"):
            raise error(op, "expr and dtype need the inputs scale and bias")
        return [TensorType("int32", shape)]
    if len(op.inputs) < 5:
        raise error(op, "needs both scale and bias, or neither")
    scale, bias = op.inputs[3:5]
    check_dtype(op, scale, FLOAT)
    for param in (scale, bias):
        if param.dtype != scale.dtype or tuple(param.shape) != (shape[1],):
            raise error(op, f"{param.name} must be {scale.dtype}[{shape[1]}], not "
                            f"{param.type_string()}")
    recipe = epilogue(op)
    if recipe is not None:
        values = [ValueType(f"{op.name}[dequantized]", scale.dtype, shape)] + recipe_inputs(op)
        (result,) = _infer_recipe(op, recipe, values)
        if (result.dtype, tuple(result.shape)) != (scale.dtype, tuple(shape)):
            raise error(op, f"the recipe must keep {scale.dtype}{list(shape)}, not "
                            f"{result.dtype}{list(result.shape)}")
    return [TensorType(op.attrs.get_str("dtype") or scale.dtype, shape)]


def _conv_reference(op, inputs):
    x, w, x_zero = (np.asarray(v, np.float64) for v in inputs[:3])
    (y,) = lookup("Conv").reference(conv_part(op), [x - x_zero.reshape(()), w])
    if len(inputs) == 3:
        return [y.astype(np.int32)]
    channel = (-1,) + (1,) * (y.ndim - 2)
    y = y * np.reshape(inputs[3], channel) + np.reshape(inputs[4], channel)
    recipe = epilogue(op)
    if recipe is None:
        return [y]
    return _run_recipe(op, recipe, [y] + list(inputs[_FIRST_RECIPE_INPUT:]))


register(OpDef("MatMulInteger", Kind.OPAQUE, _infer, _reference, inputs=(3, 3),
               doc="(a - a_zero) x b of uint8/int8 a and int8/int16 b, in int32"))
register(OpDef("ConvInteger", Kind.OPAQUE, _conv_infer, _conv_reference, inputs=(3, None),
               attrs=dict(conv.CONV_ATTRS, expr=None, dtype=None),
               doc="Conv of (x - x_zero) by w for uint8/int8 x and int8/int16 w, in int32; "
                   "or dequantized and requantized by a recipe",
               recipe_operands=lambda op: [None] + list(range(_FIRST_RECIPE_INPUT,
                                                              len(op.inputs)))))
