"""The channel-blocked layout pass: 2-D convolutions and what follows them in blocks of channels.

Where the back end gives a channel block ``b`` (``Context.channel_block``: its float32 vector
width), every float32 ``Conv`` of an image ``[N, C, H, W]`` by constant weights (not learnable
ones: training would not see the packed copy) whose groups' input and output channels are
multiples of ``b`` (group 1 among them), or depthwise (one group per channel), becomes a Conv
with ``channel_block`` = b over images ``[N, C/b, H, W, b]`` (:mod:`myelin.ops.layout`), its
weights packed here. A group-1 Conv of fewer than ``b`` input channels (a network's first
layer, on its colours) reads its plain image a channel at a time (``input_block`` 1: the image
as ``[N, C, H, W, 1]``, no reorder) and writes blocks. A group-1 3x3 Conv of stride and
dilation 1 on a large enough plane of few enough channels (``WINOGRAD_TILES``) takes its weights
in Winograd's form (``winograd`` 1). The ops that read blocked images follow them where
they can (as ONNX Runtime's NchwcTransformer and TVM's AlterOpLayout do):

* element-wise ops the back end computes (``Context.fusable``, as fusion asks), their other
  inputs blocked too (a constant is blocked here; another value by a reorder, or a Reshape
  where it has one channel), so a residual block stays blocked;
* ``Concat`` along the channels (of inputs whose channels fill whole blocks);
* ``MaxPool`` (without indices) and ``AveragePool``;
* ``GlobalAveragePool`` and ``GlobalMaxPool``, as a ``Mean`` or ``Max`` over the blocked
  image's spatial axes.

A reorder is a Reshape and a Transpose: into blocks where a plain image meets a blocked op, and
out of them for every blocked value's plain readers (made for each converted op; dead code
elimination removes those nobody reads). Images of other ranks, other dtypes and convolutions
the rule does not take stay as they are.
"""

import math

import numpy as np

from myelin.ops import layout, registry
from myelin.ops.conv import channel_block, geometry
from myelin.optimize.cleanup import eliminate_dead_code
from myelin.optimize.quantized_conv import dequantized

_POOLS = ("MaxPool", "AveragePool")
_GLOBAL_POOLS = {"GlobalAveragePool": "Mean", "GlobalMaxPool": "Max"}
_AXIS_ATTRIBUTES = ("axis", "axes", "perm", "shape")
_SPATIAL = (2, 3)       # a blocked 2-D image's spatial axes
# A 3x3 Conv takes Winograd's form (its weights read by every 2x2 tile of the plane) with at
# least WINOGRAD_TILES tiles and at most WINOGRAD_CHANNELS input channels. One Zen 3 core,
# ResNet's layers against the direct kernel: 56x56 of 64 channels 1.7x faster, 28x28 of 128
# 1.6x, 14x14 of 256 1.2-1.4x, 14x14 of 512 the same, 7x7 of 512 (16 tiles) 1.3x slower.
WINOGRAD_TILES = 48
WINOGRAD_CHANNELS = 256


def block_channels(flow, ctx):
    """Rewrite every function of ``flow`` into the channel-blocked layout of
    ``ctx.channel_block`` (nothing when it is 0); returns True if any op was."""
    size = ctx.channel_block
    if not size:
        return False
    changed = False
    for func in flow.funcs.values():
        if _Rewrite(flow, func, size, ctx).run():
            func.ops = flow.order(func)
            changed = True
    if changed:
        eliminate_dead_code(flow, ctx)
    return changed


def _from_int8(var):
    """True if ``var`` is an int8 convolution's result or dequantized bytes."""
    return (var.producer is not None and var.producer.type == "ConvInteger") or \
        dequantized(var) is not None


class _Rewrite:
    """One function's rewrite: ``blocked`` maps each plain image (by id) to its blocked form."""

    def __init__(self, flow, func, size, ctx):
        self.flow, self.func, self.size, self.ctx = flow, func, size, ctx
        self.blocked = {}

    def run(self):
        changed = False
        for op in self.flow.order(self.func):
            if op.type == "Conv" and self._convertible_conv(op):
                self._convert_conv(op)
            elif op.type in _GLOBAL_POOLS and id(op.inputs[0]) in self.blocked:
                self._convert_global_pool(op)
            elif op.type in _POOLS and self._convertible_pool(op):
                self._replace(op, op.type, [self.blocked[id(op.inputs[0])]],
                              dict(op.attrs.items(), channel_block=self.size))
            elif op.type == "Concat" and self._convertible_concat(op):
                self._convert_concat(op)
            elif self._convertible_elementwise(op):
                self._convert_elementwise(op)
            else:
                continue
            changed = True
        return changed

    # Which ops follow.
    def _image(self, var):
        """True if ``var`` is a float32 [N, C, H, W] image whose channels fill blocks."""
        return (len(var.shape) == 4 and var.dtype == "float32" and var.shape[1] > 0
                and var.shape[1] % self.size == 0 and all(d > 0 for d in var.shape[1:]))

    def _convertible_conv(self, op):
        x, w, y = op.inputs[0], op.inputs[1], op.outputs[0]
        if channel_block(op) or not self._image(y) or y.is_input:
            return False
        if not w.fixed or w.dtype != "float32":
            return False
        group = op.attrs.get_int("group", 1)
        if not self._image(x):
            return group == 1 and self._few_channels(x)
        if layout.depthwise(group, x.shape[1]):
            # Not on an int8 network's values (a ConvInteger's result, dequantized bytes):
            # between its ConvInteger steps, which read and write plain images, its two
            # reorders cost more than its blocked kernel saves (MobileNetV2's QDQ export:
            # 7.5 ms with them, 5.9 without).
            if id(x) not in self.blocked and _from_int8(x):
                return False
            return group == y.shape[1] and w.shape[1] == 1
        return (x.shape[1] // group) % self.size == 0 and (y.shape[1] // group) % self.size == 0

    def _few_channels(self, var):
        """True if ``var`` is a float32 [N, C, H, W] image of fewer than a block's channels
        (read a channel at a time)."""
        return (len(var.shape) == 4 and var.dtype == "float32" and 0 < var.shape[1] < self.size
                and all(d > 0 for d in var.shape[2:]))

    @staticmethod
    def _winograd(op):
        """True if Conv ``op`` (on a blocked image) is computed faster in Winograd's form:
        group 1, 3x3, strides and dilations 1 (see WINOGRAD_TILES)."""
        g = geometry(op)
        tiles = math.prod(-(-size // 2) for size in g.output)
        return (g.group == 1 and g.kernel == (3, 3) and g.strides == (1, 1)
                and g.dilations == (1, 1) and tiles >= WINOGRAD_TILES
                and g.in_channels <= WINOGRAD_CHANNELS)

    def _convertible_pool(self, op):
        x, y = op.inputs[0], op.outputs[0]
        return (id(x) in self.blocked and len(op.outputs) == 1 and self._image(y)
                and not y.is_input and not op.attrs.get_bool("indices", False)
                and not channel_block(op))

    def _convertible_elementwise(self, op):
        opdef = registry.find(op.type)
        if (opdef is None or opdef.kind not in (registry.Kind.ELEMWISE, registry.Kind.BROADCAST)
                or len(op.outputs) != 1 or any(k in op.attrs for k in _AXIS_ATTRIBUTES)
                or (self.ctx.fusable is not None and not self.ctx.fusable(op.type))):
            return False
        out = op.outputs[0]
        if not self._image(out) or out.is_input:
            return False
        if not any(id(v) in self.blocked for v in op.inputs):
            return False
        return all(v.dtype == "float32" and self._follows(v, out.shape) for v in op.inputs)

    def _follows(self, var, image):
        """True if ``var`` can be read in blocks by an element-wise op whose output is
        ``image``: it is blocked, or broadcasts to the image with all its channels or one."""
        if id(var) in self.blocked:
            return True
        if len(var.shape) > 4 or any(d < 0 for d in var.shape):
            return False
        shape = (1,) * (4 - len(var.shape)) + tuple(var.shape)
        return (all(s in (1, d) for s, d in zip(shape, image))
                and (shape[1] == 1 or shape[1] == image[1]))

    def _convertible_concat(self, op):
        *parts, axis = op.inputs
        out = op.outputs[0]
        if not axis.constant or not self._image(out) or out.is_input:
            return False
        if int(np.asarray(axis.data).reshape(-1)[0]) not in (1, -3):
            return False
        return (any(id(v) in self.blocked for v in parts)
                and all(self._image(v) for v in parts))

    # Rewrites.
    def _convert_conv(self, op):
        x, w = op.inputs[0], op.inputs[1]
        depthwise = layout.depthwise(op.attrs.get_int("group", 1), x.shape[1])
        attrs = dict(op.attrs.items(), channel_block=self.size)
        if self._image(x):
            in_size, image = self.size, self._in_blocks(x)
        else:                   # a channel at a time
            in_size, image = 1, self._reshape(x, tuple(x.shape) + (1,), f"{x.name}/channels")
            attrs["input_block"] = 1
        weight = np.asarray(w.data, np.float32)
        if in_size == self.size and self._winograd(op):
            attrs["winograd"] = 1
            packed = self._constant(w.name, layout.winograd_weight(weight, self.size))
        else:
            packed = self._constant(w.name, layout.block_weight(weight, self.size, depthwise,
                                                                in_size))
        self._replace(op, "Conv", [image, packed] + list(op.inputs[2:]), attrs)

    def _convert_global_pool(self, op):
        attrs = {"axis": list(_SPATIAL), "keepdims": True}
        self._replace(op, _GLOBAL_POOLS[op.type], [self.blocked[id(op.inputs[0])]], attrs)

    def _convert_concat(self, op):
        *parts, _ = op.inputs
        axis = self._constant(f"{op.name}/axis", np.array(1, np.int32))
        self._replace(op, "Concat", [self._in_blocks(v) for v in parts] + [axis],
                      dict(op.attrs.items()))

    def _convert_elementwise(self, op):
        image = op.outputs[0].shape
        self._replace(op, op.type, [self._operand(v, image) for v in op.inputs],
                      dict(op.attrs.items()))

    def _replace(self, op, op_type, inputs, attrs):
        """Replace ``op`` by ``op_type`` on blocked ``inputs``; its plain output is then the
        blocked one's reorder (for whatever still reads it)."""
        out = op.outputs[0]
        result = self.flow.var(self.flow.unique_var_name(f"{out.name}/blocked"), out.dtype,
                               layout.blocked_shape(out.shape, self.size))
        self.flow.delete_op(op)
        self.flow.op(self.flow.unique_op_name(op.name), op_type, self.func, inputs, [result],
                     attrs)
        self.blocked[id(out)] = result
        self._reorder(result, out, op.name)
        self.ctx.log(f"{op.name}: {op.type} in blocks of {self.size} channels")

    # Values in blocks.
    def _operand(self, var, image):
        """``var`` as an element-wise op with output ``image`` reads it in blocks."""
        if id(var) in self.blocked:
            return self.blocked[id(var)]
        shape = (1,) * (4 - len(var.shape)) + tuple(var.shape)
        if shape[1] == 1:         # every channel alike: the block axis broadcasts too
            blocked_shape = shape[:1] + (1,) + shape[2:] + (1,)
            if var.fixed:
                return self._constant(var.name, np.asarray(var.data).reshape(blocked_shape))
            return self._reshape(var, blocked_shape, f"{var.name}/blocked")
        if var.fixed:
            return self._constant(var.name, layout.block(
                np.asarray(var.data).reshape(shape), self.size))
        return self._in_blocks(var, shape)

    def _in_blocks(self, var, shape=None):
        """``var`` (an image, or ``shape`` with all channels) reordered into blocks, once."""
        if id(var) not in self.blocked:
            shape = tuple(var.shape) if shape is None else shape
            n, c, h, w = shape
            split = self._reshape(var, (n, c // self.size, self.size, h, w),
                                  f"{var.name}/split")
            self.blocked[id(var)] = self._transpose(split, (0, 1, 3, 4, 2),
                                                    f"{var.name}/blocked")
        return self.blocked[id(var)]

    def _reorder(self, blocked, plain, name):
        """Write ``plain`` from ``blocked``: the inverse of :meth:`_in_blocks`."""
        n, c, h, w = plain.shape
        moved = self._transpose(blocked, (0, 1, 4, 2, 3), f"{name}/unblock")
        self.flow.op(self.flow.unique_op_name(f"{name}/plain"), "Reshape", self.func, [moved],
                     [plain], {"shape": list(plain.shape)})

    def _transpose(self, var, perm, name):
        shape = tuple(var.shape[p] for p in perm)
        out = self.flow.var(self.flow.unique_var_name(name), var.dtype, shape)
        self.flow.op(self.flow.unique_op_name(name), "Transpose", self.func, [var], [out],
                     {"perm": list(perm)})
        return out

    def _reshape(self, var, shape, name):
        out = self.flow.var(self.flow.unique_var_name(name), var.dtype, shape)
        self.flow.op(self.flow.unique_op_name(name), "Reshape", self.func, [var], [out],
                     {"shape": list(shape)})
        return out

    def _constant(self, name, data):
        return self.flow.var(self.flow.unique_var_name(f"{name}/blocked"), data=data)
