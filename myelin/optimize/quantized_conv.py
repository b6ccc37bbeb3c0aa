"""Integer convolutions of QDQ models: a float ``Conv`` of dequantized bytes by constant
weights that are integers times a scale per output channel becomes a
:mod:`ConvInteger <myelin.ops.quantized>` op on the bytes, in int32, followed by its
dequantization (a float scale per output channel, and the bias)::

    Conv(Mul(Sub(q, zero), scale), w, bias)        # q: bytes, or a quantization's float clamp
    ->  Add(Mul(Cast(ConvInteger(q8, w_int, zero8), float), scale * w_scale), bias)

as the ONNX importer writes a QDQ group (DequantizeLinear(QuantizeLinear(x)) and
DequantizeLinear(w_q) into a Conv) once constant folding and the simplifier's round-trip rule
have made the weights a float constant and the pair a clamp; also without the scale (1), as it
writes ConvInteger and QLinearConv (a float64 Conv of the shifted bytes and weights). The integer weights are
recovered from the float ones: per tensor, then per channel, the scale (the largest weight
over the smallest level in 1 .. 255: symmetric int8 is 127, ``reduce_range``'s 7 bits 64,
zero-point-shifted uint8 up to 255) that makes every weight an integer times it, to within
float32 rounding of ``integer * scale``; weights that are no such multiples keep the float
Conv. So does a grouped convolution (no int8 kernel
yet). The requantization after it (Relu, the next QuantizeLinear's division, rounding and
clamp) stays float element-wise code, fused as usual.

The int32 sums are exact; the float Conv they replace rounds each product, so the two may
differ by float32's rounding of the accumulated value, which the next quantization turns
into one step at most where a value lies at a rounding boundary.
"""

import numpy as np

from myelin.flow import dtypes
from myelin.optimize.quantized import as_bytes, byte_source, constant, zero_point

_LEVELS = 255               # the largest magnitude of the integer weights
_SAMPLE = 16                # elements of a row a level is tried on first
_TOLERANCE = 2.0 ** -20     # of the largest weight: float32 rounding of integer * scale


def _dequantized(var):
    """(bytes or clamp, byte type, zero point variable or None, scale) where ``var`` is
    ``(q - zero) * scale``, ``q * scale``, ``q - zero`` or ``q`` (scale 1) of byte values
    ``q``, a constant scalar scale and zero point; else None."""
    op = var.producer
    pairs = [(var, None)]
    if op is not None and op.type == "Mul":
        pairs = [(x, scale) for x, scale in (op.inputs, op.inputs[::-1]) if _scalar(scale)]
    for shifted, scale in pairs:
        zero = None
        inner = shifted.producer
        if inner is not None and inner.type == "Sub" and _scalar(inner.inputs[1]):
            shifted, zero = inner.inputs
        found = byte_source(shifted)
        if found is None and shifted.producer is not None and shifted.producer.type == "Cast":
            found = byte_source(shifted.producer.inputs[0])
        if found is not None and tuple(found[0].shape) == tuple(var.shape):
            value = 1.0 if scale is None else float(np.asarray(scale.data, np.float64).flat[0])
            return found + (zero, value)
    return None


def _scalar(var):
    """True if ``var`` is a finite constant of one element."""
    return (var.constant and not var.learnable and var.data is not None and var.elements == 1
            and bool(np.isfinite(np.asarray(var.data, np.float64)).all()))


def integer_weights(data):
    """(integers [M, ...] as int8 or int16, scale per output channel [M]) whose products are
    the float weights ``data`` [M, ...] to within float32 rounding, or None."""
    rows = np.asarray(data, np.float64).reshape(len(data), -1)
    if not rows.size or not np.all(np.isfinite(rows)):
        return None
    largest = np.abs(rows).max(axis=1)
    for top in (np.full_like(largest, largest.max()), largest):     # per tensor, per channel
        scales = _scales(rows, top)
        if scales is not None:
            ints = np.rint(rows / scales[:, None])
            narrow = np.int8 if ints.min() >= -128 and ints.max() <= 127 else np.int16
            return ints.astype(narrow).reshape(data.shape), scales
    return None


def _scales(rows, top):
    """The scale per row, ``top`` over the smallest level in 1 .. 255 that makes the row
    integers times it, or None where a row has none. Levels are tried on a sample of each
    row, and checked on the whole rows whose sample they fit."""
    scales = np.where(top > 0, np.nan, 1.0)
    sample = rows[:, ::max(1, rows.shape[1] // _SAMPLE)]
    for level in range(1, _LEVELS + 1):
        left = np.isnan(scales)
        if not left.any():
            return scales
        scale = np.where(top > 0, top, 1.0) / level
        fits = left & _multiples(sample, scale, top)
        if fits.any():
            chosen = np.flatnonzero(fits)
            whole = _multiples(rows[chosen], scale[chosen], top[chosen])
            scales[chosen[whole]] = scale[chosen[whole]]
    return None if np.isnan(scales).any() else scales


def _multiples(rows, scale, top):
    """Which ``rows`` are integers times their ``scale`` to within float32 rounding."""
    ints = np.rint(rows / scale[:, None])
    return np.all(np.abs(ints * scale[:, None] - rows) <= _TOLERANCE * top[:, None], axis=1)


def _per_channel(flow, name, values, dtype, rank):
    """A constant of ``values`` [M] shaped [1, M, 1, ...] for a rank-``rank`` output."""
    data = np.asarray(values, np.float64).reshape((1, -1) + (1,) * (rank - 2))
    return constant(flow, name, data.astype(dtypes.to_numpy(dtype)))


def _rewrite(flow, func, op):
    """Replace Conv ``op`` by a ConvInteger and its dequantization; False where it does not
    match."""
    x, w = op.inputs[:2]
    bias = op.inputs[2] if len(op.inputs) > 2 else None
    out = op.outputs[0]
    if (out.dtype not in ("float32", "float64") or op.attrs.get_int("group", 1) != 1
            or not w.constant or w.learnable or w.data is None
            or (bias is not None and (not bias.constant or bias.learnable or bias.data is None))):
        return False
    found = _dequantized(x)
    if found is None:
        return False
    source, dtype, zero, scale = found
    weights = integer_weights(np.asarray(w.data).reshape(w.shape))
    if weights is None or scale == 0:
        return False
    zero = constant(flow, f"{x.name}/zero", np.zeros((), dtypes.to_numpy(dtype))) \
        if zero is None else zero_point(flow, zero, dtype)
    if zero is None:
        return False
    ints, scales = weights
    flow.delete_op(op)
    accumulated = flow.var(flow.unique_var_name(f"{out.name}/int32"), "int32", out.shape)
    flow.op(flow.unique_op_name(f"{op.name}/Integer"), "ConvInteger", func,
            [as_bytes(flow, func, source, dtype),
             constant(flow, f"{w.name}/{ints.dtype}", ints), zero],
            [accumulated], dict(op.attrs.items()))
    value = flow.var(flow.unique_var_name(f"{out.name}/{out.dtype}"), out.dtype, out.shape)
    flow.op(flow.unique_op_name(f"{op.name}/Cast"), "Cast", func, [accumulated], [value],
            {"dtype": out.dtype})
    factor = _per_channel(flow, f"{op.name}/scale", scale * scales, out.dtype, out.rank)
    if bias is None:
        flow.op(flow.unique_op_name(f"{op.name}/Scale"), "Mul", func, [value, factor], [out])
        return True
    scaled = flow.var(flow.unique_var_name(f"{out.name}/scaled"), out.dtype, out.shape)
    flow.op(flow.unique_op_name(f"{op.name}/Scale"), "Mul", func, [value, factor], [scaled])
    flow.op(flow.unique_op_name(f"{op.name}/Bias"), "Add", func,
            [scaled, _per_channel(flow, f"{op.name}/bias", np.asarray(bias.data).reshape(-1),
                                  out.dtype, out.rank)], [out])
    return True


def fuse_integer_conv(flow, ctx):
    """Rewrite every QDQ convolution of bytes by integer weights into a ConvInteger op;
    returns True if any was."""
    changed = False
    for func in flow.funcs.values():
        rewrote = False
        for op in list(func.ops):
            if op.type == "Conv" and _rewrite(flow, func, op):
                ctx.log(f"{op.name}: QDQ convolution became ConvInteger")
                rewrote = True
        if rewrote:
            func.ops = flow.order(func)
            changed = True
    return changed
