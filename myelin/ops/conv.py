"""Convolution, pooling and local response normalization over NC[D][H]W tensors, as ONNX.

Every op here reads ``X`` of shape ``[N, C, D1, ..., Dk]`` (k >= 1 spatial axes, channels on
axis 1) and uses ONNX's attribute names and defaults; int-list attributes are written
``[a,b,c]``. ``pads`` lists the begin paddings of every spatial axis, then the end paddings.
``auto_pad`` is NOTSET (use ``pads``), SAME_UPPER / SAME_LOWER (output size ``ceil(D /
stride)``, the odd padding at the end / beginning) or VALID (no padding).

* ``Conv(X, W[, B])``: ``W`` is ``[M, C / group, K1, ..., Kk]``, ``B`` is ``[M]``; attributes
  ``kernel_shape``, ``strides``, ``pads``, ``dilations``, ``group`` (default 1), ``auto_pad``;
  and myelin's ``channel_block`` (default 0): when ``b`` > 0, X and Y are images in blocks of
  ``b`` channels and W is packed (depthwise, or groups of whole blocks; :mod:`myelin.ops.layout`);
  with ``input_block`` 1 as well, X is a plain image read a channel at a time (``[N, C, D...,
  1]``: a first layer's few colours); with ``winograd`` 1, a group-1 3x3 Conv of stride and
  dilation 1 on blocked images takes W in Winograd's form
  (:func:`myelin.ops.layout.winograd_weight`).
  MaxPool (without indices) and AveragePool take ``channel_block`` too.
* ``ConvTranspose(X, W[, B])``: ``W`` is ``[C, M / group, K1, ..., Kk]``; also
  ``output_padding`` and ``output_shape`` (when given, the pads are derived from it: the odd
  one at the beginning unless auto_pad is SAME_UPPER).
* ``MaxPool(X)``: ``kernel_shape`` (required), ``strides``, ``pads``, ``dilations``,
  ``auto_pad``, ``ceil_mode`` and ``storage_order``. With ``indices`` set (a myelin attribute:
  the ONNX importer sets it for a node with a second output) it also outputs ``Indices``
  (int64): the position of the first maximum in the flattened input, its spatial part in
  row-major (storage_order 0) or column-major (1) order.
* ``AveragePool(X)``: like MaxPool without indices, plus ``count_include_pad`` (0: divide by
  the number of input elements in the window; 1: also count the padding, but not the part of a
  ceil_mode window past the end padding).
* ``LpPool(X)``: ``(sum |x|^p)^(1/p)`` over the window, attribute ``p`` (default 2).
* ``GlobalAveragePool``, ``GlobalMaxPool``, ``GlobalLpPool``: over all spatial axes, which stay
  as size 1.
* ``LRN(X)``: ``x / (bias + alpha / size * sum of x^2 over channels [c - (size-1)//2,
  c + ceil((size-1)/2)])^beta``; attributes ``size`` (required), ``alpha`` (1e-4), ``beta``
  (0.75), ``bias`` (1.0).

:func:`geometry` is the one place that turns a conv or pool op's shapes and attributes into
kernel, stride, dilation, padding and output sizes; the CPU kernels use it too.
"""

import dataclasses
import itertools
import math

import numpy as np

from myelin.ops import layout
from myelin.ops.common import FLOAT, check_dtype, common_dtype, error
from myelin.ops.registry import Kind, OpDef, TensorType, attribute, register

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_POOLS = ("MaxPool", "AveragePool", "LpPool")
_GLOBAL_POOLS = ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")


@dataclasses.dataclass
class Geometry:
    """Sizes of a conv or pool op: ``batch``, ``in_channels``, ``out_channels``, ``group``,
    and per spatial axis ``input``, ``output``, ``kernel``, ``strides``, ``dilations``,
    ``pads_begin``, ``pads_end`` (for ConvTranspose, ``input`` is X's and ``output`` Y's)."""

    batch: int
    in_channels: int
    out_channels: int
    group: int
    input: tuple
    output: tuple
    kernel: tuple
    strides: tuple
    dilations: tuple
    pads_begin: tuple
    pads_end: tuple

    @property
    def rank(self):
        return len(self.input)

    @property
    def output_shape(self):
        return (self.batch, self.out_channels) + tuple(self.output)


def _ints(op, name, count, default, minimum=None):
    values = op.attrs.get_ints(name)
    if values is None:
        return [default] * count
    if len(values) != count:
        raise error(op, f"attribute {name}={values} needs {count} values")
    if minimum is not None and any(v < minimum for v in values):
        raise error(op, f"attribute {name}={values} must be >= {minimum}")
    return list(values)


def _auto_pad(op):
    value = op.attrs.get_str("auto_pad", "NOTSET") or "NOTSET"
    value = value.strip().upper()
    if value not in AUTO_PADS:
        raise error(op, f"attribute auto_pad={value!r} is not one of {', '.join(AUTO_PADS)}")
    return value


def channel_block(op):
    """The channels per block of ``op``'s images: 0 for plain ``[N, C, D...]`` images, else
    ``b`` for images ``[N, C/b, D..., b]`` (see :mod:`myelin.ops.layout`)."""
    return op.attrs.get_int("channel_block", 0) or 0


def input_block(op):
    """The channels per block of ``op``'s input image: its attribute ``input_block`` where
    set (1: a plain image read a channel at a time, :mod:`myelin.ops.layout`), else
    :func:`channel_block`."""
    return op.attrs.get_int("input_block", 0) or channel_block(op)


def winograd(op):
    """Whether ``op``'s weight is in Winograd's F(2x2, 3x3) form (attribute ``winograd``,
    :mod:`myelin.ops.layout`)."""
    return bool(op.attrs.get_int("winograd", 0))


def _x_of(op):
    """Input X of ``op``, checked, and its shape as ``[N, C, D...]``."""
    x = op.inputs[0]
    block, in_block = channel_block(op), input_block(op)
    for name, value in (("channel_block", block), ("input_block", in_block)):
        if value < 0:
            raise error(op, f"attribute {name}={value} must be 0 or positive")
    if in_block != block and (not block or op.type != "Conv"):
        raise error(op, f"input_block={in_block} needs a channel-blocked Conv")
    if block and (len(x.shape) < 4 or x.shape[-1] != in_block):
        raise error(op, f"input {x.name} of shape {list(x.shape)} is not an image in blocks of "
                        f"{in_block} channels ([N, C/{in_block}, spatial..., {in_block}])")
    shape = layout.plain_shape(x.shape) if block else tuple(x.shape)
    if len(shape) < 3:
        raise error(op, f"input {x.name} must have rank 3 or more ([N, C, spatial...]), got "
                        f"shape {list(x.shape)}")
    if shape[1] < 1 or shape[0] < -1 or any(d == 0 or d < -1 for d in shape[2:]):
        raise error(op, f"input {x.name} of shape {list(x.shape)} needs non-zero spatial sizes "
                        f"and a known channel count (only the batch may be empty)")
    return x, shape


def _weight_shape(op, channels, rank):
    """Weight W's shape as ``[M, C/group, K...]`` (unpacked where ``op`` is channel-blocked;
    ``rank`` spatial axes)."""
    w, block, in_block = op.inputs[1], channel_block(op), input_block(op)
    group = op.attrs.get_int("group", 1)
    if winograd(op):
        return _winograd_weight_shape(op, w, block, in_block, group)
    if not block:
        return tuple(w.shape)
    if in_block != block and group != 1:
        raise error(op, f"input_block={in_block} needs group 1, not group={group}")
    depthwise = layout.depthwise(group, channels)
    if op.type != "Conv" or group < 1 or not (depthwise or channels % group == 0
                                              and channels // group % in_block == 0):
        raise error(op, f"a channel-blocked {op.type} needs one group per channel or groups of "
                        f"whole blocks of {in_block} channels, not group={group}")
    blocks = w.shape[-1:] if depthwise else w.shape[-2:]
    if (len(w.shape) != rank + (3 if depthwise else 4)
            or tuple(blocks) != ((block,) if depthwise else (in_block, block))
            or (depthwise and w.shape[1] != 1)):
        raise error(op, f"weight {w.name} of shape {list(w.shape)} is not packed in blocks of "
                        f"{block} channels (see myelin.ops.layout)")
    shape = layout.plain_weight_shape(w.shape, depthwise)
    if not depthwise and (shape[0] % group or shape[0] // group % block):
        raise error(op, f"weight {w.name} of shape {list(w.shape)} has groups of output "
                        f"channels that are not whole blocks of {block}")
    return shape


def _winograd_weight_shape(op, w, block, in_block, group):
    """Weight W's shape as ``[M, C, 3, 3]`` where ``op`` takes it in Winograd's form."""
    if not block or op.type != "Conv" or group != 1 or in_block != block:
        raise error(op, f"winograd=1 needs a channel-blocked Conv of group 1 with blocked "
                        f"input, not channel_block={block}, group={group}, "
                        f"input_block={in_block}")
    if len(w.shape) != 6 or tuple(w.shape[1:3]) + tuple(w.shape[4:]) != (4, 4, block, block):
        raise error(op, f"weight {w.name} of shape {list(w.shape)} is not in Winograd's form "
                        f"[M/{block}, 4, 4, C/{block}, {block}, {block}] (see myelin.ops.layout)")
    return (w.shape[0] * block, w.shape[3] * block, 3, 3)


def _check_winograd(op, g):
    """Raise unless geometry ``g`` is one Winograd's F(2x2, 3x3) computes (where ``op``'s
    weight is in its form)."""
    if winograd(op) and (g.kernel != (3, 3) or g.strides != (1, 1) or g.dilations != (1, 1)):
        raise error(op, f"winograd=1 needs a 3x3 kernel of strides and dilations 1, not "
                        f"kernel {list(g.kernel)}, strides {list(g.strides)}, dilations "
                        f"{list(g.dilations)}")


def _same_pads(auto_pad, total):
    small, large = total // 2, total - total // 2
    return (small, large) if auto_pad == "SAME_UPPER" else (large, small)


def geometry(op):
    """The :class:`Geometry` of a Conv, ConvTranspose or pool op (global pools included);
    raises ShapeError naming the op for inconsistent shapes or attributes. ``op`` is anything
    with ``name``, ``type``, ``attrs`` and ``inputs`` that have a ``shape``."""
    x, x_shape = _x_of(op)
    batch, channels, *spatial = x_shape
    rank = len(spatial)
    if op.type in _GLOBAL_POOLS:
        ones = (1,) * rank
        return Geometry(batch, channels, channels, 1, tuple(spatial), ones, tuple(spatial), ones,
                        ones, (0,) * rank, (0,) * rank)
    conv = op.type in ("Conv", "ConvTranspose")
    group, out_channels = 1, channels
    if conv:
        w, w_shape = op.inputs[1], _weight_shape(op, channels, rank)
        group = op.attrs.get_int("group", 1)
        if group < 1 or channels % group:
            raise error(op, f"group={group} does not divide the {channels} channels of input "
                            f"{x.name}")
        if len(w_shape) != len(x_shape):
            raise error(op, f"weight {w.name} of shape {list(w_shape)} must have the rank of "
                            f"input {x.name} of shape {list(x_shape)}")
        if op.type == "Conv":
            out_channels = w_shape[0]
            if w_shape[1] * group != channels or out_channels % group:
                raise error(op, f"weight {w.name} of shape {list(w_shape)} does not fit input "
                                f"{x.name} of shape {list(x_shape)} with group={group}")
        else:
            out_channels = w_shape[1] * group
            if w_shape[0] != channels:
                raise error(op, f"weight {w.name} of shape {list(w_shape)} needs {channels} "
                                f"input channels (axis 0) for input {x.name} of shape "
                                f"{list(x_shape)}")
        kernel = _ints(op, "kernel_shape", rank, 1, 1)
        if op.attrs.get_ints("kernel_shape") is None:
            kernel = list(w_shape[2:])
        elif tuple(kernel) != tuple(w_shape[2:]):
            raise error(op, f"kernel_shape={kernel} differs from weight {w.name} of shape "
                            f"{list(w_shape)}")
        if len(op.inputs) > 2:
            bias = op.inputs[2]
            if tuple(bias.shape) != (out_channels,):
                raise error(op, f"bias {bias.name} of shape {list(bias.shape)} needs "
                                f"[{out_channels}]")
    else:
        if op.attrs.get_ints("kernel_shape") is None:
            raise error(op, "attribute kernel_shape is required")
        kernel = _ints(op, "kernel_shape", rank, 1, 1)
    strides = _ints(op, "strides", rank, 1, 1)
    dilations = _ints(op, "dilations", rank, 1, 1)
    auto_pad = _auto_pad(op)
    pads = _ints(op, "pads", 2 * rank, 0, 0)
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    ceil_mode = op.type in _POOLS and op.attrs.get_int("ceil_mode", 0) != 0

    if op.type == "ConvTranspose":
        out_pad = _ints(op, "output_padding", rank, 0, 0)
        for p, s, d in zip(out_pad, strides, dilations):
            if p >= max(s, d):
                raise error(op, f"output_padding={out_pad} must be smaller than the stride or "
                                f"the dilation")
        natural = [s * (n - 1) + p + e for s, n, p, e in zip(strides, spatial, out_pad, extent)]
        wanted = op.attrs.get_ints("output_shape")
        if wanted is not None and len(wanted) == rank + 2:
            wanted = wanted[2:]
        if wanted is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            wanted = [n * s for n, s in zip(spatial, strides)]
        if wanted is not None:
            if len(wanted) != rank or any(o < 1 for o in wanted):
                raise error(op, f"attribute output_shape={wanted} needs {rank} positive sizes")
            split = [_same_pads("SAME_UPPER" if auto_pad == "SAME_UPPER" else "SAME_LOWER",
                                max(0, n - o)) for n, o in zip(natural, wanted)]
            pads = [b for b, _ in split] + [e for _, e in split]
            output = list(wanted)
        else:
            if auto_pad == "VALID":
                pads = [0] * (2 * rank)
            output = [n - pads[i] - pads[rank + i] for i, n in enumerate(natural)]
        output = [o if n > 0 or wanted is not None else -1 for o, n in zip(output, spatial)]
    else:
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            output = [-(-n // s) if n > 0 else -1 for n, s in zip(spatial, strides)]
            split = [_same_pads(auto_pad, max(0, (o - 1) * s + e - n) if n > 0 else 0)
                     for o, s, e, n in zip(output, strides, extent, spatial)]
            pads = [b for b, _ in split] + [e for _, e in split]
        else:
            if auto_pad == "VALID":
                pads = [0] * (2 * rank)
            output = []
            for i, (n, s, e) in enumerate(zip(spatial, strides, extent)):
                if n < 0:           # a dynamic size stays dynamic
                    output.append(-1)
                    continue
                room = n + pads[i] + pads[rank + i] - e
                if room < 0:
                    break
                size = (-(-room // s) if ceil_mode else room // s) + 1
                if ceil_mode and (size - 1) * s >= n + pads[i]:
                    size -= 1   # the last window must start inside the input or begin padding
                output.append(size)
    if len(output) < rank or any(o < 1 and n > 0 for o, n in zip(output, spatial)):
        raise error(op, f"input {x.name} of shape {list(x_shape)} is too small for kernel "
                        f"{list(kernel)} (dilations {dilations}, pads {pads}, strides "
                        f"{strides})")
    if op.type in _POOLS and any(p >= k for p, k in zip(pads, kernel + kernel)):
        raise error(op, f"pads={pads} must be smaller than kernel_shape={kernel}")
    g = Geometry(batch, channels, out_channels, group, tuple(spatial), tuple(output),
                 tuple(kernel), tuple(strides), tuple(dilations), tuple(pads[:rank]),
                 tuple(pads[rank:]))
    _check_winograd(op, g)
    return g


# Shape and type rules.
def _output_shape(op, g):
    """Y's shape: ``g.output_shape``, in blocks of channels where ``op``'s images are."""
    block = channel_block(op)
    if block and g.out_channels % block:
        raise error(op, f"{g.out_channels} output channels do not fill blocks of {block}")
    return layout.blocked_shape(g.output_shape, block) if block else g.output_shape


def _conv_infer(op):
    dtype = common_dtype(op, op.inputs, FLOAT)
    return [TensorType(dtype, _output_shape(op, geometry(op)))]


def _pool_infer(op):
    x, _ = _x_of(op)
    check_dtype(op, x, FLOAT)
    if op.type == "LpPool" or op.type == "GlobalLpPool":
        if attribute(op, "p") <= 0:
            raise error(op, f"attribute p={attribute(op, 'p')} must be positive")
    if op.type == "MaxPool" and op.attrs.get_int("storage_order", 0) not in (0, 1):
        raise error(op, "attribute storage_order must be 0 or 1")
    shape = _output_shape(op, geometry(op))
    types = [TensorType(x.dtype, shape)]
    if op.type == "MaxPool" and (attribute(op, "indices") or len(op.outputs) == 2):
        if channel_block(op):
            raise error(op, "a channel-blocked MaxPool has no indices output")
        types.append(TensorType("int64", shape))
    return types


def _lrn_infer(op):
    x, _ = _x_of(op)
    check_dtype(op, x, FLOAT)
    size = op.attrs.get_int("size")
    if size is None or size < 1:
        raise error(op, f"attribute size={size} must be a positive integer")
    return [TensorType(x.dtype, x.shape)]


# Float64 references.
def _windows(array, g, offset, dims):
    """Slices of ``array``'s spatial axes (from axis 2) for kernel tap ``offset``."""
    index = [slice(None), slice(None)]
    for axis, k in enumerate(offset):
        start = k * g.dilations[axis]
        index.append(slice(start, start + g.strides[axis] * (dims[axis] - 1) + 1,
                           g.strides[axis]))
    return array[tuple(index)]


def _blocked_reference(reference):
    """``reference(op, inputs)`` of plain images, run on a channel-blocked op's by unpacking
    its image and weight and blocking its outputs again."""
    def run(op, inputs):
        block = channel_block(op)
        if not block:
            return reference(op, inputs)
        inputs = list(inputs)
        inputs[0] = layout.unblock(inputs[0])
        if len(inputs) > 1 and op.type == "Conv" and winograd(op):
            inputs[1] = layout.unwinograd_weight(inputs[1])
        elif len(inputs) > 1 and op.type == "Conv":
            inputs[1] = layout.unblock_weight(inputs[1], layout.depthwise(
                op.attrs.get_int("group", 1), inputs[0].shape[1]))
        return [layout.block(y, block) for y in reference(op, inputs)]
    return run


@_blocked_reference
def _conv_reference(op, inputs):
    x, w = inputs[:2]
    g = geometry(op)
    pads = [(0, 0), (0, 0)] + list(zip(g.pads_begin, g.pads_end))
    padded = np.pad(x, pads)
    y = np.zeros(g.output_shape)
    cg, mg = g.in_channels // g.group, g.out_channels // g.group
    for offset in itertools.product(*(range(k) for k in g.kernel)):
        part = _windows(padded, g, offset, g.output)
        for k in range(g.group):
            taps = w[(slice(k * mg, (k + 1) * mg), slice(None)) + offset]
            y[:, k * mg:(k + 1) * mg] += np.einsum("nc...,mc->nm...",
                                                   part[:, k * cg:(k + 1) * cg], taps)
    if len(inputs) > 2:
        y += inputs[2].reshape((-1,) + (1,) * g.rank)
    return [y]


def _conv_transpose_reference(op, inputs):
    x, w = inputs[:2]
    g = geometry(op)
    cg, mg = g.in_channels // g.group, g.out_channels // g.group
    # Scatter into the unpadded output, then cut the pads away (or extend it with zeros).
    full_size = [max(s * (n - 1) + (k - 1) * d + 1, b + o) for s, n, k, d, b, o in
                 zip(g.strides, g.input, g.kernel, g.dilations, g.pads_begin, g.output)]
    full = np.zeros((g.batch, g.out_channels) + tuple(full_size))
    for offset in itertools.product(*(range(k) for k in g.kernel)):
        part = _windows(full, g, offset, g.input)
        for k in range(g.group):
            taps = w[(slice(k * cg, (k + 1) * cg), slice(None)) + offset]
            part[:, k * mg:(k + 1) * mg] += np.einsum("nc...,cm->nm...",
                                                      x[:, k * cg:(k + 1) * cg], taps)
    y = full[(slice(None), slice(None)) + tuple(slice(b, b + o) for b, o in
                                                 zip(g.pads_begin, g.output))]
    if len(inputs) > 2:
        y = y + inputs[2].reshape((-1,) + (1,) * g.rank)
    return [y]


@_blocked_reference
def _pool_reference(op, inputs):
    (x,) = inputs
    g = geometry(op)
    kind = op.type.replace("Global", "")
    # Pad so that every window fits; mark input elements and the padded extent.
    ends = [max(b + n + e, (o - 1) * s + (k - 1) * d + 1) - b - n for b, n, e, o, s, k, d in
            zip(g.pads_begin, g.input, g.pads_end, g.output, g.strides, g.kernel, g.dilations)]
    pads = [(0, 0), (0, 0)] + list(zip(g.pads_begin, ends))
    padded = np.pad(x, pads)
    inside = np.pad(np.ones(x.shape, bool), pads)
    extent = np.zeros(padded.shape, bool)
    extent[(slice(None), slice(None)) + tuple(slice(0, b + n + e) for b, n, e in
                                               zip(g.pads_begin, g.input, g.pads_end))] = True
    flat = np.arange(x.size).reshape(x.shape)
    if op.type == "MaxPool" and op.attrs.get_int("storage_order", 0) == 1:
        spatial = np.arange(math.prod(g.input)).reshape(g.input[::-1]).transpose()
        flat = (np.arange(g.batch * g.in_channels).reshape(g.batch, -1, *([1] * g.rank))
                * math.prod(g.input) + spatial)
    flat = np.pad(flat, pads, constant_values=-1)
    offsets = list(itertools.product(*(range(k) for k in g.kernel)))
    values = np.stack([_windows(padded, g, o, g.output) for o in offsets])
    valid = np.stack([_windows(inside, g, o, g.output) for o in offsets])
    if kind == "MaxPool":
        masked = np.where(valid, values, -np.inf)
        position = masked.argmax(axis=0)
        y = np.take_along_axis(masked, position[None], 0)[0]
        if op.type != "MaxPool" or (len(op.outputs) < 2 and not attribute(op, "indices")):
            return [y]
        index = np.stack([_windows(flat, g, o, g.output) for o in offsets])
        return [y, np.take_along_axis(index, position[None], 0)[0].astype(np.int64)]
    if kind == "AveragePool":
        total = np.where(valid, values, 0.0).sum(axis=0)
        if op.attrs.get_int("count_include_pad", 0):
            counted = np.stack([_windows(extent, g, o, g.output) for o in offsets])
        else:
            counted = valid
        return [total / counted.sum(axis=0)]
    p = attribute(op, "p")
    return [(np.where(valid, np.abs(values), 0.0) ** p).sum(axis=0) ** (1.0 / p)]


def _lrn_reference(op, inputs):
    (x,) = inputs
    size = op.attrs.get_int("size")
    alpha, beta, bias = (attribute(op, name) for name in ("alpha", "beta", "bias"))
    before, after = (size - 1) // 2, -(-(size - 1) // 2)
    channels = x.shape[1]
    square = x * x
    total = np.zeros_like(x)
    for c in range(channels):
        total[:, c] = square[:, max(0, c - before):min(channels, c + after + 1)].sum(axis=1)
    return [x / (bias + alpha / size * total) ** beta]


# Gradients (see myelin.autodiff.context).
def _conv_gradient(g):
    """dX is the transposed convolution of dY by W (output_padding restores the rows a stride
    skipped); dW correlates X with dY, a convolution with the batch as the channels (stride
    and dilation swapped), group blocks taken from its result; dB sums dY."""
    op, b = g.op, g.b
    geo = geometry(op)
    spatial = list(range(2, 2 + geo.rank))
    swap = [1, 0] + spatial
    pads = list(geo.pads_begin) + list(geo.pads_end)
    dy = g.dy
    if g.needs(0):
        extent = [(k - 1) * d + 1 for k, d in zip(geo.kernel, geo.dilations)]
        skipped = [(n + pb + pe - e) % s for n, pb, pe, e, s in
                   zip(geo.input, geo.pads_begin, geo.pads_end, extent, geo.strides)]
        g.add(0, b.op("ConvTranspose", [dy, g.input(1)],
                      attrs={"strides": list(geo.strides), "dilations": list(geo.dilations),
                             "pads": pads, "group": geo.group, "output_padding": skipped}))
    if g.needs(1):
        full = b.op("Conv", [b.transpose(g.x, swap), b.transpose(dy, swap)],
                    attrs={"strides": list(geo.dilations), "dilations": list(geo.strides),
                           "pads": pads})          # [C, M, K'...], K' >= the kernel
        cg, mg = geo.in_channels // geo.group, geo.out_channels // geo.group
        blocks = [b.slice(full, [k * cg, k * mg] + [0] * geo.rank, [cg, mg] + list(geo.kernel))
                  for k in range(geo.group)]
        block = b.concat(blocks, axis=1) if len(blocks) > 1 else blocks[0]
        g.add(1, b.transpose(block, swap))
    if len(op.inputs) > 2 and g.needs(2):
        g.add(2, b.sum(dy, [0] + spatial))


def _global_average_pool_gradient(g):
    x = g.op.inputs[0]
    g.add(0, g.b.mul(g.dy, 1.0 / math.prod(x.shape[2:])))


CONV_ATTRS = {"kernel_shape": None, "strides": None, "pads": None, "dilations": None,
               "group": 1, "auto_pad": "NOTSET"}
_POOL_ATTRS = {"kernel_shape": None, "strides": None, "pads": None, "dilations": None,
               "auto_pad": "NOTSET", "ceil_mode": 0}

register(OpDef("Conv", Kind.OPAQUE, _conv_infer, _conv_reference,
               attrs=dict(CONV_ATTRS, channel_block=0, input_block=0, winograd=0),
               inputs=(2, 3), doc="N-D convolution (cross-correlation) with groups, as ONNX",
               gradient=_conv_gradient))
register(OpDef("ConvTranspose", Kind.OPAQUE, _conv_infer, _conv_transpose_reference,
               attrs=dict(CONV_ATTRS, output_padding=None, output_shape=None), inputs=(2, 3),
               doc="N-D transposed convolution with groups, as ONNX"))
register(OpDef("MaxPool", Kind.OPAQUE, _pool_infer, _pool_reference,
               attrs=dict(_POOL_ATTRS, storage_order=0, indices=False, channel_block=0),
               outputs=None,
               doc="maximum over sliding windows (and its flat input index), as ONNX"))
register(OpDef("AveragePool", Kind.OPAQUE, _pool_infer, _pool_reference,
               attrs=dict(_POOL_ATTRS, count_include_pad=0, channel_block=0),
               doc="mean over sliding windows, as ONNX"))
register(OpDef("LpPool", Kind.OPAQUE, _pool_infer, _pool_reference,
               attrs=dict(_POOL_ATTRS, p=2.0), doc="p-norm over sliding windows, as ONNX"))
register(OpDef("GlobalAveragePool", Kind.OPAQUE, _pool_infer, _pool_reference,
               doc="mean over all spatial axes (kept as size 1)",
               gradient=_global_average_pool_gradient))
register(OpDef("GlobalMaxPool", Kind.OPAQUE, _pool_infer, _pool_reference,
               doc="maximum over all spatial axes (kept as size 1)"))
register(OpDef("GlobalLpPool", Kind.OPAQUE, _pool_infer, _pool_reference, attrs={"p": 2.0},
               doc="p-norm over all spatial axes (kept as size 1)"))
register(OpDef("LRN", Kind.OPAQUE, _lrn_infer, _lrn_reference,
               attrs={"size": None, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},
               doc="local response normalization across channels, as ONNX"))
