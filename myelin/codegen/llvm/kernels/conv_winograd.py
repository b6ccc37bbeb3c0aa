"""Winograd F(2x2, 3x3) convolutions of channel-blocked images (Lavin and Gray, 2016).

A group-1 3x3 Conv of stride 1 whose weight is in Winograd's form (attribute ``winograd``,
:mod:`myelin.ops.layout`: ``U = G g G^T``, 4x4 per pair of channels, packed at compile time)
computes each 2x2 tile of outputs from the 4x4 input patch around it: the patch of every input
channel is transformed (``V = B^T d B``: additions only), the 16 positions of the patch are 16
independent products over the input channels (``M = U V`` per position, 16 multiply-adds per
tile and channel pair where the direct kernel has 36), and the tile is transformed back
(``Y = A^T M A``) with the bias and the fused epilogue.

Tasks take chunks of tiles of an image (and groups of bands of output blocks, where there are
fewer chunks than threads). A chunk transforms its tiles' patches of all input
blocks into a buffer on the task's stack (``V``: position, input block, tile, channel), then,
for each band of output blocks and position, runs register tiles of the blocked direct
kernel's kind (``conv_blocked.WINOGRAD_TILES``: a few output blocks by a few tiles; each
input channel of a tile broadcast over the lanes times the vector of its weights) over the
chunk's tiles, keeping the chunk's products (``M``) on the stack, and transforms them back
into Y. The weights of one band at one position stay in the first-level cache while the
chunk's tiles go by; the input is read once, where the direct kernel reads each pixel nine times.
The register tiles of the products are one function for every layer of their shape
(:func:`_products_function`: the sizes of the layer are its arguments), compiled once.
"""

from myelin.codegen.llvm import irutil
from myelin.codegen.llvm.kernels.base import task_range
from myelin.codegen.llvm.kernels.blocked import BlockedStep, channel_products, filled
from myelin.codegen.llvm.kernels.conv import add, mul
from myelin.errors import CompileError

TILE = 2                    # outputs along each axis of a tile
PATCH = 4                   # inputs along each axis of a tile's patch
POSITIONS = PATCH * PATCH
# Bytes of a chunk's transformed patches (V, on the task's stack): a chunk takes all tiles of
# an image that fit, so that the weights are read once an image (a chunk of a share of the
# second-level cache, 128 KiB, read them up to nine times and ran 14x14 layers of 256
# channels 20-35% slower; of 512 channels twice as slow).
CHUNK_BYTES = 1 << 20
# Bytes of stack a task may take at most (half a worker thread's: threads.WORKER_STACK); a
# step whose smallest chunk needs more (a hand-made flow's thousands of channels) is refused.
STACK_LIMIT = 1 << 22


class WinogradTiles(BlockedStep):
    """A blocked 3x3 convolution of stride 1 with weights in Winograd's form, writing through
    ``output`` (a :class:`~.conv_blocked._Output`); ``tiles`` is
    ``conv_blocked.WINOGRAD_TILES``."""

    def __init__(self, ctx, step, conv, work, output, tiles):
        super().__init__(ctx, step, conv, work)
        self.output = output
        g, size = self.g, self.size
        self.in_blocks, self.out_blocks = g.in_channels // size, g.out_channels // size
        self.rows = -(-self.out_height // TILE)
        self.columns = -(-self.out_width // TILE)
        self.tiles = self.rows * self.columns
        blocks, pixels = tiles.get(size, tiles[8])
        self.blocks, self.pixels = min(blocks, self.out_blocks), pixels
        self.bands = -(-self.out_blocks // self.blocks)
        # Chunks of a like number of tiles, V within CHUNK_BYTES (a multiple of a register
        # tile's: the last chunk's products run past the plane).
        fit = max(pixels, CHUNK_BYTES // (POSITIONS * g.in_channels * 4) // pixels * pixels)
        self.chunks = -(-self.tiles // fit)
        self.chunk = -(-self.tiles // self.chunks // pixels) * pixels
        self.chunks = -(-self.tiles // self.chunk)
        stack = POSITIONS * (g.in_channels + self.blocks * size) * self.chunk * 4
        if stack > STACK_LIMIT:
            raise CompileError(f"{step.name}: Winograd's form needs {stack} bytes of stack for "
                               f"{g.in_channels} input channels, more than {STACK_LIMIT}")
        # The bands in groups where there are fewer chunks than threads: each group's task
        # transforms the chunk's patches again (a few percent of the work) for its bands.
        units = g.batch * self.chunks
        self.groups = min(self.bands, -(-ctx.threads // units)) if units < ctx.threads else 1
        self.group_bands = -(-self.bands // self.groups)
        self.groups = -(-self.bands // self.group_bands)

    def emit(self):
        ctx = self.ctx
        units = self.g.batch * self.chunks * self.groups
        tasks, size = ctx.chunks(units, self.work)

        def task(sub, index):
            b = sub.builder
            scalar, vector = irutil.storage_type("float32"), self.size
            patches = irutil.stack_array(b, scalar,
                                         POSITIONS * self.in_blocks * self.chunk * vector)
            products = irutil.stack_array(b, scalar, POSITIONS * self.blocks * self.chunk * vector)
            start, stop = task_range(b, index, size, units)
            with irutil.for_range(b, start, stop, name="unit") as unit:
                group = b.urem(unit, irutil.i64(self.groups))
                rest = b.udiv(unit, irutil.i64(self.groups))
                chunk = b.urem(rest, irutil.i64(self.chunks))
                image = b.udiv(rest, irutil.i64(self.chunks))
                first = b.mul(chunk, irutil.i64(self.chunk))
                self._transform_patches(sub, image, first, patches)
                lo = b.mul(group, irutil.i64(self.group_bands))
                hi = b.add(lo, irutil.i64(self.group_bands))
                if self.bands % self.group_bands:
                    hi = b.select(b.icmp_signed("<", hi, irutil.i64(self.bands)), hi,
                                  irutil.i64(self.bands))
                with irutil.for_range(b, lo, hi, name="band") as band:
                    self._band(sub, image, first, band, patches, products)

        ctx.parallel(f"Conv.{self.step.name}", self.step.inputs + self.step.outputs, tasks, task,
                     outline=True)

    # The input transform.
    def _transform_patches(self, ctx, image, first, patches):
        """V of the chunk's tiles from tile ``first`` (an i64) of ``image``: for each tile and
        input block, ``B^T d B`` of its 4x4 patch (pixels outside the image, and all of a tile
        past the plane's, read as zero)."""
        b, size = ctx.builder, self.size
        x = ctx.pointer(self.step.inputs[0])
        zero = filled(ctx, size, 0.0)
        plane = self.height * self.width * size
        with irutil.for_range(b, 0, self.chunk, name="tile") as t:
            tile = b.add(first, t)
            real = b.icmp_unsigned("<", tile, irutil.i64(self.tiles))
            row = b.sub(b.mul(b.udiv(tile, irutil.i64(self.columns)), irutil.i64(TILE)),
                        irutil.i64(self.pads[0]))
            column = b.sub(b.mul(b.urem(tile, irutil.i64(self.columns)), irutil.i64(TILE)),
                           irutil.i64(self.pads[1]))
            inside, offsets = [], []
            for i in range(PATCH):
                r = b.add(row, irutil.i64(i))
                row_in = b.and_(real, b.icmp_unsigned("<", r, irutil.i64(self.height)))
                for j in range(PATCH):
                    c = b.add(column, irutil.i64(j))
                    inside.append(b.and_(row_in, b.icmp_unsigned("<", c, irutil.i64(self.width))))
                    offsets.append(b.mul(b.add(b.mul(r, irutil.i64(self.width)), c),
                                         irutil.i64(size)))
            with irutil.for_range(b, 0, self.in_blocks, name="cb") as block:
                base = b.mul(b.add(b.mul(image, irutil.i64(self.in_blocks)), block),
                             irutil.i64(plane))
                d = [irutil.load(b, b.select(ok, irutil.element_ptr(
                    b, x, "float32", b.add(base, at)), zero), "float32", size)
                    for ok, at in zip(inside, offsets)]
                v = _input_transform(b, d)
                at = b.add(b.mul(block, irutil.i64(self.chunk)), t)
                for position, value in enumerate(v):
                    slot = b.add(at, irutil.i64(position * self.in_blocks * self.chunk))
                    irutil.store(b, value, _vector_at(b, patches, slot, size), "float32")

    # The products.
    def _band(self, ctx, image, first, band, patches, products):
        """Band ``band``'s output blocks at the chunk's tiles (the last band may have fewer)."""
        b = ctx.builder
        full, rest = divmod(self.out_blocks, self.blocks)
        if not rest:
            self._band_of(ctx, image, first, band, self.blocks, patches, products)
            return
        with b.if_else(b.icmp_unsigned("<", band, irutil.i64(full))) as (whole, fewer):
            with whole:
                self._band_of(ctx, image, first, band, self.blocks, patches, products)
            with fewer:
                self._band_of(ctx, image, first, band, rest, patches, products)

    def _band_of(self, ctx, image, first, band, blocks, patches, products):
        """The ``blocks`` output blocks of band ``band``: M at each position, then Y."""
        b = ctx.builder
        first_block = b.mul(band, irutil.i64(self.blocks))
        with irutil.for_range(b, 0, POSITIONS, name="position") as position:
            with irutil.for_range(b, 0, self.chunk, self.pixels, name="tile") as t:
                self._products(ctx, first_block, blocks, position, t, patches, products)
        with irutil.for_range(b, 0, self.chunk, name="tile") as t:
            tile = b.add(first, t)
            with b.if_then(b.icmp_unsigned("<", tile, irutil.i64(self.tiles))):
                for r in range(blocks):
                    self._store_tile(ctx, image, b.add(first_block, irutil.i64(r)), tile,
                                     [_vector_at(b, products, b.add(irutil.i64(
                                         (p * self.blocks + r) * self.chunk), t), self.size)
                                      for p in range(POSITIONS)])

    def _products(self, ctx, first_block, blocks, position, t, patches, products):
        """M at ``position`` of output blocks ``first_block``... (``blocks`` of them) for the
        register tile of the chunk's tiles from ``t``, by a call of the products function of
        their shape (:func:`_products_function`), which the layers of a network share."""
        shape = (self.size, blocks, self.pixels)
        function = ctx.function(("winograd products",) + shape,
                                lambda module: _products_function(module, *shape))
        ctx.builder.call(function, [ctx.pointer(self.step.inputs[1]), patches, products,
                                    first_block, position, t, irutil.i64(self.in_blocks),
                                    irutil.i64(self.chunk), irutil.i64(self.blocks)])

    # The output transform.
    def _store_tile(self, ctx, image, block, tile, slots):
        """Output block ``block``'s 2x2 outputs of ``tile`` (an i64 of the plane) from its 16
        products at ``slots``: ``A^T M A``, through the bias and epilogue, the outputs past
        the plane's edge (of an odd size) left out."""
        b, size = ctx.builder, self.size
        m = [irutil.load(b, at, "float32", size) for at in slots]
        y = _output_transform(b, m)
        row = b.mul(b.udiv(tile, irutil.i64(self.columns)), irutil.i64(TILE))
        column = b.mul(b.urem(tile, irutil.i64(self.columns)), irutil.i64(TILE))
        base = b.mul(b.add(b.mul(image, irutil.i64(self.out_blocks)), block),
                     irutil.i64(self.out_height * self.out_width))
        for i in range(TILE):
            for j in range(TILE):
                r, c = b.add(row, irutil.i64(i)), b.add(column, irutil.i64(j))
                at = mul(b, add(b, base, add(b, b.mul(r, irutil.i64(self.out_width)), c)), size)
                edges = []
                if i and self.out_height % TILE:
                    edges.append(b.icmp_unsigned("<", r, irutil.i64(self.out_height)))
                if j and self.out_width % TILE:
                    edges.append(b.icmp_unsigned("<", c, irutil.i64(self.out_width)))
                if not edges:
                    self.output.store(ctx, block, [at], [y[i * TILE + j]])
                    continue
                inside = edges[0] if len(edges) == 1 else b.and_(*edges)
                with b.if_then(inside):
                    self.output.store(ctx, block, [at], [y[i * TILE + j]])


def _vector_at(b, array, index, size):
    """The address of vector ``index`` (an i64) of ``size`` float32s in ``array``."""
    return irutil.element_ptr(b, array, "float32", b.mul(index, irutil.i64(size)))


def _input_transform(b, d):
    """``B^T d B`` of a 4x4 patch ``d`` (16 vectors, row by row), row by row."""
    def line(x0, x1, x2, x3):
        return [b.fsub(x0, x2), b.fadd(x1, x2), b.fsub(x2, x1), b.fsub(x1, x3)]
    columns = [line(*(d[i * PATCH + j] for i in range(PATCH))) for j in range(PATCH)]
    return [value for i in range(PATCH) for value in line(*(columns[j][i] for j in range(PATCH)))]


def _output_transform(b, m):
    """``A^T m A`` of 4x4 products ``m`` (16 vectors, row by row): the 2x2 outputs, row by
    row."""
    def line(x0, x1, x2, x3):
        return [b.fadd(b.fadd(x0, x1), x2), b.fsub(b.fsub(x1, x2), x3)]
    columns = [line(*(m[i * PATCH + j] for i in range(PATCH))) for j in range(PATCH)]
    return [value for i in range(TILE) for value in line(*(columns[j][i] for j in range(PATCH)))]


def _products_function(module, size, blocks, pixels):
    """A function ``void(ptr w, ptr patches, ptr products, i64 first_block, i64 position,
    i64 t, i64 in_blocks, i64 chunk, i64 band_blocks)`` storing in ``products`` M at
    ``position`` of the ``blocks`` output blocks from ``first_block`` for the register tile
    of ``pixels`` of the chunk's tiles from ``t`` (a chunk of ``chunk`` tiles whose patches
    of ``in_blocks`` input blocks of ``size`` channels are in ``patches``, whose products
    are kept for bands of ``band_blocks`` output blocks): sums over the input blocks of each
    input channel broadcast times its weights' vector."""
    function, b = irutil.helper_function(module, "winograd.products", 3, 6)
    w, patches, products, first_block, position, t, in_blocks, chunk, band_blocks = \
        function.args
    vector = irutil.vector_of(irutil.compute_type("float32"), size)
    zero = irutil.const(vector, 0)
    with irutil.accumulating_loop(b, 0, in_blocks, [zero] * (blocks * pixels),
                                  name="cb") as loop:
        block = loop.index
        slot = b.add(b.mul(b.add(b.mul(position, in_blocks), block), chunk), t)
        inputs = [_vector_at(b, patches, b.add(slot, irutil.i64(p)), size)
                  for p in range(pixels)]
        weights = [b.mul(b.add(b.mul(b.add(b.mul(b.add(first_block, irutil.i64(r)),
                                                 irutil.i64(POSITIONS)), position),
                                     in_blocks), block),
                         irutil.i64(size * size)) for r in range(blocks)]
        accs = loop.values
        for c in range(size):
            accs = channel_products(b, w, weights, inputs, c, size, accs)
        loop.set_next(accs)
    for r in range(blocks):
        slot = b.add(b.mul(b.add(b.mul(position, band_blocks), irutil.i64(r)), chunk), t)
        for p in range(pixels):
            irutil.store(b, loop.results[r * pixels + p],
                         _vector_at(b, products, b.add(slot, irutil.i64(p)), size), "float32")
    b.ret_void()
    return function
