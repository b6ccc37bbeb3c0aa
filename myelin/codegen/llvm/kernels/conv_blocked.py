"""Direct 2-D convolutions of channel-blocked images (NCHW[b]c, :mod:`myelin.ops.layout`).

With the ``b`` channels of a pixel in one vector, a convolution needs no packing. With groups
of whole blocks (one group among them), a register tile of a few blocks of output channels by
a few output pixels (``TILES``, as ONNX Runtime's NCHWc kernels) sums, for every block of
input channels of their group and kernel tap, each input channel of each pixel broadcast over
the lanes times the vector of its weights for each block of output channels (the packed
weight's ``b`` vectors at that tap): ``blocks x pixels`` fused multiply-adds per ``blocks``
vector loads and ``pixels`` broadcasts. The tiles run over the output plane flattened (a
tile's pixels may span rows, so small planes fill them too); tasks take chunks of tiles for a
band of output blocks, in the order that streams fewer bytes
(:meth:`_PlaneTiles._chunks_outer`). Where the convolution pads, a tile with taps outside the
image reads a block of zeros for them.

A depthwise convolution runs row by row (:class:`~.blocked.RowWalker`): a tile is a run of
pixels of one block, each tap one vector load of the input and one fused multiply-add per
pixel, with the tap's weights loaded once. The bias and the fused epilogue are applied to each
vector as it is stored.
"""

import math

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil, mathlib
from myelin.codegen.llvm.kernels import fused
from myelin.codegen.llvm.kernels.base import task_range
from myelin.codegen.llvm.kernels.blocked import BlockedStep, RowWalker, filled
from myelin.codegen.llvm.kernels.conv import OutlinedKernel, add, ival, mul
from myelin.ops import conv as conv_ops
from myelin.ops import fused as fused_ops
from myelin.ops import layout

# A tile by channels per block: (blocks of output channels, pixels). Its accumulators,
# weight vectors and a broadcast fit the registers (16 with AVX2, 32 with AVX-512).
TILES = {8: (2, 6), 16: (4, 6)}
CHUNK_TILES = 8             # tiles of a task's unit
CACHE = 1 << 19             # bytes of a core's cache (L2) that stay while units go by


class BlockedConvKernel(OutlinedKernel):
    """``Conv`` and ``FusedConv`` on float32 2-D images in blocks of channels (the op's
    ``channel_block``): depthwise, or with groups of whole blocks."""

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
        conv = fused_ops.conv_part(step)
        output = _Output(step, conv)
        g = conv_ops.geometry(conv)
        if layout.depthwise(g.group, g.in_channels):
            _DepthwiseRows(ctx, step, conv, self.flops(step), output).emit()
        else:
            _PlaneTiles(ctx, step, conv, self.flops(step), output).emit()


class _Output:
    """Where a blocked convolution step's vectors go: plus the bias, through the fused
    epilogue (its extra inputs of the output's shape read at the same place), into Y."""

    def __init__(self, step, conv):
        self.step, self.y = step, step.outputs[0]
        self.size = conv_ops.channel_block(step)
        self.bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        self.epilogue = fused.epilogue(step) if step.type == "FusedConv" else None

    def store(self, ctx, block, offset, values):
        """Store ``values``, the vectors of consecutive pixels of output block ``block``
        from element ``offset`` of Y."""
        b, size = ctx.builder, self.size
        extras = [(ctx.pointer(e), tuple(e.shape) == tuple(self.y.shape))
                  for e in self.step.inputs[fused_ops.first_extra(self.step):]
                  ] if self.epilogue else []
        term = None
        if self.bias is not None:
            term = irutil.load(b, irutil.element_ptr(
                b, ctx.pointer(self.bias), "float32", ival(mul(b, block, size))), "float32", size)
        for p, value in enumerate(values):
            if term is not None:
                value = b.fadd(value, term)
            at = ival(add(b, offset, p * size))
            if self.epilogue is not None:
                inputs = [irutil.load(b, irutil.element_ptr(b, e, "float32", at), "float32", size)
                          if whole else irutil.splat(b, irutil.load(b, e, "float32"), size)
                          for e, whole in extras]
                value = self.epilogue.apply(b, [value] + inputs)
            irutil.store(b, value, irutil.element_ptr(b, ctx.pointer(self.y), "float32", at),
                         "float32")


class _DepthwiseRows(RowWalker):
    """A depthwise convolution, row by row."""

    def __init__(self, ctx, step, conv, work, output):
        super().__init__(ctx, step, conv, work)
        self.output = output

    def tile(self, ctx, image, block, row, taps, column, width, checked):
        b, size = ctx.builder, self.size
        kh_count, kw_count = self.kernel
        w = ctx.pointer(self.step.inputs[1])
        fill = filled(ctx, size, 0.0) if checked else None
        weights = b.mul(block, irutil.i64(kh_count * kw_count * size))
        zero = irutil.const(irutil.vector_of(irutil.compute_type("float32"), size), 0)
        lo, hi = taps
        with irutil.accumulating_loop(b, lo, hi, [zero] * width, name="kh") as rows:
            x_row = self.input_row(ctx, image, block, row, rows.index)
            w_row = b.add(weights, b.mul(rows.index, irutil.i64(kw_count * size)))
            with irutil.accumulating_loop(b, 0, kw_count, rows.values, name="kw") as loop:
                weight = irutil.load(b, irutil.element_ptr(
                    b, w, "float32", b.add(w_row, b.mul(loop.index, irutil.i64(size)))),
                    "float32", size)
                pointers = self.tap_pointers(ctx, x_row, column, width, loop.index, fill)
                loop.set_next([mathlib.fmuladd(b, irutil.load(b, at, "float32", size), weight,
                                               acc) for at, acc in zip(pointers, loop.values)])
            rows.set_next(loop.results)
        self.output.store(ctx, block, self.output_offset(ctx, image, block, row, column),
                          rows.results)


class _PlaneTiles(BlockedStep):
    """A convolution with groups of whole blocks (one group among them): register tiles over
    the flattened output plane, each of a band of output blocks of one group."""

    def __init__(self, ctx, step, conv, work, output):
        super().__init__(ctx, step, conv, work)
        self.output = output
        g = self.g
        self.in_blocks, self.out_blocks = g.in_channels // self.size, g.out_channels // self.size
        self.checked = any(g.pads_begin + g.pads_end)
        self.plane = self.out_height * self.out_width
        # Input and output blocks of a group; a band's blocks lie in one group.
        self.group_in, self.group_out = self.in_blocks // g.group, self.out_blocks // g.group
        blocks, pixels = TILES.get(self.size, TILES[8])
        blocks = min(blocks, self.group_out)
        while g.group > 1 and self.group_out % blocks:
            blocks -= 1
        self.blocks, self.pixels = blocks, min(pixels, self.plane)
        self.bands = -(-self.out_blocks // self.blocks)
        self.tiles = self.plane // self.pixels           # whole tiles; then one of the rest
        self.chunks = max(1, -(-self.tiles // CHUNK_TILES))

    def emit(self):
        ctx, g = self.ctx, self.g
        units = g.batch * self.bands * self.chunks
        tasks, size = ctx.chunks(units, self.work)
        chunks_outer = self._chunks_outer()

        def task(sub, index):
            b = sub.builder
            start, stop = task_range(b, index, size, units)
            with irutil.for_range(b, start, stop, name="unit") as unit:
                inner, outer = ((self.bands, self.chunks) if chunks_outer
                                else (self.chunks, self.bands))
                first = b.urem(unit, irutil.i64(inner))
                rest = b.udiv(unit, irutil.i64(inner))
                second = b.urem(rest, irutil.i64(outer))
                image = b.udiv(rest, irutil.i64(outer))
                band, chunk = (first, second) if chunks_outer else (second, first)
                self._chunk(sub, image, band, chunk)

        ctx.parallel(f"Conv.{self.step.name}", self.step.inputs + self.step.outputs, tasks, task,
                     outline=True)

    def _chunks_outer(self):
        """Whether an image's units take each chunk of pixels for every band of output
        blocks in turn (else each band over every chunk): the order that streams fewer
        bytes from beyond the cache, as one order reads the image once per band unless it
        fits in the cache, the other the weights once per chunk."""
        image = math.prod(self.step.inputs[0].shape[1:]) * 4
        weights = math.prod(self.step.inputs[1].shape) * 4
        bands_outer = weights + (image if image <= CACHE else image * self.bands)
        chunks_outer = image + (weights if weights <= CACHE else weights * self.chunks)
        return chunks_outer <= bands_outer

    def _chunk(self, ctx, image, band, chunk):
        """The tiles of chunk ``chunk`` of the output plane of image ``image``, for the blocks
        of output channels of band ``band`` (the last band may have fewer)."""
        b = ctx.builder
        full, rest = divmod(self.out_blocks, self.blocks)
        if not rest:
            self._tiles(ctx, image, band, chunk, self.blocks)
            return
        with b.if_else(b.icmp_unsigned("<", band, irutil.i64(full))) as (whole, part):
            with whole:
                self._tiles(ctx, image, band, chunk, self.blocks)
            with part:
                self._tiles(ctx, image, band, chunk, rest)

    def _tiles(self, ctx, image, band, chunk, blocks):
        b = ctx.builder
        first_block = mul(b, band, self.blocks)
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

    def _tile(self, ctx, image, first_block, blocks, first, width):
        """Outputs of ``blocks`` blocks from ``first_block`` at the ``width`` pixels of the
        output plane from ``first`` (an i64 or int)."""
        b, size = ctx.builder, self.size
        (sh, sw), (ph, pw) = self.strides, self.pads
        # Each pixel's first input row and column (the taps' origin, maybe in the padding).
        origins = []
        for p in range(width):
            pixel = add(b, first, p)
            row, column = ((pixel // self.out_width, pixel % self.out_width)
                           if isinstance(pixel, int) else
                           (b.udiv(pixel, irutil.i64(self.out_width)),
                            b.urem(pixel, irutil.i64(self.out_width))))
            origins.append((add(b, mul(b, row, sh), -ph), add(b, mul(b, column, sw), -pw)))
        if not self.checked:
            self._accumulate(ctx, image, first_block, blocks, first, width, origins, None)
            return
        zeros = filled(ctx, size, 0.0)
        if isinstance(first, int):
            self._accumulate(ctx, image, first_block, blocks, first, width, origins, zeros)
            return
        # A tile whose every tap lies inside the image runs without checks.
        inside = ir.Constant(irutil.I1, 1)
        for origin, size_in, k, d in zip(zip(*origins), (self.height, self.width),
                                         self.kernel, self.dilations):
            room = size_in - (k - 1) * d
            for o in origin:
                inside = b.and_(inside, b.icmp_unsigned("<", ival(o), irutil.i64(max(room, 0))))
        with b.if_else(inside) as (unchecked, checked):
            with unchecked:
                self._accumulate(ctx, image, first_block, blocks, first, width, origins, None)
            with checked:
                self._accumulate(ctx, image, first_block, blocks, first, width, origins, zeros)

    def _accumulate(self, ctx, image, first_block, blocks, first, width, origins, zeros):
        """The tile's sums over its taps, stored; ``zeros`` (where not None) is what a tap
        outside the image reads."""
        b, size = ctx.builder, self.size
        kh_count, kw_count = self.kernel
        dh, dw = self.dilations
        vector = irutil.vector_of(irutil.compute_type("float32"), size)
        x, w = ctx.pointer(self.step.inputs[0]), ctx.pointer(self.step.inputs[1])
        # Offsets in elements: an input block plane, an output block's weights, a weight tap.
        plane_in = self.height * self.width * size
        tap = size * size
        weight_block = self.group_in * kh_count * kw_count * tap
        first_in = (mul(b, b.udiv(ival(first_block), irutil.i64(self.group_out)), self.group_in)
                    if self.group_in < self.in_blocks else 0)

        def tap_of(rows, w_tap, k, accs):
            """``accs`` plus the products of the tap at ``k`` (an i64) along the rows
            ``rows`` (each pixel's: its offset and whether it is inside)."""
            pixels = []
            for (x_row, row_inside), (_, column) in zip(rows, origins):
                position = add(b, column, mul(b, k, dw))
                at = irutil.element_ptr(b, x, "float32",
                                        ival(add(b, x_row, mul(b, position, size))))
                if zeros is not None:
                    inside = b.and_(row_inside, b.icmp_unsigned("<", ival(position),
                                                                irutil.i64(self.width)))
                    at = b.select(inside, at, zeros)
                pixels.append(at)
            weights = [add(b, w_tap, add(b, r * weight_block, mul(b, k, tap)))
                       for r in range(blocks)]
            with irutil.accumulating_loop(b, 0, size, accs, name="c") as channel:
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
                          if zeros is not None else None)
                rows.append((add(b, base, mul(b, position, self.width * size)), inside))
            w_tap = add(b, mul(b, first_block, weight_block),
                        mul(b, add(b, mul(b, in_block, kh_count), kh), kw_count * tap))
            if kw_count == 1:
                return tap_of(rows, w_tap, 0, accs)
            with irutil.accumulating_loop(b, 0, kw_count, accs, name="kw") as loop:
                loop.set_next(tap_of(rows, w_tap, loop.index, loop.values))
            return loop.results

        zero = irutil.const(vector, 0)
        with irutil.accumulating_loop(b, 0, self.group_in, [zero] * (blocks * width),
                                      name="cb") as channels:
            with irutil.accumulating_loop(b, 0, kh_count, channels.values, name="kh") as rows:
                rows.set_next(row_of(channels.index, rows.index, rows.values))
            channels.set_next(rows.results)
        plane_out = self.plane * size
        for r in range(blocks):
            block = add(b, first_block, r)
            offset = add(b, mul(b, add(b, mul(b, image, self.out_blocks), block), plane_out),
                         mul(b, first, size))
            self.output.store(ctx, block, offset, channels.results[r * width:(r + 1) * width])
