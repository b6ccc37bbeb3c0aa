"""Integer matrix products on bytes: an int32 ``MatMul`` of zero-point-shifted 8-bit values
becomes a :mod:`MatMulInteger <myelin.ops.quantized>` op, which the CPU computes on the bytes
themselves (:mod:`myelin.codegen.llvm.kernels.matmul_int8`) instead of on int32 copies.

The pattern, as the ONNX importer writes MatMulInteger, QLinearMatMul, QGemm,
MatMulIntegerToFloat and DynamicQuantizeMatMul (:mod:`myelin.importers.onnx.converters.quantize`)::

    a32 = Sub(Cast(a, int32), Cast(a_zero, int32))   # or Cast(a, int32): no zero point
    y = MatMul(a32, w32)                             # optionally transpose_b

where ``a`` is uint8 or int8, ``a_zero`` one element of its type (a variable, as dynamic
quantization computes it, or a constant), and ``w32`` a constant [k, n] (the weights minus
their zero points, folded by constant folding) whose values fit int16. Per-row zero points of
``a`` keep the int32 product. The shifted values are left to dead code elimination when
nothing else reads them.
"""

import numpy as np

from myelin.flow import dtypes
from myelin.optimize.simplify import clamped

_BYTES = {"uint8": (0, 255), "int8": (-128, 127)}


def byte_source(var):
    """(``var``, its byte type) where ``var`` holds uint8 or int8 values: a byte variable, or
    a float clamp to the range of one (a quantization, whose Cast to bytes the simplifier
    merged into the Cast that reads it); else None."""
    if var.dtype in _BYTES:
        return var, var.dtype
    if var.dtype in dtypes.FLOAT_TYPES:
        for dtype, (low, high) in _BYTES.items():
            if clamped(var, low, high):
                return var, dtype
    return None


def _cast_of_bytes(var):
    """(source, its byte type) where ``var`` is an int32 Cast of uint8 or int8 values
    (:func:`byte_source`); else None."""
    op = var.producer
    if op is None or op.type != "Cast" or var.dtype != "int32":
        return None
    return byte_source(op.inputs[0])


def zero_point(flow, var, dtype):
    """A one-element variable of ``dtype`` holding ``var``'s value (int32, or a float
    constant): its Cast source, or a new constant for an integral constant in the type's
    range; None otherwise."""
    if var.elements != 1:
        return None
    found = _cast_of_bytes(var)
    if found is not None:
        source, its_dtype = found
        return source if source.dtype == dtype == its_dtype else None
    if not var.fixed:
        return None
    value = float(np.asarray(var.data, np.float64).reshape(()))
    low, high = _BYTES[dtype]
    if not (value == np.round(value) and low <= value <= high):
        return None
    return constant(flow, f"{var.name}/{dtype}", np.array(int(value), dtypes.to_numpy(dtype)))


def _shifted_bytes(flow, var):
    """(a, its byte type, a_zero) where ``var`` is ``a - a_zero`` in int32 for bytes ``a``
    (``a`` a float clamp where the bytes are its Cast), else None."""
    found = _cast_of_bytes(var)
    if found is not None:
        zero = constant(flow, f"{var.name}/zero", np.zeros((), dtypes.to_numpy(found[1])))
        return found + (zero,)
    op = var.producer
    if op is None or op.type != "Sub" or var.dtype != "int32":
        return None
    found = _cast_of_bytes(op.inputs[0])
    if found is None or tuple(op.inputs[0].shape) != tuple(var.shape):
        return None
    zero = zero_point(flow, op.inputs[1], found[1])
    return None if zero is None else found + (zero,)


def as_bytes(flow, func, var, dtype):
    """``var`` itself if of ``dtype``, else its Cast to ``dtype`` (one already in ``func``, or
    a new one)."""
    if var.dtype == dtype:
        return var
    for reader in var.consumers:
        if reader.type == "Cast" and reader.func is func and reader.outputs[0].dtype == dtype:
            return reader.outputs[0]
    out = flow.var(flow.unique_var_name(f"{var.name}/{dtype}"), dtype, var.shape)
    flow.op(flow.unique_op_name(f"{var.name}/Cast"), "Cast", func, [var], [out],
            {"dtype": dtype})
    return out


def _weights(var, transposed):
    """The constant int32 matrix ``var`` [k, n] as int8 or int16 (the narrowest that holds
    it), or None where it is not a constant of int16 values."""
    if not var.fixed or var.rank != 2 or var.dtype != "int32":
        return None
    data = np.asarray(var.data).reshape(var.shape)
    if transposed:
        data = data.T
    if data.size and (data.min() < -32768 or data.max() > 32767):
        return None
    narrow = np.int8 if not data.size or (data.min() >= -128 and data.max() <= 127) \
        else np.int16
    return np.ascontiguousarray(data, narrow)


def constant(flow, name, data):
    return flow.var(flow.unique_var_name(name), dtypes.from_numpy(data.dtype), data.shape,
                    data=data)


def fuse_integer_matmul(flow, ctx):
    """Rewrite every int32 product of shifted bytes by constant weights into a MatMulInteger
    op; returns True if any was."""
    changed = False
    for func in flow.funcs.values():
        rewrote = False
        for op in list(func.ops):
            if (op.type != "MatMul" or op.outputs[0].dtype != "int32"
                    or op.attrs.get_bool("transpose_a", False)):
                continue
            a32, w32 = op.inputs
            weights = _weights(w32, op.attrs.get_bool("transpose_b", False))
            if weights is None or a32.rank < 2:
                continue
            shifted = _shifted_bytes(flow, a32)
            if shifted is None:
                continue
            a, dtype, zero = shifted
            a = as_bytes(flow, func, a, dtype)
            out = op.outputs[0]
            flow.delete_op(op)
            w = constant(flow, f"{w32.name}/{weights.dtype}", weights)
            flow.op(flow.unique_op_name(f"{op.name}/Integer"), "MatMulInteger", func,
                    [a, w, zero], [out])
            ctx.log(f"{op.name}: int32 product of {a.dtype} by {weights.dtype} weights "
                    f"became MatMulInteger")
            rewrote = True
        if rewrote:
            func.ops = flow.order(func)
            changed = True
    return changed
