"""Direct 2-D convolutions of channel-blocked images (NCHW[b]c, :mod:`myelin.ops.layout`).

With the ``b`` channels of a pixel in one vector, a convolution needs no packing: a register
tile of a few blocks of output channels by a few output pixels along a row (``TILES``, as ONNX
Runtime's NCHWc kernels) sums, for every block of input channels and kernel tap, each input
channel of each pixel broadcast over the lanes times the vector of its weights for each block of
output channels (the packed weight's ``b`` vectors at that tap): ``blocks x pixels`` fused
multiply-adds per ``blocks`` vector loads and ``pixels`` broadcasts. A depthwise
convolution's tile is a run of pixels of one block: each tap is one vector load of the input
and one fused multiply-add per pixel, with the tap's weights loaded once.

Tasks take rows (image, block group, output row). The taps of a row that fall in the padding
are skipped by loop bounds; along the row, the tiles whose taps all lie inside run in a loop,
and the few tiles at the borders are emitted each, their taps outside the image reading a
block of zeros. A 1x1 convolution without strides or padding on a small plane treats
the plane as one row. The bias and the fused epilogue are applied to each vector as it is
stored.
"""

import math

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil, loops, mathlib
from myelin.codegen.llvm.kernels import fused
from myelin.codegen.llvm.kernels.base import task_range
from myelin.codegen.llvm.kernels.conv import OutlinedKernel, add, ival, mul, tap_range
from myelin.ops import conv as conv_ops
from myelin.ops import fused as fused_ops

# A group-1 tile by channels per block: (blocks of output channels, pixels). Its accumulators,
# weight vectors and a broadcast fit the registers (16 with AVX2, 32 with AVX-512).
TILES = {8: (2, 6), 16: (4, 6)}
DEPTHWISE_PIXELS = 8        # output pixels of a depthwise tile
CHUNK_TILES = 8             # tiles of a task's unit
CACHE = 1 << 19             # bytes of a core's cache (L2) that stay while units go by


def channel_block(target):
    """The channels per block of the images convolutions use on ``target``: its float32
    vector width (8 with AVX2, 16 with AVX-512), or 0 (plain images) below 8."""
    lanes = loops.lanes(target, "float32")
    return lanes if lanes >= 8 else 0


class BlockedConvKernel(OutlinedKernel):
    """``Conv`` and ``FusedConv`` on float32 2-D images in blocks of channels (the op's
    ``channel_block``), with group 1 or depthwise."""

    name = "BlockedConv"
    shares_code = True

    def supports(self, step, target):
        if step.type not in ("Conv", "FusedConv") or not conv_ops.channel_block(step):
            return False
        if step.type == "FusedConv" and fused.epilogue(step) is None:
            return False
        return (len(step.inputs[0].shape) == 5
                and all(t.dtype == "float32" for t in step.inputs + step.outputs))

    def flops(self, step):
        g = conv_ops.geometry(fused_ops.conv_part(step))
        return 2 * step.outputs[0].elements * g.in_channels // g.group * math.prod(g.kernel)

    def emit_body(self, ctx, step):
        _Emitter(ctx, step, self.flops(step)).emit()


class _Emitter:
    """The code of one blocked convolution step."""

    def __init__(self, ctx, step, flops):
        self.ctx, self.step, self.flops = ctx, step, flops
        conv = fused_ops.conv_part(step)
        g = self.g = conv_ops.geometry(conv)
        self.size = conv_ops.channel_block(step)
        self.depthwise = g.group > 1
        self.in_blocks, self.out_blocks = g.in_channels // self.size, g.out_channels // self.size
        (self.height, self.width), (self.out_height, self.out_width) = g.input, g.output
        self.kernel, self.strides = list(g.kernel), list(g.strides)
        self.dilations, self.pads = list(g.dilations), list(g.pads_begin)
        self.checked = any(g.pads_begin + g.pads_end)
        self.plane = self.out_height * self.out_width
        if self.depthwise:
            self.blocks, self.pixels = 1, DEPTHWISE_PIXELS
        else:
            blocks, self.pixels = TILES.get(self.size, TILES[8])
            self.blocks = min(blocks, self.out_blocks)
        self.pixels = min(self.pixels, self.plane)
        self.groups = -(-self.out_blocks // self.blocks)
        self.tiles = self.plane // self.pixels           # whole tiles; then one of the rest
        self.chunks = max(1, -(-self.tiles // CHUNK_TILES))
        self.bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        self.epilogue = fused.epilogue(step) if step.type == "FusedConv" else None

    def emit(self):
        if self.depthwise:
            self._emit_rows()
            return
        ctx, g = self.ctx, self.g
        units = g.batch * self.groups * self.chunks
        tasks, size = ctx.chunks(units, self.flops)
        chunks_outer = self._chunks_outer()

        def task(sub, index):
            b = sub.builder
            start, stop = task_range(b, index, size, units)
            with irutil.for_range(b, start, stop, name="unit") as unit:
                inner, outer = ((self.groups, self.chunks) if chunks_outer
                                else (self.chunks, self.groups))
                first = b.urem(unit, irutil.i64(inner))
                rest = b.udiv(unit, irutil.i64(inner))
                second = b.urem(rest, irutil.i64(outer))
                image = b.udiv(rest, irutil.i64(outer))
                group, chunk = (first, second) if chunks_outer else (second, first)
                self._chunk(sub, image, group, chunk)

        ctx.parallel(f"Conv.{self.step.name}", self.step.inputs + self.step.outputs, tasks, task,
                     outline=True)

    def _chunks_outer(self):
        """Whether an image's units take each chunk of pixels for every group of output
        blocks in turn (else each group over every chunk): the order that streams fewer
        bytes from beyond the cache, as one order reads the image once per group unless it
        fits in the cache, the other the weights once per chunk."""
        image = math.prod(self.step.inputs[0].shape[1:]) * 4
        weights = math.prod(self.step.inputs[1].shape) * 4
        groups_outer = weights + (image if image <= CACHE else image * self.groups)
        chunks_outer = image + (weights if weights <= CACHE else weights * self.chunks)
        return chunks_outer <= groups_outer

    def _emit_rows(self):
        """A depthwise convolution: tasks take rows (image, block, output row); the tiles of
        a row whose taps all lie inside the image run unchecked."""
        ctx, g = self.ctx, self.g
        units = g.batch * self.out_blocks * self.out_height
        tasks, size = ctx.chunks(units, self.flops)

        def task(sub, index):
            b = sub.builder
            start, stop = task_range(b, index, size, units)
            with irutil.for_range(b, start, stop, name="unit") as unit:
                row = b.urem(unit, irutil.i64(self.out_height))
                rest = b.udiv(unit, irutil.i64(self.out_height))
                block = b.urem(rest, irutil.i64(self.out_blocks))
                image = b.udiv(rest, irutil.i64(self.out_blocks))
                self._row(sub, image, block, row)

        ctx.parallel(f"Conv.{self.step.name}", self.step.inputs + self.step.outputs, tasks, task,
                     outline=True)

    def _row(self, ctx, image, block, row):
        """Output row ``row`` of block ``block`` of image ``image`` (depthwise)."""
        b = ctx.builder
        kw, (sw, dw, pw) = self.kernel[1], (self.strides[1], self.dilations[1], self.pads[1])
        taps = tap_range(b, row, self.strides[0], self.pads[0], self.dilations[0],
                         self.kernel[0], self.height)
        pixels = min(self.pixels, self.out_width)
        first = -(-pw // sw)
        last = (self.width - 1 + pw - (kw - 1) * dw) // sw
        end = min(self.out_width, last + 1) if last >= 0 else 0
        count = max(0, end - first) // pixels
        if count:
            with irutil.for_range(b, 0, count, name="tile") as t:
                column = b.add(b.mul(t, irutil.i64(pixels)), irutil.i64(first))
                self._row_tile(ctx, image, block, row, taps, column, pixels, False)
        inner_end = first + count * pixels if count else 0
        columns = list(range(0, first if count else 0)) + list(range(inner_end, self.out_width))
        while columns:
            start, width = columns[0], 1
            while width < pixels and width < len(columns) and columns[width] == start + width:
                width += 1
            columns = columns[width:]
            self._row_tile(ctx, image, block, row, taps, start, width, True)

    def _row_tile(self, ctx, image, block, row, taps, column, width, checked):
        """Depthwise outputs at ``width`` pixels from ``column`` of ``row``; ``checked``:
        some of their taps along the row may lie outside the image (they read zeros)."""
        b, size = ctx.builder, self.size
        kh_count, kw_count = self.kernel
        (sh, sw), (dh, dw), (ph, pw) = self.strides, self.dilations, self.pads
        x, w = ctx.pointer(self.step.inputs[0]), ctx.pointer(self.step.inputs[1])
        zeros = self._zeros(ctx) if checked else None
        channel = add(b, mul(b, image, self.in_blocks), block)
        base = mul(b, channel, self.height * self.width * size)
        weights = mul(b, block, kh_count * kw_count * size)

        def tap_of(x_row, w_row, k, accs):
            weight = irutil.load(b, irutil.element_ptr(
                b, w, "float32", ival(add(b, w_row, mul(b, k, size)))), "float32", size)
            out = list(accs)
            for p in range(width):
                position = add(b, mul(b, add(b, column, p), sw), add(b, -pw, mul(b, k, dw)))
                at = irutil.element_ptr(b, x, "float32",
                                        ival(add(b, x_row, mul(b, position, size))))
                if checked:
                    inside = b.icmp_unsigned("<", ival(position), irutil.i64(self.width))
                    at = b.select(inside, at, zeros)
                out[p] = mathlib.fmuladd(b, irutil.load(b, at, "float32", size), weight, out[p])
            return out

        zero = irutil.const(irutil.vector_of(irutil.compute_type("float32"), size), 0)
        lo, hi = taps
        with irutil.accumulating_loop(b, lo, hi, [zero] * width, name="kh") as rows:
            ih = add(b, mul(b, row, sh), add(b, -ph, mul(b, rows.index, dh)))
            x_row = add(b, base, mul(b, ih, self.width * size))
            w_row = add(b, weights, mul(b, rows.index, kw_count * size))
            with irutil.accumulating_loop(b, 0, kw_count, rows.values, name="kw") as loop:
                loop.set_next(tap_of(x_row, w_row, loop.index, loop.values))
            rows.set_next(loop.results)
        first = add(b, mul(b, row, self.out_width), column)
        self._store(ctx, image, block, 1, first, width, rows.results)

    def _chunk(self, ctx, image, group, chunk):
        """The tiles of chunk ``chunk`` of the output plane of image ``image``, for the blocks
        of output channels of tile group ``group`` (the last group may have fewer)."""
        b = ctx.builder
        full, rest = divmod(self.out_blocks, self.blocks)
        if not rest:
            self._tiles(ctx, image, group, chunk, self.blocks)
            return
        with b.if_else(b.icmp_unsigned("<", group, irutil.i64(full))) as (whole, part):
            with whole:
                self._tiles(ctx, image, group, chunk, self.blocks)
            with part:
                self._tiles(ctx, image, group, chunk, rest)

    def _tiles(self, ctx, image, group, chunk, blocks):
        b = ctx.builder
        first_block = mul(b, group, self.blocks)
        start = b.mul(chunk, irutil.i64(CHUNK_TILES))
        stop = b.add(start, irutil.i64(CHUNK_TILES))
        stop = b.select(b.icmp_signed("<", stop, irutil.i64(self.tiles)), stop,
                        irutil.i64(self.tiles))
        with irutil.for_range(b, start, stop, name="tile") as t:
            self._tile(ctx, image, first_block, blocks, b.mul(t, irutil.i64(self.pixels)),
                       self.pixels)
        left = self.plane - self.tiles * self.pixels
        if left:
            last = b.icmp_unsigned("==", chunk, irutil.i64(self.chunks - 1))
            with b.if_then(last):
                self._tile(ctx, image, first_block, blocks, self.tiles * self.pixels, left)

    def _zeros(self, ctx):
        """The address of a block of zeros: what a tap outside the image reads."""
        module = ctx.builder.module
        name = f"myelin_zeros_{self.size}"
        zeros = module.globals.get(name)
        if zeros is None:
            array = ir.ArrayType(ir.FloatType(), self.size)
            zeros = ir.GlobalVariable(module, array, name)
            zeros.initializer = ir.Constant(array, None)
            zeros.global_constant = True
            zeros.linkage = "internal"
            zeros.align = 64
        return ctx.builder.bitcast(zeros, irutil.PTR)

    def _tile(self, ctx, image, first_block, blocks, first, width):
        """Outputs of ``blocks`` blocks from ``first_block`` at the ``width`` pixels of the
        output plane from ``first`` (an i64 or int)."""
        b, size = ctx.builder, self.size
        kh_count, kw_count = self.kernel
        (sh, sw), (dh, dw), (ph, pw) = self.strides, self.dilations, self.pads
        vector = irutil.vector_of(irutil.compute_type("float32"), size)
        x, w = ctx.pointer(self.step.inputs[0]), ctx.pointer(self.step.inputs[1])
        zeros = self._zeros(ctx) if self.checked else None
        in_blocks = 1 if self.depthwise else self.in_blocks
        first_in = first_block if self.depthwise else 0
        # Offsets in elements: an input block plane, an output block's weights, a weight tap.
        plane_in = self.height * self.width * size
        tap = size if self.depthwise else size * size
        weight_block = (1 if self.depthwise else self.in_blocks) * kh_count * kw_count * tap
        # Each pixel's first input row and column (the taps' origin, maybe in the padding).
        origins = []
        for p in range(width):
            pixel = add(b, first, p)
            row, column = ((pixel // self.out_width, pixel % self.out_width)
                           if isinstance(pixel, int) else
                           (b.udiv(pixel, irutil.i64(self.out_width)),
                            b.urem(pixel, irutil.i64(self.out_width))))
            origins.append((add(b, mul(b, row, sh), -ph), add(b, mul(b, column, sw), -pw)))

        def tap_of(rows, w_tap, k, accs):
            """``accs`` plus the products of the tap at ``k`` (an i64) along the rows
            ``rows`` (each pixel's: its offset and whether it is inside)."""
            pixels = []
            for (x_row, row_inside), (_, column) in zip(rows, origins):
                position = add(b, column, mul(b, k, dw))
                at = irutil.element_ptr(b, x, "float32",
                                        ival(add(b, x_row, mul(b, position, size))))
                if self.checked:
                    inside = b.and_(row_inside, b.icmp_unsigned("<", ival(position),
                                                                irutil.i64(self.width)))
                    at = b.select(inside, at, zeros)
                pixels.append(at)
            weights = [add(b, w_tap, add(b, r * weight_block, mul(b, k, tap)))
                       for r in range(blocks)]
            out = list(accs)
            if self.depthwise:
                weight = irutil.load(b, irutil.element_ptr(b, w, "float32", ival(weights[0])),
                                     "float32", size)
                for p, at in enumerate(pixels):
                    out[p] = mathlib.fmuladd(b, irutil.load(b, at, "float32", size), weight,
                                             out[p])
                return out
            with irutil.accumulating_loop(b, 0, size, out, name="c") as channel:
                c = channel.index
                out = list(channel.values)
                vectors = [irutil.load(b, irutil.element_ptr(
                    b, w, "float32", ival(add(b, weights[r], mul(b, c, size)))), "float32",
                    size) for r in range(blocks)]
                for p, at in enumerate(pixels):
                    value = irutil.splat(b, irutil.load(
                        b, irutil.element_ptr(b, at, "float32", c), "float32"), size)
                    for r in range(blocks):
                        out[r * width + p] = mathlib.fmuladd(b, vectors[r], value,
                                                             out[r * width + p])
                channel.set_next(out)
            return channel.results

        def row_of(in_block, kh, accs):
            """``accs`` plus the products of input block ``in_block`` at kernel row ``kh``:
            the taps along the row in a loop (unrolled, LLVM would keep the pixels that one
            tap shares with the next in registers, which spills the accumulators)."""
            channel = add(b, mul(b, image, self.in_blocks), add(b, first_in, in_block))
            base = mul(b, channel, plane_in)
            rows = []
            for row, _ in origins:
                position = add(b, row, mul(b, kh, dh))
                inside = (b.icmp_unsigned("<", ival(position), irutil.i64(self.height))
                          if self.checked else None)
                rows.append((add(b, base, mul(b, position, self.width * size)), inside))
            w_tap = add(b, mul(b, first_block, weight_block),
                        mul(b, add(b, mul(b, in_block, kh_count), kh), kw_count * tap))
            if kw_count == 1:
                return tap_of(rows, w_tap, 0, accs)
            with irutil.accumulating_loop(b, 0, kw_count, accs, name="kw") as loop:
                loop.set_next(tap_of(rows, w_tap, loop.index, loop.values))
            return loop.results

        zero = irutil.const(vector, 0)
        with irutil.accumulating_loop(b, 0, in_blocks, [zero] * (blocks * width),
                                      name="cb") as channels:
            with irutil.accumulating_loop(b, 0, kh_count, channels.values, name="kh") as rows:
                rows.set_next(row_of(channels.index, rows.index, rows.values))
            channels.set_next(rows.results)
        self._store(ctx, image, first_block, blocks, first, width, channels.results)

    def _store(self, ctx, image, first_block, blocks, first, width, accs):
        b, size, y = ctx.builder, self.size, self.step.outputs[0]
        extras = [(ctx.pointer(e), tuple(e.shape) == tuple(y.shape))
                  for e in self.step.inputs[fused_ops.first_extra(self.step):]
                  ] if self.epilogue else []
        plane_out = self.plane * size
        for r in range(blocks):
            block = add(b, first_block, r)
            term = None
            if self.bias is not None:
                term = irutil.load(b, irutil.element_ptr(
                    b, ctx.pointer(self.bias), "float32", ival(mul(b, block, size))),
                    "float32", size)
            channel = add(b, mul(b, image, self.out_blocks), block)
            base = add(b, mul(b, channel, plane_out), mul(b, first, size))
            for p in range(width):
                value = accs[r * width + p]
                if term is not None:
                    value = b.fadd(value, term)
                at = ival(add(b, base, p * size))
                if self.epilogue is not None:
                    values = [irutil.load(b, irutil.element_ptr(b, e, "float32", at), "float32",
                                          size) if whole
                              else irutil.splat(b, irutil.load(b, e, "float32"), size)
                              for e, whole in extras]
                    value = self.epilogue.apply(b, [value] + values)
                irutil.store(b, value, irutil.element_ptr(b, ctx.pointer(y), "float32", at),
                             "float32")
