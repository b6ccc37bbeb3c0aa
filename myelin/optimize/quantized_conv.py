"""Integer convolutions of QDQ models: a float ``Conv`` of dequantized bytes by constant
weights that are integers times a scale per output channel becomes a dequantizing
:mod:`ConvInteger <myelin.ops.quantized>` op on the bytes (int32 sums, then ``float(sum) *
scale * w_scale + bias`` per output channel)::

    Conv(Mul(Sub(q, zero), scale), w, bias)        # q: bytes, or a quantization's float clamp
    ->  ConvInteger(q8, w_int, zero8, scale * w_scale, bias)

as the ONNX importer writes a QDQ group (DequantizeLinear(QuantizeLinear(x)) and
DequantizeLinear(w_q) into a Conv) once constant folding and the simplifier's round-trip rule
have made the weights a float constant and the pair a clamp; also without the scale (1), as
it writes ConvInteger and QLinearConv (a float64 Conv of the shifted bytes and weights). The
integer weights are recovered from the float ones, per output channel (per-tensor
quantization is a case of it): the scale (the largest weight over a level: 127, 64, 128 or
255 for int8, 7-bit and zero-point-shifted uint8 weights, else the smallest in 1 .. 255) that
makes every weight an integer times it, to within float32 rounding of ``integer * scale``.
Weights that are no such multiples keep the float Conv, and so do groups of fewer than
``GROUP_CHANNELS`` channels (no int8 kernel pays for them yet) other than 2-D depthwise
convolutions (which have one: :mod:`myelin.codegen.llvm.kernels.conv_depthwise`).

The next QuantizeLinear's division by its scale goes into the op's scale and bias (one
division fewer per output, one rounding fewer); the element-wise ops after it that read only
constant scalars (a ReLU, the quantization's rounding and clamp, a DequantizeLinear) move
into its recipe (``expr``), and where the recipe ends in a clamp that is converted to bytes,
the op writes those bytes: the next ConvInteger reads them, float readers a Cast of them.

The int32 sums are exact; the float Conv they replace rounds each product, so the two may
differ by float32's rounding of the accumulated value, which the next quantization turns
into one step at most where a value lies at a rounding boundary.
"""

import numpy as np

from myelin.flow import dtypes
from myelin.ops import recipe as recipes
from myelin.ops import registry
from myelin.optimize.cleanup import eliminate_dead_code
from myelin.optimize.quantized import as_bytes, byte_source, constant, zero_point
from myelin.optimize.simplify import clamped

_LEVELS = 255               # the largest magnitude of the integer weights
# Tried in this order, each per channel then per tensor, so that int8 weights stay int8: 64
# before 128 (7-bit weights fit both, int8 at 64), 255 last (a per-tensor int8 row whose
# largest magnitude divides 255 fits it per channel, as 3, 5, ... times its integers).
_COMMON_LEVELS = (127, 64, 128, 255)
_SAMPLE = 16                # elements of a row the levels are tried on first
_CHUNK = 256                # rows whose samples are tried at once
_TOLERANCE = 2.0 ** -20     # of the largest weight: float32 rounding of integer * scale
_BYTE_RANGES = {"uint8": (0, 255), "int8": (-128, 127)}
GROUP_CHANNELS = 8          # the fewest channels per group made int8 (see _grouped_fit)


def dequantized(var):
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
    return (var.fixed and var.elements == 1
            and bool(np.isfinite(np.asarray(var.data, np.float64)).all()))


def integer_weights(data):
    """(integers [M, ...] as int8 or int16, scale per output channel [M]) whose products are
    the float weights ``data`` [M, ...] to within float32 rounding, or None."""
    rows = np.asarray(data, np.float64).reshape(len(data), -1)
    if not rows.size or not np.all(np.isfinite(rows)):
        return None
    top = np.abs(rows).max(axis=1)
    scales = _scales(rows, top)
    if scales is None:
        return None
    ints = np.rint(rows / scales[:, None])
    narrow = np.int8 if ints.min() >= -128 and ints.max() <= 127 else np.int16
    return ints.astype(narrow).reshape(data.shape), scales


def _scales(rows, top):
    """The scale of each row: its largest magnitude ``top`` (or the tensor's) over a level
    that makes the row integers times it: 127, 64, 128 or 255 (symmetric int8, 7-bit, int8
    whose largest magnitude is -128 and shifted uint8 weights) where one does, else the
    row's over the smallest in 1 .. 255; None where a row has none."""
    top = np.where(top > 0, top, 1.0)
    scales = np.full(len(rows), np.nan)
    for level in _COMMON_LEVELS:
        for tops in (top, np.full_like(top, top.max())):       # per channel, per tensor
            left = np.flatnonzero(np.isnan(scales))
            fits = _multiples(rows[left], tops[left] / level, tops[left])
            scales[left[fits]] = tops[left[fits]] / level
    left = np.flatnonzero(np.isnan(scales))
    if len(left):
        found = _smallest_levels(rows[left], top[left])
        if found is None:
            return None
        scales[left] = found
    return scales


def _smallest_levels(rows, top):
    """``top`` over the smallest level that makes each row integers times it, or None.
    Levels are tried on a sample of each row, all at once, and the first that fits is
    checked on the whole row (then the next ones, for the rare row whose sample fits a
    coarser grid)."""
    sample = rows[:, ::max(1, rows.shape[1] // _SAMPLE)] / top[:, None]
    levels = np.arange(1, _LEVELS + 1, dtype=np.float64)[:, None]
    first = np.zeros(len(rows), np.int64)
    for start in range(0, len(rows), _CHUNK):
        scaled = sample[start:start + _CHUNK, None, :] * levels
        fits = np.all(np.abs(scaled - np.rint(scaled)) <= _TOLERANCE * levels, axis=2)
        first[start:start + _CHUNK] = np.where(fits.any(axis=1), fits.argmax(axis=1) + 1, 0)
    if not first.all():
        return None
    scales = top / first
    for row in np.flatnonzero(~_multiples(rows, scales, top)):
        for level in range(first[row] + 1, _LEVELS + 1):
            scales[row] = top[row] / level
            if _multiples(rows[row:row + 1], scales[row:row + 1], top[row:row + 1])[0]:
                break
        else:
            return None
    return scales


def _multiples(rows, scale, top):
    """Which ``rows`` are integers times their ``scale`` to within float32 rounding
    (``_TOLERANCE * top``, here in units of the scale)."""
    ratios = rows * (1.0 / scale)[:, None]
    return np.all(np.abs(ratios - np.rint(ratios)) <= (_TOLERANCE * top / scale)[:, None],
                  axis=1)


def _grouped_fit(op):
    """True for one group, groups of at least ``GROUP_CHANNELS`` input and output channels
    (the product per group pays) and 2-D depthwise convolutions (their own kernel); other
    thin groups keep the float kernels."""
    group = op.attrs.get_int("group", 1)
    w = op.inputs[1]
    if w.rank == 4 and w.shape[1] == 1 and group == op.inputs[0].shape[1]:
        return True
    return group == 1 or (w.rank >= 3 and w.shape[1] >= GROUP_CHANNELS
                          and w.shape[0] // group >= GROUP_CHANNELS)


def _rewrite(flow, func, op):
    """Replace Conv ``op`` by a dequantizing ConvInteger; returns it, or None where ``op``
    does not match."""
    x, w = op.inputs[:2]
    bias = op.inputs[2] if len(op.inputs) > 2 else None
    out = op.outputs[0]
    if (out.dtype not in ("float32", "float64") or not _grouped_fit(op)
            or not w.fixed or (bias is not None and not bias.fixed)):
        return None
    found = dequantized(x)
    if found is None:
        return None
    source, dtype, zero, scale = found
    weights = integer_weights(np.asarray(w.data).reshape(w.shape))
    if weights is None or scale == 0:
        return None
    zero = constant(flow, f"{x.name}/zero", np.zeros((), dtypes.to_numpy(dtype))) \
        if zero is None else zero_point(flow, zero, dtype)
    if zero is None:
        return None
    ints, scales = weights
    channels = np.zeros(len(ints)) if bias is None else np.asarray(bias.data).reshape(-1)
    numpy_type = dtypes.to_numpy(out.dtype)
    flow.delete_op(op)
    return flow.op(flow.unique_op_name(f"{op.name}/Integer"), "ConvInteger", func,
                   [as_bytes(flow, func, source, dtype),
                    constant(flow, f"{w.name}/{ints.dtype}", ints), zero,
                    constant(flow, f"{op.name}/scale", (scale * scales).astype(numpy_type)),
                    constant(flow, f"{op.name}/bias", channels.astype(numpy_type))],
                   [out], dict(op.attrs.items()))


def _scalar_of(var, dtype):
    return _scalar(var) and var.dtype == dtype


def _fold_division(flow, op):
    """Where the one reader of dequantizing ConvInteger ``op``'s value divides it by a
    constant scalar (the next quantization's scale), divide the op's scale and bias by it
    instead: its epilogue then has no division (a ``vdivps`` per vector of outputs, which
    bounded MobileNetV2's 1x1 layers of few channels), and rounds once fewer."""
    value = op.outputs[0]
    if value.is_output or len(value.consumers) != 1:
        return
    reader = value.consumers[0]
    if (reader.type != "Div" or reader.func is not op.func or dict(reader.attrs.items())
            or reader.inputs[0] is not value or reader.inputs[1] is value
            or not _scalar_of(reader.inputs[1], value.dtype)
            or reader.outputs[0].is_output or reader.outputs[0].shape != value.shape):
        return
    divisor = float(np.asarray(reader.inputs[1].data, np.float64).flat[0])
    if divisor == 0 or not np.isfinite(divisor):
        return
    numpy_type = dtypes.to_numpy(value.dtype)
    for old in op.inputs[3:5]:
        new = constant(flow, old.name, (np.asarray(old.data, np.float64) / divisor)
                       .astype(numpy_type))
        op.replace_input(old, new)
    _read_instead(reader.outputs[0], value)
    flow.delete_op(reader)


def _requantize(flow, func, op, fusable):
    """Move the element-wise ops after dequantizing ConvInteger ``op`` into its recipe (a
    quantization's division first into its scale and bias, :func:`_fold_division`): each
    the only reader of the value before it, of its type and shape, and reading besides it
    only constant scalars (a ReLU, a quantization's rounding and clamp). Where the last value
    is a clamp to a byte range that is converted to bytes, the op writes the bytes, and other
    readers of the value convert them back. Returns True if it made a recipe or wrote bytes."""
    _fold_division(flow, op)
    value, dtype = op.outputs[0], op.outputs[0].dtype
    chain, scalars, expr = [], [], recipes.Ref("%", 0)
    while not value.is_output and len(value.consumers) == 1:
        reader = value.consumers[0]
        out = reader.outputs[0] if len(reader.outputs) == 1 else None
        others = [v for v in reader.inputs if v is not value]
        opdef = registry.find(reader.type)
        if (out is None or reader.func is not func or opdef is None or reader.type == "Cast"
                or opdef.kind not in (registry.Kind.ELEMWISE, registry.Kind.BROADCAST)
                or (fusable is not None and not fusable(reader.type))
                or dict(reader.attrs.items()) or (out.dtype, out.shape) != (dtype, value.shape)
                or len(others) + 1 != len(reader.inputs)
                or not all(_scalar_of(v, dtype) for v in others)):
            break
        arguments = []
        for v in reader.inputs:
            if v is not value and v not in scalars:
                scalars.append(v)
            arguments.append(expr if v is value else recipes.Ref("%", scalars.index(v) + 1))
        expr = recipes.Call(reader.type, tuple(arguments))
        chain.append(reader)
        value = out
    casts = [c for c in value.consumers if c.type == "Cast" and c.func is func
             and c.outputs[0].dtype in _BYTE_RANGES and not value.is_output
             and clamped(value, *_BYTE_RANGES[c.outputs[0].dtype])]
    # One of them becomes the op's output; the others' readers read it (not a graph output).
    casts.sort(key=lambda c: not c.outputs[0].is_output)
    casts = [c for i, c in enumerate(casts) if i == 0 or (
        not c.outputs[0].is_output and c.outputs[0].dtype == casts[0].outputs[0].dtype)]
    if not chain and not casts:
        return False
    inputs, attrs = op.inputs + scalars, dict(op.attrs.items())
    if chain:
        attrs["expr"] = str(recipes.Recipe(((recipes.Ref("@", 0), expr),)))
    result = value
    if casts:
        result = casts[0].outputs[0]
        attrs["dtype"] = result.dtype
        for cast in casts:
            converted = cast.outputs[0]
            flow.delete_op(cast)
            if converted is not result:
                _read_instead(converted, result)
    internal = [op.outputs[0]] + [reader.outputs[0] for reader in chain]
    for member in [op] + chain:
        flow.delete_op(member)
    flow.op(flow.unique_op_name(op.name), "ConvInteger", func, inputs, [result], attrs)
    if result is not value and (value.consumers or value.is_output):
        flow.op(flow.unique_op_name(f"{op.name}/Cast"), "Cast", func, [result], [value],
                {"dtype": dtype})
    for var in internal:
        if var is not value and var.producer is None and not var.consumers:
            flow.delete_var(var)
    return True


def _read_instead(old, new):
    """Make every reader of ``old`` read ``new``."""
    for reader in list(old.consumers):
        reader.replace_input(old, new)


def fuse_integer_conv(flow, ctx):
    """Rewrite every QDQ convolution of bytes by integer weights into a ConvInteger op, with
    the requantization after it; returns True if any was."""
    changed = False
    for func in flow.funcs.values():
        made = []
        for op in list(func.ops):
            if op.type == "Conv":
                integer = _rewrite(flow, func, op)
                if integer is not None:
                    ctx.log(f"{op.name}: QDQ convolution became ConvInteger")
                    made.append(integer)
        for op in made:
            if _requantize(flow, func, op, ctx.fusable):
                ctx.log(f"{op.name}: requantization fused into its epilogue")
        if made:
            func.ops = flow.order(func)
            changed = True
    if changed:     # the float dequantizations the convolutions read (before fusion sees them)
        eliminate_dead_code(flow, ctx)
    return changed
