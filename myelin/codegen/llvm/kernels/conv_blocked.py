"""Direct 2-D convolutions of channel-blocked images (NCHW[b]c, :mod:`myelin.ops.layout`).

With the ``b`` channels of a pixel in one vector, a convolution needs no packing. With groups
of whole blocks (one group among them), a register tile of a few blocks of output channels by
a few output pixels (``TILES``, as ONNX Runtime's NCHWc kernels) sums, for every block of
input channels of their group and kernel tap, each input channel of each pixel broadcast over
the lanes times the vector of its weights for each block of output channels (the packed
weight's ``b`` vectors at that tap): ``blocks x pixels`` fused multiply-adds per ``blocks``
vector loads and ``pixels`` broadcasts. Where the convolution pads, the output plane is cut
into regions (:func:`_regions`): rectangles of pixels that read the same kernel taps inside
the image, so that no tile computes with padding (a 3x3 layer on a 7x7 plane reads 18% fewer
taps; a dilated layer of FCN 31%) or checks a bound. The tiles run over each region's pixels
row by row (a tile's pixels may span rows, so small planes fill them too); the largest region
has code of its own with its numbers constant, the border regions share one whose numbers are
picked by the chunk. Tasks take chunks of tiles for a band of output blocks, in the order that
streams fewer bytes (:meth:`_PlaneTiles._chunks_outer`). Where a band's weights are large
(3x3 layers of 256 channels and more), a task sums them a slice of input blocks at a time over
a pass of its units, keeping the partial sums in Y, so that each slice is read from the
first-level cache by every tile of the pass (as ONNX Runtime's kernels sum one input block at
a time), and fetches the next slice while it runs. A register tile is a function of its own
(:func:`_tile_function`, the tiles of a chunk in one call) that takes the layer's sizes and
strides and the first tile's first pixel as arguments: the layers of a network whose tiles
have one shape and one epilogue call one function, which LLVM compiles once.

A depthwise convolution runs row by row (:class:`~.blocked.RowWalker`): a tile is a run of
pixels of one block, each tap one vector load of the input and one fused multiply-add per
pixel, with the tap's weights loaded once. The bias and the fused epilogue are applied to each
vector as it is stored.
"""

import math
from typing import NamedTuple

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil, mathlib
from myelin.codegen.llvm.kernels import fused
from myelin.codegen.llvm.kernels.base import ArgumentContext, task_range
from myelin.codegen.llvm.kernels.blocked import BlockedStep, RowWalker, channel_products, filled
from myelin.codegen.llvm.kernels.conv import OutlinedKernel, add, ival, mul, sub
from myelin.codegen.llvm.kernels.conv_winograd import WinogradTiles
from myelin.ops import conv as conv_ops
from myelin.ops import fused as fused_ops
from myelin.ops import layout

# A tile by channels per block: (blocks of output channels, pixels). Its accumulators,
# weight vectors and a broadcast fit the registers (16 with AVX2, 32 with AVX-512). With
# AVX-512, 4 x 6 fit, but on Zen 4 tiles of 3 x 6 ran faster (in-process A/B, two threads:
# ResNet-50 0.83-0.87 of 4 x 6's time, MobileNetV2 0.82, EfficientNet-B0 0.81, 1x1 layers
# alone 10-45% faster), except in Winograd's transformed products (ResNet-18 1.04-1.05).
TILES = {8: (2, 6), 16: (3, 6)}
WINOGRAD_TILES = {8: (2, 6), 16: (4, 6)}
CHUNK_TILES = 8             # tiles of a task's unit
# Bytes of an operand that stay in a core's cache (half its L2: the other operand's blocks
# pass through the rest) while units go by.
CACHE = 1 << 18
# A band's weights beyond SLICE_ABOVE bytes, with more than one kernel tap, are read a slice
# of input blocks at a time, each slice at most SLICE bytes (so that it stays in the
# first-level cache while a pass of PASS bytes of outputs' partial sums goes over it). On a
# Zen 3 core, one thread: 3x3 layers of 256 channels (147 KB a band) ran 5-35% faster sliced
# (VGG-11's at 56x56 1.4 -> 1.05 of ONNX Runtime's time), of 128 (74 KB) 5% slower, and
# ResNet-50's 1x1 layers of 2048 channels (128 KB) 4% slower.
SLICE_ABOVE = 3 << 15
SLICE = 1 << 14
PASS = 1 << 16
LINE = 64                   # bytes of a cache line
RECOMPUTED = 1 / 64         # the share of a region's pixels that a tile may compute again
                            # (:meth:`_PlaneTiles._overlaps`)
LONG_SUM = 64               # products of a running sum beyond which a plain image's channels
                            # are summed apart (:meth:`_PlaneTiles._tile`)


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

    def glue(self, step):
        return _emitter(step).glue

    def emit_body(self, ctx, step):
        conv = fused_ops.conv_part(step)
        emitter = _emitter(step)
        extra = (WINOGRAD_TILES,) if emitter is WinogradTiles else ()
        emitter(ctx, step, conv, self.flops(step), _Output(step, conv), *extra).emit()


def _emitter(step):
    """The :class:`~.blocked.BlockedStep` class that emits blocked convolution ``step``."""
    conv = fused_ops.conv_part(step)
    g = conv_ops.geometry(conv)
    if layout.depthwise(g.group, g.in_channels):
        return _DepthwiseRows
    return WinogradTiles if conv_ops.winograd(conv) else _PlaneTiles


class _Output:
    """Where a blocked convolution step's vectors go: plus the bias, through the fused
    epilogue (its extra inputs of the output's shape read at the same place), into Y."""

    def __init__(self, step, conv):
        self.step, self.y = step, step.outputs[0]
        self.size = conv_ops.channel_block(step)
        self.bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        self.epilogue = fused.epilogue(step) if step.type == "FusedConv" else None

    def partial_sums(self, ctx, offsets):
        """The vectors at elements ``offsets`` of Y (partial sums a pass stored)."""
        b, y = ctx.builder, ctx.pointer(self.y)
        return [irutil.load(b, irutil.element_ptr(b, y, "float32", ival(at)), "float32",
                            self.size) for at in offsets]

    def store_partial_sums(self, ctx, offsets, values):
        """Store ``values`` at elements ``offsets`` of Y as they are (sums of some input
        blocks, for the next pass to add to)."""
        b, y = ctx.builder, ctx.pointer(self.y)
        for at, value in zip(offsets, values):
            irutil.store(b, value, irutil.element_ptr(b, y, "float32", ival(at)), "float32")

    def store(self, ctx, block, offsets, values):
        """Store ``values``, the vectors of pixels of output block ``block``, at elements
        ``offsets`` of Y."""
        b, size = ctx.builder, self.size
        extras = [(ctx.pointer(e), tuple(e.shape) == tuple(self.y.shape))
                  for e in self.step.inputs[fused_ops.first_extra(self.step):]
                  ] if self.epilogue else []
        term = None
        if self.bias is not None:
            term = irutil.load(b, irutil.element_ptr(
                b, ctx.pointer(self.bias), "float32", ival(mul(b, block, size))), "float32", size)
        for offset, value in zip(offsets, values):
            if term is not None:
                value = b.fadd(value, term)
            at = ival(offset)
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
        offset = self.output_offset(ctx, image, block, row, column)
        self.output.store(ctx, block, [add(b, offset, p * size) for p in range(width)],
                          rows.results)


class _PlaneTiles(BlockedStep):
    """A convolution with groups of whole blocks (one group among them): register tiles over
    the output plane, each of a band of output blocks of one group, region by region
    (:func:`_regions`: the pixels of a region read the same kernel taps inside the image).
    Its tasks are glue: loops over chunks of tiles, one call of a tile function each."""

    glue = True

    def __init__(self, ctx, step, conv, work, output):
        super().__init__(ctx, step, conv, work)
        self.output = output
        g = self.g
        # Channels per input block: the output's, or 1 for a plain image of a few channels.
        self.in_size = conv_ops.input_block(step)
        self.in_blocks = g.in_channels // self.in_size
        self.out_blocks = g.out_channels // self.size
        self.plane = self.out_height * self.out_width
        # Input and output blocks of a group; a band's blocks lie in one group.
        self.group_in, self.group_out = self.in_blocks // g.group, self.out_blocks // g.group
        blocks, pixels = TILES.get(self.size, TILES[8])
        blocks = min(blocks, self.group_out)
        while g.group > 1 and self.group_out % blocks:
            blocks -= 1
        self.blocks, self.pixels = blocks, min(pixels, self.plane)
        self.bands = -(-self.out_blocks // self.blocks)
        self.regions = _regions(self)
        self.chunks = sum(region.chunks for region in self.regions)
        # The weights of an output block for an input block (elements); a band's beyond
        # SLICE_ABOVE bytes in all are read in slices of input blocks.
        taps = math.prod(self.kernel)
        self.block_weights = taps * self.in_size * self.size
        block_bytes = self.blocks * self.block_weights * 4
        sliced = taps > 1 and block_bytes * self.group_in > SLICE_ABOVE
        self.slice_blocks = max(1, SLICE // block_bytes) if sliced else self.group_in
        self.slices = -(-self.group_in // self.slice_blocks)
        unit_bytes = CHUNK_TILES * self.pixels * self.blocks * self.size * 4
        self.pass_units = max(1, PASS // unit_bytes)
        self.tensors_key = _tensors_key(ctx, step, output)

    def emit(self):
        ctx, g = self.ctx, self.g
        units = g.batch * self.bands * self.chunks
        tasks, size = ctx.chunks(units, self.work)
        chunks_outer = self._chunks_outer()

        def units_of(ctx, start, stop, part):
            b = ctx.builder
            with irutil.for_range(b, start, stop, name="unit") as unit:
                inner, outer = ((self.bands, self.chunks) if chunks_outer
                                else (self.chunks, self.bands))
                first = b.urem(unit, irutil.i64(inner))
                rest = b.udiv(unit, irutil.i64(inner))
                second = b.urem(rest, irutil.i64(outer))
                image = b.udiv(rest, irutil.i64(outer))
                band, chunk = (first, second) if chunks_outer else (second, first)
                if part.next is not None:
                    self._fetch_next_slice(ctx, band, chunk, part)
                self._chunk(ctx, image, band, chunk, part)

        def task(sub, index):
            b = sub.builder
            start, stop = task_range(b, index, size, units)
            if self.slices == 1:
                units_of(sub, start, stop, _Slice.whole(self.group_in))
                return
            # Passes of units, each over every slice of the input blocks in turn, the
            # outputs' partial sums kept in Y between slices.
            with irutil.for_range(b, start, stop, self.pass_units, name="pass") as first:
                last = b.add(first, irutil.i64(self.pass_units))
                last = b.select(b.icmp_signed("<", last, stop), last, stop)
                with irutil.for_range(b, 0, self.slices, name="slice") as number:
                    units_of(sub, first, last, _Slice(b, number, self.slice_blocks,
                                                    self.group_in, self.slices))

        ctx.parallel(f"Conv.{self.step.name}", self.step.inputs + self.step.outputs, tasks, task,
                     outline=True, glue=self.glue)

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

    def _fetch_next_slice(self, ctx, band, chunk, part):
        """Prefetch chunk ``chunk``'s share of band ``band``'s weights for the slice after
        ``part`` (into the second-level cache: the chunks of a band fetch it all while this
        slice's tiles run, rather than its first tile waiting for it)."""
        b, per_block = ctx.builder, self.block_weights
        lines = -(-self.slice_blocks * per_block * 4 // LINE)
        start = b.udiv(b.mul(chunk, irutil.i64(lines)), irutil.i64(self.chunks))
        stop = b.udiv(b.mul(b.add(chunk, irutil.i64(1)), irutil.i64(lines)),
                      irutil.i64(self.chunks))
        w = ctx.pointer(self.step.inputs[1])
        weight_block = self.group_in * per_block
        for r in range(self.blocks):
            first = b.add(b.mul(b.add(b.mul(band, irutil.i64(self.blocks)), irutil.i64(r)),
                                irutil.i64(weight_block)),
                          b.mul(part.next, irutil.i64(per_block)))
            with irutil.for_range(b, start, stop, name="line") as line:
                irutil.prefetch(b, irutil.element_ptr(b, w, "float32", b.add(
                    first, b.mul(line, irutil.i64(LINE // 4)))), locality=2)

    def _chunk(self, ctx, image, band, chunk, part):
        """The tiles of chunk ``chunk`` (of all regions') for the blocks of output channels
        of band ``band`` (the last band may have fewer), over the input blocks of ``part``
        (a :class:`_Slice`)."""
        b = ctx.builder
        full, rest = divmod(self.out_blocks, self.blocks)
        if not rest:
            self._tiles(ctx, image, band, chunk, self.blocks, part)
            return
        with b.if_else(b.icmp_unsigned("<", band, irutil.i64(full))) as (whole, fewer):
            with whole:
                self._tiles(ctx, image, band, chunk, self.blocks, part)
            with fewer:
                self._tiles(ctx, image, band, chunk, rest, part)

    def _tiles(self, ctx, image, band, chunk, blocks, part):
        """The tiles of chunk ``chunk``: the largest region's in code of its own (its
        numbers constants), the other regions' in code shared by all of them."""
        b = ctx.builder
        first_block = mul(b, band, self.blocks)
        bulk = max(self.regions, key=lambda region: region.count)
        borders = [region for region in self.regions if region is not bulk]
        if not borders:
            self._region_tiles(ctx, image, bulk, first_block, blocks, chunk, [bulk.left], part,
                               True)
            return
        ours = b.and_(b.icmp_unsigned(">=", chunk, irutil.i64(bulk.first_chunk)),
                      b.icmp_unsigned("<", chunk, irutil.i64(bulk.first_chunk + bulk.chunks)))
        with b.if_else(ours) as (inside, border):
            with inside:
                self._region_tiles(ctx, image, bulk, first_block, blocks, chunk, [bulk.left],
                                   part, True)
            with border:
                self._region_tiles(ctx, image, _Region.pick(b, borders, chunk), first_block,
                                   blocks, chunk, [region.left for region in borders], part)

    def _region_tiles(self, ctx, image, region, first_block, blocks, chunk, lefts, part,
                      bulk=False):
        """The tiles of ``region`` in chunk ``chunk``; ``lefts`` are the pixels past its
        whole tiles that it may have. The ``bulk`` region's whole tiles, where nearly all
        the time goes, run the block's channels unrolled (:meth:`_tile`)."""
        b = ctx.builder
        local = sub(b, chunk, region.first_chunk)
        start = b.mul(local, irutil.i64(CHUNK_TILES))
        stop = b.add(start, irutil.i64(CHUNK_TILES))
        stop = b.select(b.icmp_signed("<", stop, ival(region.tiles)), stop, ival(region.tiles))
        self._tile(ctx, image, region, first_block, blocks, b.mul(start, irutil.i64(self.pixels)),
                   self.pixels, part, unrolled=bulk, count=b.sub(stop, start))
        lefts = sorted(set(lefts) - {0})
        if not lefts:
            return
        if bulk and self._overlaps(region, part):
            # The pixels past the whole tiles, in a whole tile that ends with the region.
            with b.if_then(b.icmp_unsigned("==", local, ival(sub(b, region.chunks, 1)))):
                self._tile(ctx, image, region, first_block, blocks,
                           region.count - self.pixels, self.pixels, part, unrolled=True)
            return
        with b.if_then(b.icmp_unsigned("==", local, ival(sub(b, region.chunks, 1)))):
            for left in lefts:
                if isinstance(region.left, int):
                    self._tile(ctx, image, region, first_block, blocks,
                               mul(b, region.tiles, self.pixels), left, part)
                    continue
                with b.if_then(b.icmp_unsigned("==", region.left, irutil.i64(left))):
                    self._tile(ctx, image, region, first_block, blocks,
                               mul(b, region.tiles, self.pixels), left, part)

    def _overlaps(self, region, part):
        """Whether the bulk ``region``'s pixels past its whole tiles are computed by one more whole
        tile that ends with the region's last pixel, computing again the last pixels of the
        tile before (the same sums in the same order, stored again) rather than by a tile of
        their number, which is code of its own (ResNet-50's tile functions 50 -> 39,
        MobileNetV2's 27 -> 19). Only where that computes at most ``RECOMPUTED`` of the
        region's pixels twice (a 14x14 plane's last 4 pixels in a tile of 6: 2 of 196; a 7x7
        plane's 49th would be 5 of 49, its layer 10% slower, ResNet-50 1-2%), and not where
        a pass stores partial sums (added to twice), nor where Y may take the place of an
        input (``inplace``: read after it was stored), nor in a region of no whole tile."""
        return (part.first is True and part.last is True
                and not self.step.kernel.inplace(self.step) and region.tiles > 0
                and self.pixels - region.left <= region.count * RECOMPUTED)

    def _tile(self, ctx, image, region, first_block, blocks, first, width, part,
              unrolled=False, count=1):
        """Outputs of ``blocks`` blocks from ``first_block`` at the ``width`` pixels of
        ``region`` (a :class:`_Region`, its numbers maybe i64 values) from its pixel
        ``first`` (an i64 or int), and at the ``width`` pixels after them of each of the
        next tiles (``count`` tiles in all, an i64 or int), summed over the input blocks of
        ``part`` (a :class:`_Slice`: with the partial sums in Y unless it is the first), by
        a call of the tile function of their shape (:func:`_tile_function`), which the
        layers of a network share: the sizes of the layer and the place of the first pixel
        are its arguments. ``unrolled`` unrolls the loop over a block's channels: 6-17%
        faster than a loop of 8 (one layer of 1x1 or 3x3 on one Zen 3 core; a loop unrolled
        by 2 is not, by 4 twice as slow), for eight times the code."""
        b, size, in_size = ctx.builder, self.size, self.in_size
        (sh, sw), (ph, pw) = self.strides, self.pads
        (dh, dw), (kh_count, kw_count) = self.dilations, self.kernel
        row, column = region.place(b, first)
        tap = in_size * size
        weight_block = self.group_in * self.block_weights
        first_in = (mul(b, b.udiv(ival(first_block), irutil.i64(self.group_out)), self.group_in)
                    if self.group_in < self.in_blocks else 0)
        plane_in, plane_out = self.height * self.width * in_size, self.plane * size
        kh_taps, kw_taps = sub(b, region.kh_hi, region.kh_lo), sub(b, region.kw_hi, region.kw_lo)
        numbers = _TileNumbers(
            count=count, row=row, column=column, column0=region.column0,
            column_end=add(b, region.column0, region.columns), out_width=self.out_width,
            row_stride=sh, column_stride=sw, row_shift=add(b, mul(b, region.kh_lo, dh), -ph),
            column_shift=add(b, mul(b, region.kw_lo, dw), -pw), x_line=self.width * in_size,
            x_first=mul(b, add(b, mul(b, image, self.in_blocks), first_in), plane_in),
            x_block=plane_in, x_row=dh * self.width * in_size, x_tap=dw * in_size,
            w_first=add(b, mul(b, first_block, weight_block),
                        add(b, mul(b, region.kh_lo, kw_count * tap), mul(b, region.kw_lo, tap))),
            w_block=self.block_weights, w_row=kw_count * tap, w_tap=tap,
            w_out_block=weight_block,
            y_first=mul(b, add(b, mul(b, image, self.out_blocks), first_block), plane_out),
            y_block=plane_out, first_block=first_block, blocks_lo=part.lo, blocks_hi=part.hi,
            rows=kh_taps, taps=kw_taps,
            first=1 if part.first is True else b.zext(part.first, irutil.I64),
            last=1 if part.last is True else b.zext(part.last, irutil.I64))
        shape = _TileShape(
            size=size, blocks=blocks, width=width, in_size=in_size,
            unrolled=unrolled or in_size == 1,
            apart=in_size == 1 and self.group_in * kh_count * kw_count > LONG_SUM,
            sliced=part.first is not True,
            rows=kh_taps if isinstance(kh_taps, int) else None,
            taps=kw_taps if isinstance(kw_taps, int) else None,
            tensors=self.tensors_key)
        tensors = self.step.inputs + self.step.outputs
        function = ctx.function(("blocked conv tile", shape),
                                lambda module: _tile_function(module, shape, self))
        b.call(function, [ctx.pointer(t) for t in tensors] + [ival(n) for n in numbers])

def _tensors_key(ctx, step, output):
    """What a tile function's code depends on in ``step``'s tensors (written through
    ``output``, an :class:`_Output`): how many, which are the same, where the bias is, the
    epilogue's code and which of its inputs are whole."""
    tensors = step.inputs + step.outputs
    roots = [id(t.root()) for t in tensors]
    epilogue = None
    if output.epilogue is not None:
        module = ir.Module(name="epilogue")
        irutil.set_target(module, ctx.target)
        extras = step.inputs[fused_ops.first_extra(step):]
        vector = irutil.vector_of(irutil.compute_type("float32"), output.size)
        output.epilogue.function(module, (vector,) * (1 + len(extras)))
        epilogue = (str(module), tuple(tuple(e.shape) == tuple(output.y.shape) for e in extras))
    bias = None if output.bias is None else [t is output.bias for t in tensors].index(True)
    return tuple(roots.index(r) for r in roots), bias, epilogue


class _TileNumbers(NamedTuple):
    """A tile function's arguments but its tensors (elements, or counts): its tiles, where
    their pixels lie, and where its input blocks, weights and output blocks start and how far
    apart."""

    count: object           # tiles, each of the pixels after the last's
    row: object             # the first pixel's output row and column
    column: object
    column0: object         # the region's first column and the column past its last (its
    column_end: object      # pixels run along its rows)
    out_width: object       # columns of the output plane
    row_stride: object      # the convolution's strides,
    column_stride: object
    row_shift: object       # and the input row and column of output 0's first tap read
    column_shift: object
    x_line: object          # elements of an input row in a block's plane
    x_first: object         # the tile's image's first input block (of its group)
    x_block: object         # from an input block to the next
    x_row: object           # from a kernel row to the next
    x_tap: object           # from a kernel column to the next
    w_first: object         # the first output block's weights at the first tap read
    w_block: object         # from the weights of an input block to the next
    w_row: object
    w_tap: object
    w_out_block: object     # from an output block's weights to the next
    y_first: object         # the first output block of the tile
    y_block: object
    first_block: object     # the number of the first output block (for the bias)
    blocks_lo: object       # the input blocks summed (of the group)
    blocks_hi: object
    rows: object            # kernel rows read
    taps: object            # kernel columns read
    first: object           # 1 if the sums start at zero, else from Y's partial sums
    last: object            # 1 if the sums are the outputs, else partial sums for Y


class _TileShape(NamedTuple):
    """What a tile function's code depends on: its register tile (``blocks`` output blocks
    of ``size`` channels by ``width`` pixels), the channels of an input block, whether they
    are unrolled, summed apart (a plain image's, :meth:`_PlaneTiles._tile`) or in slices
    (partial sums in Y), the kernel rows and columns it reads where they are the same for
    every tile (else None: arguments), and its tensors (:func:`_tensors_key`)."""

    size: int
    blocks: int
    width: int
    in_size: int
    unrolled: bool
    apart: bool
    sliced: bool
    rows: object
    taps: object
    tensors: tuple


class _TileContext(ArgumentContext):
    """A tile function's emit context: each tensor at its argument, even a small constant
    that a kernel would compile into its code (the layers sharing the function have their
    own values)."""

    def pointer(self, tensor):
        return self.pointers[id(tensor.root())]


def _tile_function(module, shape, tiles):
    """A function ``void(ptr tensor, ..., i64 number, ...)`` computing register tiles of
    ``shape`` of a step like ``tiles``' (a :class:`_PlaneTiles`), one after the other: its
    tensors in the step's order, then the :class:`_TileNumbers`."""
    tensors = tiles.step.inputs + tiles.step.outputs
    width, blocks, size = shape.width, shape.blocks, shape.size
    roots = shape.tensors[0]
    function, b = irutil.helper_function(module, "conv.tile", len(tensors),
                                         len(_TileNumbers._fields),
                                         noalias=len(set(roots)) == len(roots))
    ctx = _TileContext(b, tiles.ctx.target, {id(t.root()): a for t, a in
                                             zip(tensors, function.args)}, tiles.ctx, 1)
    numbers = _TileNumbers(*function.args[len(tensors):])
    x, w = ctx.pointer(tiles.step.inputs[0]), ctx.pointer(tiles.step.inputs[1])
    vector = irutil.vector_of(irutil.compute_type("float32"), size)
    zero = irutil.const(vector, 0)

    def tap_of(x_at, w_at, accs):
        """``accs`` plus the products of the tap whose input offsets are ``x_at`` plus each
        pixel's and whose first output block's weights start at ``w_at``."""
        pixels = [irutil.element_ptr(b, x, "float32", b.add(x_at, p)) for p in places[0]]
        weights = [add(b, w_at, b.mul(numbers.w_out_block, irutil.i64(r)) if r else 0)
                   for r in range(blocks)]

        def channel(c, out):
            return channel_products(b, w, weights, pixels, c, size, out)

        if shape.unrolled:
            for c in range(shape.in_size):
                accs = channel(c, accs)
            return accs
        with irutil.accumulating_loop(b, 0, shape.in_size, accs, name="c") as loop:
            loop.set_next(channel(loop.index, loop.values))
        return loop.results

    def row_of(x_at, w_at, accs):
        """``accs`` plus the products of the taps along a kernel row (in a loop: unrolled,
        LLVM would keep the pixels that one tap shares with the next in registers, which
        spills the accumulators)."""
        if shape.taps == 1:
            return tap_of(x_at, w_at, accs)
        with irutil.accumulating_loop(b, 0, numbers.taps if shape.taps is None else shape.taps,
                                      accs, name="kw") as loop:
            loop.set_next(tap_of(b.add(x_at, b.mul(loop.index, numbers.x_tap)),
                                 b.add(w_at, b.mul(loop.index, numbers.w_tap)), loop.values))
        return loop.results

    def step(row, column):
        """The place of the pixel after the one at (``row``, ``column``) in the region."""
        column = b.add(column, irutil.i64(1))
        wrap = b.icmp_unsigned("==", column, numbers.column_end)
        return (b.add(row, b.zext(wrap, irutil.I64)),
                b.select(wrap, numbers.column0, column))

    with irutil.accumulating_loop(b, 0, numbers.count, [numbers.row, numbers.column],
                                  name="tile") as tile_loop:
        # Each pixel's input offset in a block's plane at its window's first tap read, and
        # its output offset in a block's plane (read by tap_of).
        row, column = tile_loop.values
        places = ([], [])
        for p in range(width):
            if p:
                row, column = step(row, column)
            places[1].append(b.mul(b.add(b.mul(row, numbers.out_width), column),
                                   irutil.i64(size)))
            in_row = b.add(b.mul(row, numbers.row_stride), numbers.row_shift)
            in_column = b.add(b.mul(column, numbers.column_stride), numbers.column_shift)
            places[0].append(b.add(b.mul(in_row, numbers.x_line),
                                   b.mul(in_column, irutil.i64(shape.in_size))))
        offsets = []
        for r in range(blocks):
            base = b.add(numbers.y_first, b.mul(numbers.y_block, irutil.i64(r))) if r \
                else numbers.y_first
            offsets += [b.add(base, place) for place in places[1]]
        initial = [zero] * (blocks * width)
        if shape.sliced:
            first = b.icmp_unsigned("!=", numbers.first, irutil.i64(0))
            initial = [b.select(first, zero, value)
                       for value in tiles.output.partial_sums(ctx, offsets)]
        # Blocks of one channel (a plain image's) with many taps sum each apart, then add it
        # to the others' (as a product's blocks of k would): one running sum of a 7x7 stem's
        # 147 products put FCN ResNet-50's outputs 1.2e-4 from the exact ones (ONNX Runtime's
        # 7.5e-5). Short sums (a 3x3 stem's 27) do not: apart they took 4-7% longer.
        with irutil.accumulating_loop(b, numbers.blocks_lo, numbers.blocks_hi, initial,
                                      name="cb") as channels:
            x_block = b.add(numbers.x_first, b.mul(channels.index, numbers.x_block))
            w_block = b.add(numbers.w_first, b.mul(channels.index, numbers.w_block))
            start = [zero] * len(initial) if shape.apart else channels.values
            kernel_rows = numbers.rows if shape.rows is None else shape.rows
            with irutil.accumulating_loop(b, 0, kernel_rows, start, name="kh") as rows:
                rows.set_next(row_of(b.add(x_block, b.mul(rows.index, numbers.x_row)),
                                     b.add(w_block, b.mul(rows.index, numbers.w_row)),
                                     rows.values))
            channels.set_next([b.fadd(total, value) for total, value in
                               zip(channels.values, rows.results)] if shape.apart
                              else rows.results)

        def store():
            for r in range(blocks):
                tiles.output.store(ctx, b.add(numbers.first_block, irutil.i64(r)),
                                   offsets[r * width:(r + 1) * width],
                                   channels.results[r * width:(r + 1) * width])

        if not shape.sliced:
            store()
        else:
            last_pass = b.icmp_unsigned("!=", numbers.last, irutil.i64(0))
            with b.if_else(last_pass) as (last, partial):
                with last:
                    store()
                with partial:
                    tiles.output.store_partial_sums(ctx, offsets, channels.results)
        tile_loop.set_next(step(row, column))
    b.ret_void()
    return function


class _Slice:
    """The input blocks ``lo`` to ``hi`` that a pass over the tiles sums (i64 values, or
    ints for all of them); ``first`` and ``last`` (i1 values, or True) say whether the
    partial sums start at zero and whether they are the outputs; ``next`` is the first
    block of the slice after (None when there is one slice). Slice ``number`` (an i64) of
    ``count``, of ``blocks`` of the ``total`` input blocks each (the last maybe fewer)."""

    def __init__(self, b, number, blocks, total, count):
        self.lo = b.mul(number, irutil.i64(blocks))
        self.hi = b.add(self.lo, irutil.i64(blocks))
        if total % blocks:
            self.hi = b.select(b.icmp_signed("<", self.hi, irutil.i64(total)), self.hi,
                               irutil.i64(total))
        self.first = b.icmp_unsigned("==", number, irutil.i64(0))
        self.last = b.icmp_unsigned("==", number, irutil.i64(count - 1))
        self.next = self.hi        # the next slice's first block (past the last: harmless)

    @classmethod
    def whole(cls, total):
        """All ``total`` input blocks in one pass."""
        part = object.__new__(cls)
        part.lo, part.hi, part.first, part.last, part.next = 0, total, True, True, None
        return part


class _Region:
    """The output pixels of rows ``row0`` ... x ``columns`` columns from ``column0`` that all
    read kernel rows ``kh_lo`` to ``kh_hi`` and columns ``kw_lo`` to ``kw_hi`` (exclusive)
    inside the image, and only those: ``count`` pixels taken row by row, in ``tiles`` whole
    tiles of the plane's ``pixels`` and ``left`` more, in ``chunks`` chunks of
    ``CHUNK_TILES`` tiles numbered from ``first_chunk`` among the plane's, the last of them
    taking the ``left`` pixels too (a chunk of those alone read a band's weights again for a
    few pixels: ResNet-50's 1x1 layers on 7x7 planes, 48 + 1 pixels, ran at 1.12 of ONNX
    Runtime's time, 1.0 in one chunk). In code, each number may be an i64 value
    (:meth:`pick`)."""

    FIELDS = ("row0", "column0", "columns", "kh_lo", "kh_hi", "kw_lo", "kw_hi", "tiles",
              "left", "chunks", "first_chunk")

    def __init__(self, rows, columns, kernel_rows, kernel_columns, pixels, first_chunk):
        self.row0, self.column0, self.columns = rows.start, columns.start, len(columns)
        self.kh_lo, self.kh_hi = kernel_rows.start, kernel_rows.stop
        self.kw_lo, self.kw_hi = kernel_columns.start, kernel_columns.stop
        self.count = len(rows) * len(columns)
        self.tiles, self.left = divmod(self.count, pixels)
        self.chunks = max(1, -(-self.tiles // CHUNK_TILES))
        self.first_chunk = first_chunk

    @classmethod
    def pick(cls, b, regions, chunk):
        """The region of ``regions`` (in chunk order) that chunk ``chunk`` (an i64) is in:
        a region whose numbers are i64 values chosen by the chunk (ints where all regions
        have the same)."""
        picked = object.__new__(cls)
        for field in cls.FIELDS:
            values = [getattr(region, field) for region in regions]
            value = values[0]
            if any(v != value for v in values):
                value = irutil.i64(value)
                for region, v in zip(regions[1:], values[1:]):
                    value = b.select(b.icmp_unsigned(">=", chunk,
                                                     irutil.i64(region.first_chunk)),
                                     irutil.i64(v), value)
            setattr(picked, field, value)
        return picked

    def place(self, b, index):
        """(row, column) of the region's pixel ``index`` (an i64 or int) in the plane."""
        if isinstance(index, int) and isinstance(self.columns, int):
            return (add(b, self.row0, index // self.columns),
                    add(b, self.column0, index % self.columns))
        if isinstance(self.columns, int) and self.columns == 1:
            return add(b, index, self.row0), self.column0
        return (add(b, b.udiv(ival(index), ival(self.columns)), self.row0),
                add(b, b.urem(ival(index), ival(self.columns)), self.column0))


def _regions(tiles):
    """The output plane of ``tiles`` (a :class:`_PlaneTiles`) in regions: the rectangles of
    rows and columns that read the same kernel rows and columns inside the image (a padded
    convolution's borders read fewer), so that no tile reads padding."""
    regions = []
    rows = _classes(tiles.out_height, tiles.height, tiles.kernel[0], tiles.strides[0],
                    tiles.pads[0], tiles.dilations[0])
    columns = _classes(tiles.out_width, tiles.width, tiles.kernel[1], tiles.strides[1],
                       tiles.pads[1], tiles.dilations[1])
    first = 0
    for row_range, kernel_rows in rows:
        for column_range, kernel_columns in columns:
            region = _Region(row_range, column_range, kernel_rows, kernel_columns,
                             tiles.pixels, first)
            regions.append(region)
            first += region.chunks
    return regions


def _classes(outputs, size, kernel, stride, pad, dilation):
    """The outputs along one axis in runs that read the same taps inside the input:
    (outputs range, taps range) pairs, in order."""
    runs = []
    for o in range(outputs):
        origin = o * stride - pad
        taps = [k for k in range(kernel) if 0 <= origin + k * dilation < size]
        window = range(taps[0], taps[-1] + 1) if taps else range(0)
        if runs and runs[-1][1] == window:
            runs[-1] = (range(runs[-1][0].start, o + 1), window)
        else:
            runs.append((range(o, o + 1), window))
    return runs
