"""Convolutions and pools: ``convolution`` (1 to 3 spatial axes, groups, dilations,
transposed), max and average pools, adaptive pools, padding ops and ``pixel_shuffle``.

PyTorch pads each spatial axis by the same amount at both ends; myelin's Conv and pools take
ONNX's ``pads`` (begins, then ends). PyTorch's ``ceil_mode`` drops a last window that would
start in the end padding, which ONNX's rule keeps: the converter picks the rounding that gives
PyTorch's output size (the node's meta says it).
"""

import math
import operator

import numpy as np

from myelin.flow import dtypes
from myelin.importers.torch.converters import converter


def _spatial(values, rank, name, ctx):
    """An int list of one entry per spatial axis (PyTorch lets one entry stand for all)."""
    values = [int(v) for v in (values if isinstance(values, (list, tuple)) else [values])]
    if len(values) == 1 and rank > 1:
        values = values * rank
    if len(values) != rank:
        raise ctx.error(f"{name} {values} needs {rank} values")
    return values


@converter("aten.convolution", "aten._convolution")
def _convolution(ctx):
    x, weight = ctx.tensor("input"), ctx.tensor("weight")
    rank = x.rank - 2
    strides = _spatial(ctx["stride"], rank, "stride", ctx)
    padding = _spatial(ctx["padding"], rank, "padding", ctx)
    dilations = _spatial(ctx["dilation"], rank, "dilation", ctx)
    attrs = {"kernel_shape": list(weight.shape[2:]), "strides": strides,
             "pads": padding + padding, "dilations": dilations, "group": int(ctx["groups"])}
    inputs = [x, ctx.cast(weight, x.dtype)]
    bias = ctx.args.get("bias")
    if bias is not None:
        inputs.append(ctx.cast(bias, x.dtype))
    if ctx["transposed"]:
        attrs["output_padding"] = _spatial(ctx["output_padding"], rank, "output_padding", ctx)
        op_type = "ConvTranspose"
    else:
        op_type = "Conv"
    widened = x.dtype in dtypes.REDUCED_FLOAT_TYPES
    if widened:
        inputs = [ctx.cast(v, "float32") for v in inputs]
    y = ctx.op(op_type, inputs, attrs)
    return ctx.cast(y, x.dtype) if widened else y


def _pool_attrs(ctx, x, kernel, stride, padding, dilation=None):
    rank = x.rank - 2
    kernel = _spatial(kernel, rank, "kernel_size", ctx)
    stride = _spatial(stride if stride else kernel, rank, "stride", ctx)
    padding = _spatial(padding, rank, "padding", ctx)
    attrs = {"kernel_shape": kernel, "strides": stride, "pads": padding + padding}
    if dilation is not None:
        attrs["dilations"] = _spatial(dilation, rank, "dilation", ctx)
    return attrs


def _ceil_mode(ctx, x, attrs, ceil_mode, shape):
    """ONNX's ceil_mode giving PyTorch's output ``shape``: 1 where ceiling gives it, else 0
    (PyTorch dropped a last window starting in the padding, flooring it)."""
    if not ceil_mode:
        return 0
    for axis, size in enumerate(x.shape[2:]):
        kernel = attrs["kernel_shape"][axis]
        dilation = attrs.get("dilations", [1] * len(attrs["kernel_shape"]))[axis]
        span = size + 2 * attrs["pads"][axis] - dilation * (kernel - 1) - 1
        ceiling = -(-span // attrs["strides"][axis]) + 1
        if ceiling != shape[2 + axis]:
            return 0
    return 1


@converter("aten.max_pool2d_with_indices", "aten.max_pool3d_with_indices",
           "aten.max_pool1d_with_indices", "aten.max_pool2d", "aten.max_pool1d",
           "aten.max_pool3d")
def _max_pool(ctx):
    x = ctx.tensor("self")
    attrs = _pool_attrs(ctx, x, ctx["kernel_size"], ctx["stride"], ctx["padding"],
                        ctx["dilation"])
    attrs["ceil_mode"] = _ceil_mode(ctx, x, attrs, ctx["ceil_mode"], ctx.out_shape)
    with_indices = "with_indices" in ctx.op_type
    wide = ctx.widened(x)
    if not with_indices or not used(ctx, 1):
        y = ctx.cast(ctx.op("MaxPool", [wide], attrs), x.dtype)
        return [y, None] if with_indices else y
    values, indices = ctx.op("MaxPool", [wide], dict(attrs, indices=1), outputs=2)
    # myelin's indices count over the whole tensor (ONNX's); PyTorch's within each plane.
    plane = int(np.prod(x.shape[2:], dtype=np.int64))
    batch, channels = x.shape[:2]
    offsets = (np.arange(batch * channels, dtype=np.int64) * plane).reshape(
        (batch, channels) + (1,) * (x.rank - 2))
    indices = ctx.op("Sub", [indices, ctx.const(offsets)])
    return [ctx.cast(values, x.dtype), indices]


def used(ctx, index):
    """True if result ``index`` of the node is read (through a getitem)."""
    return any(user.target is operator.getitem and user.args[1] == index
               for user in ctx.node.users)


@converter("aten.avg_pool1d", "aten.avg_pool2d", "aten.avg_pool3d")
def _avg_pool(ctx):
    x = ctx.tensor("self")
    attrs = _pool_attrs(ctx, x, ctx["kernel_size"], ctx["stride"], ctx["padding"])
    attrs["ceil_mode"] = _ceil_mode(ctx, x, attrs, ctx["ceil_mode"], ctx.out_shape)
    include_pad = bool(ctx.get("count_include_pad", True))
    attrs["count_include_pad"] = int(include_pad)
    y = ctx.op("AveragePool", [ctx.widened(x)], attrs)
    divisor = ctx.args.get("divisor_override")
    if divisor:
        if not include_pad and any(attrs["pads"]):
            raise ctx.error("divisor_override with padding not counted is not supported")
        y = ctx.op("Mul", [y, ctx.scalar(math.prod(attrs["kernel_shape"]) / divisor, y.dtype)])
    return ctx.cast(y, x.dtype)


# Adaptive pools.
def _windows(size, out):
    """PyTorch's adaptive windows of an axis: (start, end) per output position."""
    return [((i * size) // out, -(-((i + 1) * size) // out)) for i in range(out)]


def _output_size(ctx, x, value):
    rank = x.rank - 2
    sizes = value if isinstance(value, (list, tuple)) else [value] * rank
    return [x.shape[2 + i] if s is None else int(s) for i, s in enumerate(sizes)]


@converter("aten._adaptive_avg_pool2d", "aten._adaptive_avg_pool3d", "aten.adaptive_avg_pool1d",
           "aten.adaptive_avg_pool2d.default", "aten.adaptive_avg_pool3d.default",
           preserve=True)
def _adaptive_avg_pool(ctx):
    """The mean over each adaptive window: a global pool, a pool of equal windows, or per
    axis a product with a constant averaging matrix (windows of unequal sizes)."""
    x = ctx.tensor("self")
    out = _output_size(ctx, x, ctx["output_size"])
    sizes = list(x.shape[2:])
    wide = ctx.widened(x)
    if all(o == 1 for o in out):
        return ctx.cast(ctx.op("GlobalAveragePool", [wide]), x.dtype)
    if all(s % o == 0 for s, o in zip(sizes, out)):
        if sizes == out:
            return x
        kernel = [s // o for s, o in zip(sizes, out)]
        y = ctx.op("AveragePool", [wide], {"kernel_shape": kernel, "strides": kernel})
        return ctx.cast(y, x.dtype)
    y = ctx.float_of(wide)
    for axis, (size, count) in enumerate(zip(sizes, out)):
        if size == count:
            continue
        matrix = np.zeros((count, size), np.float64)
        for i, (start, end) in enumerate(_windows(size, count)):
            matrix[i, start:end] = 1.0 / (end - start)
        position = 2 + axis
        perm = list(range(y.rank))
        perm[position], perm[-1] = perm[-1], perm[position]
        moved = y if position == y.rank - 1 else ctx.op("Transpose", [y], {"perm": perm})
        weights = ctx.const(matrix.astype(np.dtype(y.dtype)))
        moved = ctx.op("MatMul", [moved, weights], {"transpose_b": True})
        y = moved if position == y.rank - 1 else ctx.op("Transpose", [moved], {"perm": perm})
    return ctx.cast(y, x.dtype)


@converter("aten.adaptive_max_pool2d", "aten.adaptive_max_pool1d", "aten.adaptive_max_pool3d")
def _adaptive_max_pool(ctx):
    x = ctx.tensor("self")
    out = _output_size(ctx, x, ctx["output_size"])
    if used(ctx, 1):
        raise ctx.error("the indices of an adaptive max pool are not supported")
    sizes = list(x.shape[2:])
    wide = ctx.widened(x)
    if all(o == 1 for o in out):
        y = ctx.op("GlobalMaxPool", [wide])
    elif all(s % o == 0 for s, o in zip(sizes, out)):
        kernel = [s // o for s, o in zip(sizes, out)]
        y = ctx.op("MaxPool", [wide], {"kernel_shape": kernel, "strides": kernel})
    else:
        y = wide
        for axis, (size, count) in enumerate(zip(sizes, out)):
            parts = [ctx.op("Max", [ctx.slice(y, 2 + axis, start, end)],
                            {"axis": [2 + axis], "keepdims": True})
                     for start, end in _windows(size, count)]
            y = ctx.concat(parts, 2 + axis)
    return [ctx.cast(y, x.dtype), None]


# Padding.
def _pads(ctx, x, pad):
    """PyTorch's pad list (last axis first: begin, end, ...) as ONNX pads over all axes."""
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > x.rank:
        raise ctx.error(f"pad {pad} does not fit rank {x.rank}")
    begins, ends = [0] * x.rank, [0] * x.rank
    for i in range(len(pad) // 2):
        axis = x.rank - 1 - i
        begins[axis], ends[axis] = pad[2 * i], pad[2 * i + 1]
    return begins + ends


def _pad(ctx, x, pads, mode, value=None):
    if not any(pads):
        return x
    rank = x.rank
    if any(p < 0 for p in pads):       # negative padding crops
        for axis in range(rank):
            begin, end = pads[axis], pads[rank + axis]
            if begin < 0 or end < 0:
                x = ctx.slice(x, axis, -min(begin, 0), x.shape[axis] + min(end, 0))
        pads = [max(p, 0) for p in pads]
        if not any(pads):
            return x
    inputs = [x] + ([ctx.scalar(value, x.dtype)] if value is not None else [])
    return ctx.op("Pad", inputs, {"pads": pads, "mode": mode})


@converter("aten.constant_pad_nd")
def _constant_pad(ctx):
    x = ctx.tensor("self")
    return _pad(ctx, x, _pads(ctx, x, ctx["pad"]), "constant", ctx.get("value", 0))


@converter("aten.reflection_pad1d", "aten.reflection_pad2d", "aten.reflection_pad3d")
def _reflection_pad(ctx):
    x = ctx.tensor("self")
    return _pad(ctx, x, _pads(ctx, x, ctx["padding"]), "reflect")


@converter("aten.replication_pad1d", "aten.replication_pad2d", "aten.replication_pad3d")
def _replication_pad(ctx):
    x = ctx.tensor("self")
    return _pad(ctx, x, _pads(ctx, x, ctx["padding"]), "edge")


@converter("aten.pad.default", preserve=True)
def _pad_op(ctx):
    x = ctx.tensor("self")
    mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
            "circular": "wrap"}.get(ctx.get("mode", "constant"))
    if mode is None:
        raise ctx.error(f"padding mode {ctx['mode']!r} is not supported")
    value = ctx.get("value", 0) if mode == "constant" else None
    return _pad(ctx, x, _pads(ctx, x, ctx["pad"]), mode, value)


# Rearrangements.
@converter("aten.pixel_shuffle.default", preserve=True)
def _pixel_shuffle(ctx):
    x = ctx.tensor("self")
    r = int(ctx["upscale_factor"])
    *batch, c, h, w = x.shape
    blocks = ctx.reshape(x, tuple(batch) + (c // (r * r), r, r, h, w))
    n = len(batch)
    perm = list(range(n)) + [n, n + 3, n + 1, n + 4, n + 2]
    moved = ctx.op("Transpose", [blocks], {"perm": perm})
    return ctx.reshape(moved, tuple(batch) + (c // (r * r), h * r, w * r))


@converter("aten.pixel_unshuffle.default", preserve=True)
def _pixel_unshuffle(ctx):
    x = ctx.tensor("self")
    r = int(ctx["downscale_factor"])
    *batch, c, h, w = x.shape
    blocks = ctx.reshape(x, tuple(batch) + (c, h // r, r, w // r, r))
    n = len(batch)
    perm = list(range(n)) + [n, n + 2, n + 4, n + 1, n + 3]
    moved = ctx.op("Transpose", [blocks], {"perm": perm})
    return ctx.reshape(moved, tuple(batch) + (c * r * r, h // r, w // r))
