"""Convolutions with small output planes (a ResNet's 14x14 and 7x7 layers) with the output
channels in the vector lanes.

:mod:`conv_gemm` puts the pixels in the lanes: 49 pixels fill four panels of 16 only 77%.
Here, for each image, Y^T[pixels, Cout] = X'^T[pixels, taps] x W^T[taps, Cout] runs on
:mod:`matmul`'s register tiles (:class:`~.matmul.Plan`, :class:`~.matmul.Task`): W^T (constant)
is packed at compile time into panels of ``vectors x lanes`` output channels, which a CNN's
channel counts fill, and the pixels are the tile rows. A task packs its block of pixels'
taps (X'^T) into a buffer on the stack once, with :mod:`conv_gemm`'s gathering, in panels of
``lcm(tile rows, lanes)`` pixels stored k-major (each tile's A is ``rows`` consecutive elements
per tap), and runs every channel panel of its block over them. Each result vector holds
``lanes`` channels of one pixel: bias and epilogue apply to it as a vector (the epilogue's
inputs of the output's shape gathered with the stride of a plane), and it is stored lane by
lane into NCHW.

Tasks split images and blocks of channel panels (each task packs its image's taps; a block
of pixels, at most ``A_BYTES`` of packed taps, where they do not fit).
"""

import math

import llvmlite.ir as ir
import numpy as np

from myelin.codegen.llvm import irutil, loops
from myelin.codegen.llvm.kernels import fused
from myelin.codegen.llvm.kernels.base import Kernel
from myelin.codegen.llvm.kernels.conv import ival
from myelin.codegen.llvm.kernels.conv_gemm import ConvGemmKernel, _ConvTask
from myelin.codegen.llvm.kernels.matmul import (
    VECTORS,
    Panels,
    Plan,
    Task,
    pack_constant,
    tile_rows,
)
from myelin.ops import conv as conv_ops
from myelin.ops import fused as fused_ops

A_BYTES = 512 << 10   # the packed taps of a task's pixels
FILL = 0.9            # pixel panels filled less than this put the channels in the lanes

i64 = irutil.i64
_GEMM = ConvGemmKernel()


def _fill(count, width):
    """How full ``count`` columns fill panels of ``width``."""
    return count / (-(-count // width) * width)


def _default(target, pixels):
    """The default tiling: ``VECTORS`` wide and as many rows as fit that divide the lanes,
    so a tile's taps lie in one panel of packed pixels that is one vector wide."""
    rows = tile_rows(target, pixels)
    return {"vectors": VECTORS, "rows": 1 << (rows.bit_length() - 1)}


class ConvChannelsKernel(Kernel):
    """``Conv`` and ``FusedConv`` with one group and constant weights whose pixel panels would
    be less than ``FILL`` full, whose output channels fill panels fuller than the pixels do
    (a squeeze-and-excitation block's 1x1 convolutions on one pixel, with 24 or 120 channels,
    are matrix-vector products: 16 times the work as panels of pixels), and whose image's
    packed taps fit ``A_BYTES`` (so the weights pass through the cache once per image: where
    they pass once per block of pixels, the product is bound by reading them)."""

    name = "ConvChannels"
    shares_code = True

    def supports(self, step, target):
        if not _GEMM.supports(step, target):
            return False
        if step.inputs[1].constant_data() is None:
            return False
        g = conv_ops.geometry(fused_ops.conv_part(step))
        if g.group != 1:
            return False
        y = step.outputs[0]
        lanes = loops.lanes(target, y.dtype)
        pixels, taps = math.prod(g.output), g.in_channels * math.prod(g.kernel)
        rows = _default(target, pixels)["rows"]
        packed = -(-pixels // math.lcm(rows, lanes)) * math.lcm(rows, lanes) * taps * y.itemsize
        width = VECTORS * lanes
        return (packed <= A_BYTES and _fill(pixels, width) < FILL
                and _fill(g.out_channels, width) > _fill(pixels, width))

    def choices(self, step, target):
        pixels = math.prod(conv_ops.geometry(fused_ops.conv_part(step)).output)
        lanes = loops.lanes(target, step.outputs[0].dtype)
        options = [_default(target, pixels),
                   {"vectors": VECTORS, "rows": tile_rows(target, pixels)},
                   {"vectors": 1, "rows": min(lanes, tile_rows(target, pixels, 1))}]
        return [o for i, o in enumerate(options) if o not in options[:i]]

    def flops(self, step):
        return _GEMM.flops(step)

    def emit(self, ctx, step):
        g, plan = _plan(ctx, step)
        pixels, taps, dtype = plan.m, plan.k, plan.dtype
        packed = _packed(step, g, plan)
        # conv_gemm's panels of pixels, one panel of packed taps wide.
        gather = Plan(ctx, g.out_channels, pixels, taps, (g.batch,), dtype, "run",
                      split_rows=False, choice={"vectors": plan.a_width // plan.lanes, "rows": 1})
        ctx.parallel(f"Conv.{step.name}", step.inputs + step.outputs, plan.tasks,
                     lambda sub, index: _Task(sub, step, g, plan, gather, packed, index).emit(),
                     outline=plan.large)

    def kept(self, ctx, step):
        return [_packed(step, *_plan(ctx, step))]

    def packed_inputs(self, step):
        return (1,)          # (the weights: constant, see supports)


def _plan(ctx, step):
    """(geometry, :class:`_Plan`) of a ConvChannels ``step``."""
    g = conv_ops.geometry(fused_ops.conv_part(step))
    pixels, taps = math.prod(g.output), g.in_channels * math.prod(g.kernel)
    epilogue = fused.epilogue(step) if step.type == "FusedConv" else None
    return g, _Plan(ctx, g.out_channels, pixels, taps, g.batch, step.outputs[0].dtype,
                    epilogue, step.choice or _default(ctx.target, pixels))


def _packed(step, g, plan):
    """The step's weights, packed for ``plan`` (taps by channel panels)."""
    weights = np.asarray(step.inputs[1].constant_data()).reshape(g.out_channels, plan.k)
    return pack_constant(weights.T, plan)


class _Plan(Plan):
    """The product Y^T = X'^T x W^T of an image: rows are pixels, packed by each task into
    panels of ``a_width`` pixels (a multiple of the tile rows and of the lanes); a task's row
    block is whole panels of at most ``A_BYTES``."""

    def __init__(self, ctx, channels, pixels, taps, batch, dtype, epilogue, choice):
        super().__init__(ctx, pixels, channels, taps, (batch,), dtype, "compile",
                         trans_a=True, epilogue=epilogue, split_rows=False, choice=choice)

    def _split(self, threads, flops, split_rows):
        super()._split(threads, flops, split_rows)
        self.a_width = math.lcm(self.rows, self.lanes)
        most = max(1, A_BYTES // (self.k * self.a_width * self.itemsize)) * self.a_width
        self.block_rows = min(-(-self.block_rows // self.a_width) * self.a_width, most)
        self.row_blocks = -(-self.m // self.block_rows)
        self.tasks = self.batches * self.row_blocks * self.panel_blocks

    def a_strides(self):
        return (1, self.a_width)


class _Task(Task):
    """A task: an image, a block of pixels (its taps packed on the stack) and a block of
    channel panels; C is the image's output, transposed."""

    def __init__(self, ctx, step, geometry, plan, gather, packed, index):
        super().__init__(ctx, plan, index)
        self.step, self.packed = step, packed
        self.plane = math.prod(geometry.output)
        self.packer = _ConvTask(ctx, step, gather, geometry, index)
        self.first = None     # the first pixel packed

    def pointers(self, batch):
        b, plan, step = self.b, self.plan, self.step
        dtype, y = plan.dtype, step.outputs[0]
        self.batch = batch
        self.bp = self.ctx.keep(self.packed)
        image_out = b.mul(batch, i64(plan.m * plan.n))
        self.c = irutil.element_ptr(b, self.ctx.pointer(y), dtype, image_out)
        if fused_ops.conv_inputs(step) > 2:
            self.bias = self.ctx.pointer(step.inputs[2])
        # Epilogue inputs have the output's shape or one element.
        for x in step.inputs[fused_ops.first_extra(step):]:
            if x.shape == y.shape:
                self.extras.append((irutil.element_ptr(b, self.ctx.pointer(x), dtype, image_out),
                                    True))
            else:
                self.extras.append((self.ctx.pointer(x), False))

    def pack_a(self, rows):
        b, plan = self.b, self.plan
        start, end = ival(rows[0]), ival(rows[1])
        width = plan.a_width
        buffer = irutil.stack_array(b, irutil.storage_type(plan.dtype), plan.block_rows * plan.k)
        last = b.udiv(b.add(end, i64(width - 1)), i64(width))
        self.packer.pointers(self.batch)
        self.packer.pack_group(Panels(b.udiv(start, i64(width)), last, buffer))
        self.a, self.first = buffer, start

    def a_row(self, i):
        b, width = self.b, self.plan.a_width
        row = b.sub(ival(i), self.first)
        panel, within = b.udiv(row, i64(width)), b.urem(row, i64(width))
        return irutil.element_ptr(b, self.a, self.plan.dtype,
                                  b.add(b.mul(panel, i64(self.plan.k * width)), within))

    def store(self, value, row, column, valid, inline=False):
        """Store the first ``valid`` lanes of ``value``, the channels from ``column`` of pixel
        ``row``, through bias and epilogue, one lane at a time into the planes of the
        channels (the lanes past them are past the channels: nothing there is read); the
        epilogue inlined if ``inline``."""
        b, plan = self.b, self.plan
        dtype, lanes = plan.dtype, irutil.width_of(value)
        if self.bias is not None:
            bias = irutil.element_ptr(b, self.bias, dtype, column)
            value = b.fadd(value, irutil.load(b, bias, dtype, lanes, plan.itemsize)
                           if valid == lanes else irutil.load_lanes(b, bias, dtype, lanes, valid))
        at = b.add(b.mul(column, i64(self.plane)), row)
        if plan.epilogue is not None:
            extras = []
            for ptr, whole in self.extras:
                if not whole:
                    scalar = irutil.load(b, ptr, dtype, 1, plan.itemsize)
                    extras.append(irutil.splat(b, scalar, lanes) if lanes > 1 else scalar)
                elif lanes == 1:
                    extras.append(irutil.load(b, irutil.element_ptr(b, ptr, dtype, at), dtype))
                else:
                    offsets = b.add(irutil.splat(b, at, lanes), ir.Constant(
                        ir.VectorType(irutil.I64, lanes), [k * self.plane for k in range(lanes)]))
                    extras.append(irutil.gather(b, ptr, dtype, offsets,
                                                irutil.first_lanes(lanes, valid)))
            value = plan.epilogue.apply(b, [value] + extras, inline)
        for lane in range(valid):
            element = b.extract_element(value, i64(lane)) if lanes > 1 else value
            irutil.store(b, element, irutil.element_ptr(
                b, self.c, dtype, b.add(at, i64(lane * self.plane))), dtype, plan.itemsize)
