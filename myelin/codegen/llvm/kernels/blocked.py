"""What the kernels of channel-blocked images (NCHW[b]c, :mod:`myelin.ops.layout`) share.

:func:`channel_block` is the block the CPU back end chooses for a target. A :class:`RowWalker`
runs a step whose every output block reads only its own input block (a depthwise convolution,
a pool) row by row: tasks take rows (image, block, output row); the taps of a row that fall in
the padding are skipped by loop bounds, the tiles of a row whose taps all lie inside the image
run in a loop unchecked, and the few tiles at the ends of a row are emitted each, their taps
outside the image reading a block of a filler value (zero for sums, minus infinity for
maxima) instead of the image.
"""

import struct

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil, loops, mathlib
from myelin.codegen.llvm.kernels.base import task_range
from myelin.codegen.llvm.kernels.conv import add, ival, mul, tap_range
from myelin.ops import conv as conv_ops

ROW_PIXELS = 8          # output pixels of a row tile


def channel_block(target):
    """The channels per block of the images convolutions use on ``target``: its float32
    vector width (8 with AVX2, 16 with AVX-512), or 0 (plain images) below 8."""
    lanes = loops.lanes(target, "float32")
    return lanes if lanes >= 8 else 0


def filled(ctx, size, value):
    """The address of ``size`` float32 ``value``s, a constant of the module (one per size
    and value: its name holds the value's bits)."""
    module = ctx.builder.module
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    name = f"myelin_fill_{size}_{bits:08x}"
    block = module.globals.get(name)
    if block is None:
        array = ir.ArrayType(ir.FloatType(), size)
        block = ir.GlobalVariable(module, array, name)
        block.initializer = ir.Constant(array, [value] * size)
        block.global_constant = True
        block.linkage = "internal"
        block.align = 64
    return ctx.builder.bitcast(block, irutil.PTR)


def channel_products(b, w, weights, pixels, c, size, accs):
    """``accs`` (a register tile's vectors: ``len(weights)`` blocks of output channels by
    ``len(pixels)`` pixels, block by block) plus input channel ``c`` (an int or i64) of each
    pixel (``pixels``: pointers to its channels) broadcast over the lanes times that channel's
    weights for each block (a vector of ``size`` at element ``weights[r] + c * size`` of
    ``w``)."""
    width, out = len(pixels), list(accs)
    vectors = [irutil.load(b, irutil.element_ptr(b, w, "float32",
                                                 ival(add(b, at, mul(b, c, size)))),
                           "float32", size) for at in weights]
    for p, at in enumerate(pixels):
        value = irutil.splat(b, irutil.load(b, irutil.element_ptr(b, at, "float32", c), "float32"),
                             size)
        for r, vector in enumerate(vectors):
            out[r * width + p] = mathlib.fmuladd(b, vector, value, out[r * width + p])
    return out


class BlockedStep:
    """The code of a blocked 2-D step ``step`` doing ``work`` (flops, for the split over
    threads) under way in ``ctx``: its block and sizes. ``conv`` is the op whose geometry it
    has (the step itself, or a fused step's convolution). A subclass whose tasks only call
    the functions doing the work sets ``glue`` (:func:`~.base.mark_glue`)."""

    glue = False

    def __init__(self, ctx, step, conv, work):
        self.ctx, self.step, self.work = ctx, step, work
        g = self.g = conv_ops.geometry(conv)
        self.size = conv_ops.channel_block(step)
        (self.height, self.width), (self.out_height, self.out_width) = g.input, g.output
        self.kernel, self.strides = list(g.kernel), list(g.strides)
        self.dilations, self.pads = list(g.dilations), list(g.pads_begin)


class RowWalker(BlockedStep):
    """The rows of a blocked step whose output blocks each read their own input block;
    subclasses compute a tile (:meth:`tile`)."""

    def __init__(self, ctx, step, conv, work):
        super().__init__(ctx, step, conv, work)
        self.blocks = self.g.out_channels // self.size
        self.pixels = min(ROW_PIXELS, self.out_width)

    def emit(self):
        ctx, g = self.ctx, self.g
        units = g.batch * self.blocks * self.out_height
        tasks, size = ctx.chunks(units, self.work)

        def task(sub, index):
            b = sub.builder
            start, stop = task_range(b, index, size, units)
            with irutil.for_range(b, start, stop, name="unit") as unit:
                row = b.urem(unit, irutil.i64(self.out_height))
                rest = b.udiv(unit, irutil.i64(self.out_height))
                block = b.urem(rest, irutil.i64(self.blocks))
                image = b.udiv(rest, irutil.i64(self.blocks))
                self._row(sub, image, block, row)

        ctx.parallel(f"{self.step.type}.{self.step.name}", self.step.inputs + self.step.outputs,
                     tasks, task, outline=True)

    def _row(self, ctx, image, block, row):
        """Output row ``row`` of block ``block`` of image ``image``."""
        b = ctx.builder
        kw, (sw, dw, pw) = self.kernel[1], (self.strides[1], self.dilations[1], self.pads[1])
        taps = tap_range(b, row, self.strides[0], self.pads[0], self.dilations[0],
                         self.kernel[0], self.height)
        first = -(-pw // sw)
        last = (self.width - 1 + pw - (kw - 1) * dw) // sw
        end = min(self.out_width, last + 1) if last >= 0 else 0
        count = max(0, end - first) // self.pixels
        if count:
            with irutil.for_range(b, 0, count, name="tile") as t:
                column = b.add(b.mul(t, irutil.i64(self.pixels)), irutil.i64(first))
                self.tile(ctx, image, block, row, taps, column, self.pixels, False)
        inner_end = first + count * self.pixels if count else 0
        columns = list(range(first if count else 0)) + list(range(inner_end, self.out_width))
        while columns:
            start, width = columns[0], 1
            while (width < self.pixels and width < len(columns)
                   and columns[width] == start + width):
                width += 1
            columns = columns[width:]
            self.tile(ctx, image, block, row, taps, start, width, True)

    def tile(self, ctx, image, block, row, taps, column, width, checked):
        """Outputs at ``width`` pixels from ``column`` (an i64, or an int where ``checked``)
        of ``row``, whose kernel rows are in ``taps`` (lo, hi); ``checked``: some of their
        taps along the row may lie outside the image."""
        raise NotImplementedError

    def input_row(self, ctx, image, block, row, kh):
        """The offset of the input row that kernel row ``kh`` of output ``row`` reads."""
        b = ctx.builder
        (sh, dh, ph), size = (self.strides[0], self.dilations[0], self.pads[0]), self.size
        channel = b.add(b.mul(image, irutil.i64(self.blocks)), block)
        ih = b.add(b.mul(row, irutil.i64(sh)), b.add(irutil.i64(-ph), b.mul(kh, irutil.i64(dh))))
        return b.add(b.mul(channel, irutil.i64(self.height * self.width * size)),
                     b.mul(ih, irutil.i64(self.width * size)))

    def tap_pointers(self, ctx, x_row, column, width, k, fill):
        """The address of each of the ``width`` pixels' input at tap ``k`` (an i64) along the
        row from ``x_row``; ``fill`` (where not None) is read for a tap outside the image."""
        b, size = ctx.builder, self.size
        sw, dw, pw = self.strides[1], self.dilations[1], self.pads[1]
        x = ctx.pointer(self.step.inputs[0])
        pointers = []
        for p in range(width):
            pixel = (irutil.i64(column + p) if isinstance(column, int)
                     else b.add(column, irutil.i64(p)))
            position = b.add(b.mul(pixel, irutil.i64(sw)),
                             b.add(irutil.i64(-pw), b.mul(k, irutil.i64(dw))))
            at = irutil.element_ptr(b, x, "float32",
                                    b.add(x_row, b.mul(position, irutil.i64(size))))
            if fill is not None:
                inside = b.icmp_unsigned("<", position, irutil.i64(self.width))
                at = b.select(inside, at, fill)
            pointers.append(at)
        return pointers

    def output_offset(self, ctx, image, block, row, column):
        """The offset of output pixel ``column`` of ``row`` in block ``block``."""
        b = ctx.builder
        channel = b.add(b.mul(image, irutil.i64(self.blocks)), block)
        pixel = b.add(b.mul(row, irutil.i64(self.out_width)),
                      irutil.i64(column) if isinstance(column, int) else column)
        return b.mul(b.add(b.mul(channel, irutil.i64(self.out_height * self.out_width)), pixel),
                     irutil.i64(self.size))
