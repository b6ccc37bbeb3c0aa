"""Matrix multiplication: C = op(A) x op(B) over broadcast batch dimensions, and ``FusedMatMul``
(the same with an element-wise epilogue applied to each result before it is stored).

C is computed in register tiles of up to ``rows`` x ``vectors`` SIMD vectors (6 x 2 with 16
vector registers, 8 x 2 with 32: ``MAX_TILE_ROWS``): for each k, the tile's vectors of B's
row k are loaded once and multiplied by A[i, k] splatted over the lanes for every row i of the
tile, so each load feeds ``rows`` fused multiply-adds; the accumulators stay in registers
for a block of k (each summing ``K_BLOCK`` products), whose sums are added to the tile's
running sums (so rounding errors grow with the block, not with k), and the epilogue runs on
the totals. Tiles with few rows (a vector times a matrix) split k over several accumulator
sets so the multiply-adds do not wait on each other.

B is read in panels of ``vectors x lanes`` columns, stored k-major (a panel's row k is one
contiguous run), so the tile's loads are sequential and the panel stays in cache while every
row of A passes over it. A constant B is packed into panels once, at compile time; a variable B
is packed at run time, a group of panels at a time into a buffer on the stack, when enough rows
will use it, and is otherwise read in place. Panels past B's last column are zero-padded and
only the real columns are stored.

The work (batch x row blocks x panel blocks) is split into tasks that the worker pool runs on
all threads when the product is large enough (:meth:`EmitContext.parallel`).
"""

import math
from typing import NamedTuple

import llvmlite.ir as ir
import numpy as np

from myelin.codegen.llvm import irutil, loops, mathlib
from myelin.codegen.llvm.kernels import fused
from myelin.codegen.llvm.kernels.base import PARALLEL_WORK, TASKS_PER_THREAD, Kernel
from myelin.codegen.llvm.kernels.conv import add, ival
from myelin.flow import dtypes

VECTORS = 2                   # vectors per tile row
ACCUMULATORS = 8              # independent multiply-add chains a tile keeps at least
PANEL_GROUP_BYTES = 192 << 10  # the panels a group of tile rows reuses: about half of L2
PACK_BUFFER_BYTES = 256 << 10  # the most run-time packing may put on a thread's stack
PACK_MIN_TILES = 4            # a variable B is packed when a task has this many tile rows
# A product reading more of B than this is split over threads however few its rows: with one
# row it streams B, and on two Zen 4 threads x[1, 256] W[256, 512] (512 KB) took 3.6 us for
# one thread's 5.1, W[256, 256] 2.2 for 2.6; W[128, 256] as long, smaller ones longer.
SPLIT_BYTES = 192 << 10
SPLIT_MIN_K = 32              # shorter products keep one accumulator set
PACK_WORK = 32                # multiply-adds that packing one vector of B costs (gathered, Zen 5)
K_BLOCK = 256                 # products an accumulator sums before adding to the running sums
UNROLL = 4                    # k steps per iteration of a tile of one accumulator set
# Rows of a register tile at most. With 32 vector registers, 14 rows of 2 vectors fit, but on
# Zen 4 tiles of 6 to 10 rows ran 7-15% faster (one thread; 10-15% on two), 12 or 14 rows
# slower, and 14 rows of A whose row stride is a multiple of 4 KiB (k = 1024, 3072) share
# one set of the 8-way L1 cache (BERT's second feed-forward product: 69 -> 104 GFLOP/s).
MAX_TILE_ROWS = 8


def _madd(b, x, y, acc):
    if irutil.is_float(acc.type):
        return mathlib.fmuladd(b, x, y, acc)
    return b.add(b.mul(x, y), acc)


def _add(b, x, y):
    return b.fadd(x, y) if irutil.is_float(x.type) else b.add(x, y)


def _ceil(x, y):
    return -(-x // y)


def tile_rows(target, m, vectors=VECTORS):
    """Rows of a register tile: as many as the vector registers hold besides B's vectors and
    the splatted A element, up to ``MAX_TILE_ROWS``."""
    return max(1, min(m, MAX_TILE_ROWS, (target.vector_registers - vectors - 1) // vectors))


def _tiling(target, m, n, lanes, choice):
    """(vectors, rows) of the register tile for ``m`` rows and ``n`` columns of ``lanes`` a
    vector: ``choice``'s, else the default (no wider than the columns: the panels of a
    narrow B are not read padded to the default width)."""
    vectors = choice.get("vectors", min(VECTORS, _ceil(n, lanes)))
    return vectors, min(m, choice.get("rows") or tile_rows(target, m, vectors))


def choices(target, m, n, dtype):
    """The tilings worth timing for a product with ``m`` rows and ``n`` columns of ``dtype``
    (the type of C's panels: int32 for the int8 products; see :class:`Plan`): the default
    first, then tiles of other widths and heights and other panel group sizes."""
    vectors, rows = _tiling(target, m, n, loops.lanes(target, dtype), {})
    default = {"vectors": vectors, "rows": rows}
    options = [default]
    for vectors in range(1, 5 if target.vector_registers >= 32 else 4):
        option = {"vectors": vectors, "rows": tile_rows(target, m, vectors)}
        if option != default:
            options.append(option)
    if default["rows"] > 2:
        options.append(dict(default, rows=default["rows"] - 2))
    options += [dict(default, group_bytes=PANEL_GROUP_BYTES // 2),
                dict(default, group_bytes=PANEL_GROUP_BYTES * 2)]
    return options


def _rows_fold(step):
    """True if the batch dimensions of a product can be folded into A's rows: B and every
    epilogue input are the same for each batch entry, and A, C and every epilogue input that
    varies by row are laid out batch entry after batch entry (one taller A and C)."""
    a, b, c = step.inputs[0], step.inputs[1], step.outputs[0]
    batch = c.shape[:-2]
    if (not batch or step.attrs.get_bool("transpose_a", False) or a.shape[:-2] != batch
            or any(d != 1 for d in b.shape[:-2])):
        return False
    rows = loops.contiguous_strides(c.shape)[:-1]
    for x in step.inputs[2:]:
        strides = loops.broadcast_strides(x.shape, c.shape)[:-1]
        if any(strides) and strides != rows:
            return False
    return True


def _rows_and_batch(step):
    """(rows, batch dimensions) of the product a plan computes for ``step``: C's, its batch
    folded into the rows where :func:`_rows_fold` allows."""
    c = step.outputs[0]
    if _rows_fold(step):
        return c.shape[-2] * math.prod(c.shape[:-2]), ()
    return c.shape[-2], c.shape[:-2]


class Plan:
    """The shapes, tile sizes, packing and task split of C[m, n] = A[m, k] x B[k, n] over
    ``batch``. ``packing`` is "compile" (B constant, packed into panels by the kernel), "run"
    (a group of panels packed on the stack by each task) or "none" (B read in place);
    ``split_rows`` says to split tasks by rows first (else by panels, which suits a B whose
    packing is the costly part, as in a convolution). ``choice`` may set the tile's
    ``vectors`` and ``rows`` and the ``group_bytes`` of panels a group of tile rows passes
    over (see :func:`choices`); the defaults fit the target's registers and caches.
    ``b_dtype`` is the type of B's panels packed at compile time (default ``dtype``; a
    narrower float for weights stored narrower, converted as the tiles read them).
    ``product`` names the multiply-add of the tile functions, ``madd(builder, a, b, acc)``
    with ``a`` an element of A splatted and ``b`` a vector of B's panel: a subclass whose
    elements are groups of narrower values (:mod:`.matmul_int8`) sets its own."""

    product = "madd"
    madd = staticmethod(_madd)

    def __init__(self, ctx, m, n, k, batch, dtype, packing, trans_a=False, trans_b=False,
                 epilogue=None, split_rows=True, choice=None, b_dtype=None):
        choice = choice or {}
        self.m, self.n, self.k, self.batch, self.dtype = m, n, k, tuple(batch), dtype
        self.b_dtype = b_dtype or dtype
        self.trans_a, self.trans_b, self.epilogue = trans_a, trans_b, epilogue
        self.batches = math.prod(self.batch)
        self.itemsize = dtypes.itemsize(dtype)
        self.lanes = loops.lanes(ctx.target, dtype)
        self.vectors, self.rows = _tiling(ctx.target, m, n, self.lanes, choice)
        self.width = self.lanes * self.vectors                      # columns per panel
        self.panels = _ceil(n, self.width)
        self.full_panels = n // self.width
        self.packing = packing
        flops = 2 * m * n * k * self.batches
        b_bytes = k * n * self.batches * dtypes.itemsize(self.b_dtype)
        # worth a function call (and threads)
        self.large = flops >= PARALLEL_WORK or b_bytes > SPLIT_BYTES
        self._split(ctx.threads, flops, split_rows)
        panel_bytes = k * self.width * dtypes.itemsize(self.b_dtype)
        limit = PACK_BUFFER_BYTES if packing == "run" else PANEL_GROUP_BYTES
        limit = min(limit, choice.get("group_bytes", limit))
        self.group = max(1, min(self.block_panels, limit // max(panel_bytes, 1)))

    @classmethod
    def for_matmul(cls, ctx, step):
        a, b, c = step.inputs[0], step.inputs[1], step.outputs[0]
        trans_a = step.attrs.get_bool("transpose_a", False)
        trans_b = step.attrs.get_bool("transpose_b", False)
        (m, batch), n = _rows_and_batch(step), c.shape[-1]
        k = a.shape[-2] if trans_a else a.shape[-1]
        lanes = loops.lanes(ctx.target, c.dtype)
        vectors, rows = _tiling(ctx.target, m, n, lanes, step.choice)
        panel_bytes = k * vectors * lanes * c.itemsize
        b_dtype = None
        if b.constant_data() is not None:
            packing = "compile"
            if c.dtype == "float32":        # (the attribute is for float32 products)
                b_dtype = step.attrs.get_str("weights") or None
        elif trans_b or (panel_bytes <= PACK_BUFFER_BYTES and m >= PACK_MIN_TILES * rows):
            packing = "run"          # B transposed is always packed: its columns are rows
        else:
            packing = "none"
        epilogue = fused.epilogue(step) if step.type == "FusedMatMul" else None
        # Tasks split the larger operand, so each task reads the smaller one whole.
        return cls(ctx, m, n, k, batch, c.dtype, packing, trans_a, trans_b, epilogue,
                   split_rows=m > n, choice=step.choice, b_dtype=b_dtype)

    def _split(self, threads, flops, split_rows):
        """Row blocks (multiples of ``rows``) and panel blocks per batch entry for the tasks."""
        tiles = _ceil(self.m, self.rows)
        row_blocks = panel_blocks = 1
        if threads > 1 and self.large:
            wanted = _ceil(threads * TASKS_PER_THREAD, self.batches)   # tasks per batch entry
            if split_rows:
                row_blocks = min(tiles, wanted)
                panel_blocks = min(self.panels, _ceil(wanted, row_blocks))
            else:
                panel_blocks = min(self.panels, wanted)
                row_blocks = self._row_blocks(threads, tiles, panel_blocks, wanted)
        self.block_rows = _ceil(tiles, row_blocks) * self.rows
        self.row_blocks = _ceil(self.m, self.block_rows)
        self.block_panels = _ceil(self.panels, panel_blocks)
        self.panel_blocks = _ceil(self.panels, self.block_panels)
        self.tasks = self.batches * self.row_blocks * self.panel_blocks

    def _row_blocks(self, threads, tiles, panel_blocks, wanted):
        """Row blocks for tasks split by panels first. Where B is packed at run time, each
        row block packs its panels again, so there are only as many as pay for themselves:
        the fewest that minimize the busiest thread's work, a task costing its packing
        (``PACK_WORK`` per packed vector) and its rows' multiply-adds."""
        if self.packing != "run":
            return min(tiles, _ceil(wanted, panel_blocks))

        def busiest(blocks):
            rows = _ceil(tiles, blocks) * self.rows
            return _ceil(panel_blocks * blocks, threads) * (PACK_WORK + rows)

        return min(range(1, min(tiles, wanted) + 1), key=busiest)

    def a_strides(self):
        """Element strides of A along (row i, k)."""
        return (1, self.m) if self.trans_a else (self.k, 1)


class MatMulKernel(Kernel):
    """``MatMul`` with attributes ``transpose_a``/``transpose_b`` and batch broadcasting, and
    ``FusedMatMul`` (the same with an epilogue)."""

    name = "MatMul"
    shares_code = True

    def supports(self, step, target):
        a, b = step.inputs[:2]
        if not (len(a.shape) >= 2 and len(b.shape) >= 2
                and a.dtype == b.dtype == step.outputs[0].dtype
                and a.dtype in ("float32", "float64", "float16", "bfloat16", "int32", "int64")):
            return False
        if step.type == "FusedMatMul":
            return fused.epilogue(step) is not None
        return step.type == "MatMul" and len(step.inputs) == 2

    def kernel_name(self, step):
        return step.type

    def variant(self, step, target):
        layout = "T" if step.attrs.get_bool("transpose_b", False) else "N"
        return f"{target.isa()}{layout}"

    def inplace(self, step):
        # An epilogue reads each extra input element just before it writes the same position.
        c = step.outputs[0]
        return [i for i, t in enumerate(step.inputs) if i >= 2
                and t.shape == c.shape and t.itemsize == c.itemsize]

    def choices(self, step, target):
        c = step.outputs[0]
        return choices(target, _rows_and_batch(step)[0], c.shape[-1], c.dtype)

    def flops(self, step):
        a, c = step.inputs[0], step.outputs[0]
        k = a.shape[-2] if step.attrs.get_bool("transpose_a", False) else a.shape[-1]
        parts = len(fused.epilogue(step).parts) if step.type == "FusedMatMul" else 0
        return (2 * k + parts) * c.elements

    def emit(self, ctx, step):
        plan = Plan.for_matmul(ctx, step)
        packed = _packed(step, plan)
        ctx.parallel(f"{step.type}.{step.name}", step.inputs + step.outputs, plan.tasks,
                     lambda sub, index: _MatMulTask(sub, step, plan, packed, index).emit(),
                     outline=plan.large)

    def kept(self, ctx, step):
        packed = _packed(step, Plan.for_matmul(ctx, step))
        return [] if packed is None else [packed]

    def packed_inputs(self, step):
        # (a constant B is packed into panels at compile time: see Plan.for_matmul)
        return (1,) if step.inputs[1].constant_data() is not None else ()


def _packed(step, plan):
    """B of a MatMul ``step`` packed at compile time for ``plan``; None unless it is."""
    if plan.packing != "compile":
        return None
    b = step.inputs[1]
    data = np.asarray(b.constant_data()).reshape(b.shape)
    return pack_constant(np.swapaxes(data, -1, -2) if plan.trans_b else data, plan)


def pack_constant(data, plan):
    """The constant matrices ``data`` [batch..., k, n] in panels, [batch..., panel, k, width] of
    ``plan``'s ``b_dtype``, zero-padded past column n (bfloat16 panels as their bits,
    uint16: NumPy's own type, which the compile cache and saved networks store)."""
    data = np.asarray(data)
    *batch, k, n = data.shape
    packed = np.zeros((*batch, plan.panels, k, plan.width), dtypes.to_numpy(plan.b_dtype))
    full, width = n // plan.width, plan.width      # (one pass: converted as it is copied)
    packed[..., :full, :, :] = np.swapaxes(
        data[..., :full * width].reshape(*batch, k, full, width), -2, -3)
    if full < plan.panels:
        packed[..., full, :, :n - full * width] = data[..., full * width:]
    if plan.b_dtype == "bfloat16":
        _interleave_pairs(packed, plan.lanes)
        return packed.view(np.uint16)
    return packed


def _interleave_pairs(packed, lanes):
    """Interleave the bfloat16 panel rows of ``packed`` (in place) a pair of vectors at a
    time, so that a tile reads a pair as one vector of 32-bit words whose low halves are the
    first vector and high halves the second (see :func:`_panel_vectors`)."""
    pairs = packed.shape[-1] // (2 * lanes)
    head = packed[..., :pairs * 2 * lanes]
    shape = head.shape
    head[...] = np.swapaxes(head.reshape(*shape[:-1], pairs, 2, lanes), -1, -2).reshape(shape)


def _panel_vectors(b, row, shape):
    """The ``shape.vectors`` vectors of a panel's row at ``row`` in the compute type. A
    bfloat16 panel packed at compile time holds its vectors by pairs
    (:func:`_interleave_pairs`): one load of 32-bit words gives both, the first shifted up 16
    bits, the second with its low 16 cleared (a bfloat16 is the top half of a float32); a
    last vector without a pair is read alone."""
    dtype, lanes, vectors = shape.b_dtype, shape.lanes, shape.vectors
    itemsize = dtypes.itemsize(dtype)
    loaded = []
    pairs = vectors // 2 if shape.paired else 0
    for pair in range(pairs):
        words_type = ir.VectorType(irutil.I32, lanes)
        words = b.load(irutil.element_ptr(b, row, dtype, 2 * pair * lanes), typ=words_type,
                       align=itemsize)
        floats = ir.VectorType(irutil.F32, lanes)
        loaded += [b.bitcast(b.shl(words, irutil.const(words_type, 16)), floats),
                   b.bitcast(b.and_(words, irutil.const(words_type, -65536)), floats)]
    for v in range(2 * pairs, vectors):
        loaded.append(irutil.load(b, irutil.element_ptr(b, row, dtype, v * lanes), dtype,
                                  lanes, itemsize))
    return loaded


class Task:
    """The code of one task of a product: a batch entry, a block of rows and a block of
    panels. Subclasses say where the batch entry's A, B and C are (``pointers``) and may pack
    B's panels their own way (``pack_panel``), pack A's rows their own way (``pack_a``,
    ``a_row``, with the plan's ``a_strides``) and store C their own way (``store``)."""

    def __init__(self, ctx, plan, index):
        self.ctx, self.plan, self.b = ctx, plan, ctx.builder
        self.index = index
        self.a = self.bp = self.c = None
        self.extras = []        # (pointer, (row stride, column stride)) of epilogue inputs
        self.bias = None        # a pointer to a value per row added before the epilogue
        self.b_stride = plan.n  # elements between rows of B (not transposed) where packed

    def pointers(self, batch):
        """Set ``a``, ``bp`` (B or its packed panels), ``c`` and ``extras`` for ``batch``."""
        raise NotImplementedError

    def pack_a(self, rows):
        """Pack A's rows ``rows`` (start, end) before the task's tiles use them, where a
        subclass packs A (see ``a_row``); A is read in place by default."""

    def emit(self, rows=None):
        """The task's code. ``rows`` (start, end), if given, are the rows of C to compute
        instead of the task's row block: start a multiple of the tile rows, end too unless it
        is m."""
        b, plan = self.b, self.plan
        per_batch = plan.row_blocks * plan.panel_blocks
        batch, block = self.index, irutil.i64(0)
        if per_batch > 1:
            batch = b.udiv(self.index, irutil.i64(per_batch))
            block = b.urem(self.index, irutil.i64(per_batch))
        self.pointers(batch)
        # Bounds are ints where there is one block, so small products get simple loops.
        if rows is None:
            rows = (0, plan.m)
            if plan.row_blocks > 1:
                row_block = b.udiv(block, irutil.i64(plan.panel_blocks))
                start = b.mul(row_block, irutil.i64(plan.block_rows))
                rows = (start, self._min(b.add(start, irutil.i64(plan.block_rows)), plan.m))
        self.pack_a(rows)
        panel_start, panel_end = 0, plan.panels
        if plan.panel_blocks > 1:
            panel_start = b.mul(b.urem(block, irutil.i64(plan.panel_blocks)),
                                irutil.i64(plan.block_panels))
            panel_end = self._min(b.add(panel_start, irutil.i64(plan.block_panels)),
                                  plan.panels)
        buffer = None
        if plan.packing == "run":
            buffer = irutil.stack_array(b, irutil.storage_type(plan.dtype),
                                        plan.group * plan.k * plan.width)
        if plan.panel_blocks == 1 and plan.group >= plan.panels:
            self._group(Panels(0, plan.panels, buffer), rows)
            return
        with irutil.for_range(b, panel_start, panel_end, plan.group, name="pg") as group:
            group_end = self._min(b.add(group, irutil.i64(plan.group)), panel_end)
            self._group(Panels(group, group_end, buffer), rows)

    def _group(self, panels, rows):
        if panels.buffer is not None:
            self.pack_group(panels)
        self._rows(rows, panels)

    def _min(self, value, bound):
        if isinstance(value, int) and isinstance(bound, int):
            return min(value, bound)
        b = self.b
        value, bound = ival(value), ival(bound)
        return b.select(b.icmp_signed("<", value, bound), value, bound)

    def _is_last(self, group_end):
        """An i1 (or a bool) saying whether the panels end with the last, partial one."""
        if isinstance(group_end, int):
            return group_end == self.plan.panels
        return self.b.icmp_signed("==", group_end, irutil.i64(self.plan.panels))

    def _when(self, condition, emit):
        if isinstance(condition, bool):
            if condition:
                emit()
            return
        with self.b.if_then(condition):
            emit()

    # Packing a group of panels of a variable B into the stack buffer.
    def pack_group(self, panels):
        """Pack ``panels`` (B's columns of panels [start, end)) into their buffer."""
        b, plan = self.b, self.plan
        full_end = self._min(panels.end, plan.full_panels)
        with irutil.for_range(b, panels.start, full_end, name="pp") as panel:
            self.pack_panel(panels, panel, plan.width)
        if plan.full_panels < plan.panels:
            last = irutil.i64(plan.panels - 1)
            self._when(self._is_last(panels.end), lambda: self.pack_panel(
                panels, last, plan.n - plan.full_panels * plan.width))

    def packed_row(self, panels, panel, row):
        """A pointer to row ``row`` of ``panel`` in the buffer."""
        b, plan = self.b, self.plan
        index = b.add(b.mul(b.sub(panel, ival(panels.start)), irutil.i64(plan.k)), ival(row))
        return irutil.element_ptr(b, panels.buffer, plan.dtype,
                                  b.mul(index, irutil.i64(plan.width)))

    def pack_panel(self, panels, panel, columns):
        """Copy B[:, panel columns] into the buffer (k-major), zeros past ``columns``. Where
        B is row-major, each packed row is copied as whole vectors (a partial vector built
        from single elements). Where B is transposed, a panel's columns are rows of the stored
        matrix: full panels are transposed in blocks of ``lanes`` x ``lanes`` in registers."""
        plan = self.plan
        if not plan.trans_b:
            with irutil.for_range(self.b, 0, plan.k, name="pk") as kk:
                self._pack_row(panels, panel, kk, columns)
            return
        blocked = plan.k - plan.k % plan.lanes if columns == plan.width else 0
        if blocked:
            with irutil.for_range(self.b, 0, blocked, plan.lanes, name="pk") as kk:
                self._pack_transposed_block(panels, panel, kk)
        if blocked < plan.k:
            with irutil.for_range(self.b, blocked, plan.k, name="pr") as kk:
                self._pack_row(panels, panel, kk, columns)

    def _pack_row(self, panels, panel, kk, columns):
        """Packed row ``kk`` of ``panel``: B[kk, the panel's first ``columns`` columns], then
        zeros, stored as whole vectors."""
        b, plan = self.b, self.plan
        dtype, lanes = plan.dtype, plan.lanes
        first = b.mul(panel, irutil.i64(plan.width))
        # B[kk, j] is at kk * n + j, or j * k + kk when B is transposed.
        j_stride, k_stride = (plan.k, 1) if plan.trans_b else (1, self.b_stride)
        source = irutil.element_ptr(b, self.bp, dtype, b.add(b.mul(first, irutil.i64(j_stride)),
                                                             b.mul(kk, irutil.i64(k_stride))))
        row = self.packed_row(panels, panel, kk)
        vector = irutil.vector_of(irutil.compute_type(dtype), lanes)
        for v in range(plan.vectors):
            valid = max(0, min(lanes, columns - v * lanes))
            if valid == lanes and j_stride == 1:
                value = irutil.load(b, irutil.element_ptr(b, source, dtype, v * lanes), dtype,
                                    lanes, plan.itemsize)
            else:
                value = irutil.const(vector, 0)
                for lane in range(valid):
                    at = irutil.element_ptr(b, source, dtype, (v * lanes + lane) * j_stride)
                    value = b.insert_element(value, irutil.load(b, at, dtype, 1, plan.itemsize),
                                             irutil.i64(lane))
            irutil.store(b, value, irutil.element_ptr(b, row, dtype, v * lanes), dtype,
                         plan.itemsize)

    def _pack_transposed_block(self, panels, panel, kk):
        """Packed rows kk .. kk + lanes of a full panel of a transposed B: each vector of the
        panel's row is a ``lanes`` x ``lanes`` block of the stored matrix, transposed."""
        b, plan = self.b, self.plan
        dtype, lanes = plan.dtype, plan.lanes
        first = b.mul(panel, irutil.i64(plan.width))
        for v in range(plan.vectors):
            rows = b.add(first, irutil.i64(v * lanes))
            block = [irutil.load(b, irutil.element_ptr(
                b, self.bp, dtype, b.add(b.mul(b.add(rows, irutil.i64(r)), irutil.i64(plan.k)),
                                         kk)), dtype, lanes, plan.itemsize)
                for r in range(lanes)]
            for q, value in enumerate(irutil.transpose_block(b, block)):
                row = self.packed_row(panels, panel, b.add(kk, irutil.i64(q)))
                irutil.store(b, value, irutil.element_ptr(b, row, dtype, v * lanes), dtype,
                             plan.itemsize)

    # Tiles.
    def _rows(self, rows, panels):
        """Every tile row of ``rows`` (start, end) over the panels."""
        b, plan = self.b, self.plan
        row_start, row_end = rows
        if isinstance(row_end, int):
            full_end = row_end - row_end % plan.rows
            has_remainder = full_end < row_end
        else:
            count = b.sub(row_end, row_start)
            full_end = b.add(row_start, b.mul(b.udiv(count, irutil.i64(plan.rows)),
                                              irutil.i64(plan.rows)))
            has_remainder = b.icmp_signed("<", full_end, row_end)
        with irutil.for_range(b, row_start, full_end, plan.rows, name="i") as i:
            self._panels(i, plan.rows, panels)
        remainder = plan.m % plan.rows
        if remainder:
            # Only the last row block has a remainder, and it is always m % rows rows.
            self._when(has_remainder,
                       lambda: self._panels(ival(full_end), remainder, panels))

    def _panels(self, i, rows, panels):
        b, plan = self.b, self.plan
        full_end = self._min(panels.end, plan.full_panels)
        with irutil.for_range(b, panels.start, full_end, name="j") as panel:
            self._tile(i, rows, panel, panels, plan.width)
        if plan.full_panels < plan.panels:
            last = irutil.i64(plan.panels - 1)
            columns = plan.n - plan.full_panels * plan.width
            if plan.packing == "none":
                self._when(self._is_last(panels.end),
                           lambda: self._unpacked_tail(i, rows, last, columns))
            else:
                self._when(self._is_last(panels.end),
                           lambda: self._tile(i, rows, last, panels, columns))

    def _panel_source(self, panel, panels):
        """(pointer to the panel's row 0, elements between its rows)."""
        b, plan = self.b, self.plan
        if plan.packing == "run":
            return self.packed_row(panels, panel, 0), plan.width
        if plan.packing == "compile":
            at = b.mul(panel, irutil.i64(plan.k * plan.width))
            return irutil.element_ptr(b, self.bp, plan.b_dtype, at), plan.width
        at = b.mul(panel, irutil.i64(plan.width))
        return irutil.element_ptr(b, self.bp, plan.dtype, at), plan.n

    def _tile(self, i, rows, panel, panels, columns):
        source, stride = self._panel_source(panel, panels)
        column = self.b.mul(panel, irutil.i64(self.plan.width))
        self._product(i, rows, column, source, stride, self.plan.vectors, self.plan.lanes,
                      columns)

    def _unpacked_tail(self, i, rows, panel, columns):
        """The last, partial panel of a B read in place: whole vectors, then single columns."""
        plan, b = self.plan, self.b
        vectors = columns // plan.lanes
        first = plan.full_panels * plan.width
        if vectors:
            source = irutil.element_ptr(b, self.bp, plan.dtype, irutil.i64(first))
            self._product(i, rows, irutil.i64(first), source, plan.n, vectors, plan.lanes,
                          vectors * plan.lanes)
        rest = columns - vectors * plan.lanes
        if rest:
            start = first + vectors * plan.lanes
            with irutil.for_range(b, start, plan.n, name="js") as column:
                source = irutil.element_ptr(b, self.bp, plan.dtype, column)
                self._product(i, rows, column, source, plan.n, 1, 1, 1)

    def _product(self, i, rows, column, source, stride, vectors, lanes, columns):
        """C[i:i+rows, column:column+columns] = A rows x the B panel at ``source`` (``vectors``
        vectors of ``lanes`` per row, ``stride`` elements apart), through the epilogue."""
        b, plan = self.b, self.plan
        dtype = plan.dtype
        a = self.a_row(i)
        vector = irutil.vector_of(irutil.compute_type(dtype), lanes)
        tile = irutil.stack_array(b, vector, rows * vectors)
        shape = _TileShape.of(plan, rows, vectors, lanes, stride)
        kernel = self.ctx.function(("matmul tile",) + shape,
                                   lambda module: _tile_function(module, shape, plan.madd))
        b.call(kernel, [a, source, tile, irutil.i64(plan.k), irutil.i64(plan.a_strides()[0])])

        loop = self.store_loop(vector)
        if loop == "vectors" and columns >= vectors * lanes:
            # A costly epilogue (a GELU's erf) inlined once, in a loop over the tile's vectors:
            # its constants are made once per tile, not in a call for each vector.
            with irutil.for_range(b, 0, rows * vectors, name="t") as position:
                row = b.add(ival(i), b.udiv(position, irutil.i64(vectors)))
                at = b.add(column, b.mul(b.urem(position, irutil.i64(vectors)),
                                         irutil.i64(lanes)))
                value = b.load(b.gep(tile, [position], source_etype=vector), typ=vector)
                self.store(value, row, at, lanes, inline=True)
            return
        if loop == "rows":
            # The store inlined once per vector of a row, in a loop over the tile's rows.
            with irutil.for_range(b, 0, rows, name="tr") as r:
                self._store_row(tile, vector, lanes, b.add(ival(i), r),
                                b.mul(r, irutil.i64(vectors)), column, columns, inline=True)
            return
        for r in range(rows):
            self._store_row(tile, vector, lanes, b.add(ival(i), irutil.i64(r)), r * vectors,
                            column, columns)

    def _store_row(self, tile, vector, lanes, row, first, column, columns, inline=False):
        """Store C's ``row`` from the ``tile``'s values of type ``vector`` (``lanes`` each)
        from the ``first`` (an int or an i64) on, its columns from ``column`` on
        (``columns`` of them)."""
        b = self.b
        for v in range(-(-columns // lanes)):
            at = b.add(column, irutil.i64(v * lanes))
            value = b.load(b.gep(tile, [ival(add(b, first, v))], source_etype=vector),
                           typ=vector)
            self.store(value, row, at, min(lanes, columns - v * lanes), inline)

    def store_loop(self, vector):
        """How a tile's vectors (of type ``vector``) are stored where storing one takes much
        code: "vectors" (a loop over them, for a costly epilogue, see
        :meth:`~.fused.TypedRecipe.function`), "rows" (a loop over the tile's rows, each row's
        vectors stored one after the other), or None (all one after the other)."""
        plan = self.plan
        if plan.epilogue is not None and plan.epilogue.costly(
                self.b.module, (vector,) * (1 + len(self.extras))):
            return "vectors"
        return None

    def a_row(self, i):
        """A pointer to A's row ``i``, the first of a tile."""
        b = self.b
        return irutil.element_ptr(b, self.a, self.plan.dtype,
                                  b.mul(ival(i), irutil.i64(self.plan.a_strides()[0])))

    def store(self, value, row, column, valid, inline=False):
        """Store the first ``valid`` lanes of ``value`` at C[row, column:column + valid],
        through the epilogue if any (the lanes past them lie past C's columns: the epilogue's
        inputs there are not read, nor C written), inlined if ``inline``."""
        b, plan = self.b, self.plan
        dtype = plan.dtype
        lanes = irutil.width_of(value)
        if self.bias is not None:
            term = irutil.load(b, irutil.element_ptr(b, self.bias, dtype, row), dtype, 1,
                               plan.itemsize)
            value = _add(b, value, irutil.splat(b, term, irutil.width_of(value)))
        if plan.epilogue is not None:
            extras = []
            for ptr, (row_stride, column_stride) in self.extras:
                # Broadcast strides of a dense tensor are 0 or 1 along the columns.
                index = b.add(b.mul(row, irutil.i64(row_stride)),
                              b.mul(column, irutil.i64(column_stride)))
                at = irutil.element_ptr(b, ptr, dtype, index)
                if column_stride == 0:
                    extras.append(irutil.splat(b, irutil.load(b, at, dtype, 1, plan.itemsize),
                                               lanes))
                elif valid < lanes:
                    extras.append(irutil.load_lanes(b, at, dtype, lanes, valid))
                else:
                    extras.append(irutil.load(b, at, dtype, lanes, plan.itemsize))
            value = plan.epilogue.apply(b, [value] + extras, inline)
        index = b.add(b.mul(row, irutil.i64(plan.n)), column)
        at = irutil.element_ptr(b, self.c, dtype, index)
        if valid < lanes:
            irutil.store_lanes(b, value, at, dtype, valid)
        else:
            irutil.store(b, value, at, dtype, plan.itemsize)


class Panels(NamedTuple):
    """A group of panels [start, end) of a task, and the buffer they are packed into (None
    when B is packed at compile time or read in place)."""

    start: object
    end: object
    buffer: object


class _TileShape(NamedTuple):
    """What a tile function's code depends on; k and A's row stride are its arguments, so
    that products differing only there (the layers of a network) share one function."""

    dtype: object
    rows: int
    vectors: int
    lanes: int
    split: int          # accumulator sets the k loop rotates through
    blocked: bool       # float sums whose k may pass one block (K_BLOCK * split): added
    #                     block by block (integer sums are exact)
    k_stride: int       # elements between A[i, k] and A[i, k + 1]
    stride: int         # elements between the panel's rows k and k + 1
    itemsize: int
    product: str        # the multiply-add (see Plan.product)
    b_dtype: object     # the panel's type (see Plan.b_dtype)
    paired: bool        # bfloat16 vectors interleaved by pairs (see _interleave_pairs)
    unroll: int         # k steps of each accumulator set per iteration of the k loop

    @classmethod
    def of(cls, plan, rows, vectors, lanes, stride):
        tile = rows * vectors
        split = max(1, min(4, ACCUMULATORS // tile)) if plan.k >= SPLIT_MIN_K else 1
        unroll = UNROLL if split == 1 and plan.k >= SPLIT_MIN_K else 1
        blocked = plan.k > K_BLOCK * split and plan.dtype in dtypes.FLOAT_TYPES
        paired = plan.packing == "compile" and plan.b_dtype == "bfloat16"
        return cls(plan.dtype, rows, vectors, lanes, split, blocked,
                   plan.a_strides()[1], stride, plan.itemsize, plan.product, plan.b_dtype,
                   paired, unroll)


def _tile_function(module, shape, madd):
    """A function ``void(ptr a, ptr panel, ptr out, i64 k, i64 a_row_stride)`` storing in
    ``out`` the ``rows x vectors`` sums of A's rows from ``a`` times the panel over k.

    The k loop is a function of its own so that LLVM allocates its registers alone: inline in
    a large task, it may spill accumulators inside the loop."""
    dtype, rows, vectors, lanes, split = shape[:5]
    function, b = irutil.helper_function(module, "matmul.tile", 3, 2)
    a, source, out, k, row_stride = function.args
    acc_type = irutil.vector_of(irutil.compute_type(dtype), lanes)
    tile = rows * vectors
    a_rows = [irutil.element_ptr(b, a, dtype, b.mul(row_stride, irutil.i64(r)))
              for r in range(rows)]

    def step(kk, accumulators):
        b_row = irutil.element_ptr(b, source, shape.b_dtype,
                                   b.mul(kk, irutil.i64(shape.stride)))
        loaded = _panel_vectors(b, b_row, shape)
        out = []
        for r in range(rows):
            at = irutil.element_ptr(b, a_rows[r], dtype, b.mul(kk, irutil.i64(shape.k_stride)))
            scalar = irutil.splat(b, irutil.load(b, at, dtype, 1, shape.itemsize), lanes)
            out += [madd(b, scalar, loaded[v], accumulators[r * vectors + v])
                    for v in range(vectors)]
        return out

    def sums_over(start, end):
        """The tile's sums over k in [start, end) (end - start a multiple of ``per_loop``):
        the split sets summed at the end."""
        zero = irutil.const(acc_type, 0)
        with irutil.accumulating_loop(b, start, end, [zero] * (tile * split), per_loop,
                                      name="k") as loop:
            values = list(loop.values)
            for offset in range(per_loop):      # (set s sums k = s, s + split, ... in order)
                s = offset % split
                kk = b.add(loop.index, irutil.i64(offset)) if offset else loop.index
                values[s * tile:(s + 1) * tile] = step(kk, values[s * tile:(s + 1) * tile])
            loop.set_next(values)
        sets = [loop.results[s * tile:(s + 1) * tile] for s in range(split)]
        sums = sets[0]
        for other in sets[1:]:
            sums = [_add(b, x, y) for x, y in zip(sums, other)]
        return sums

    def out_at(position):
        return b.gep(out, [irutil.i64(position)], source_etype=acc_type)

    per_loop = split * shape.unroll     # k steps an iteration takes (K_BLOCK a multiple)
    main = b.sub(k, b.urem(k, irutil.i64(per_loop))) if per_loop > 1 else k
    block_k = K_BLOCK * split        # each of the split sets sums K_BLOCK products of a block
    if not shape.blocked:
        sums = sums_over(0, main)
    else:
        # Blocks of k, each summed from zero and added to ``out``: rounding errors grow with
        # the block, not with k (as in ONNX Runtime's kernels), for the cost of a load and a
        # store of the tile per block.
        for position in range(tile):
            b.store(irutil.const(acc_type, 0), out_at(position))
        with irutil.for_range(b, 0, main, block_k, name="kb") as block:
            end = b.add(block, irutil.i64(block_k))
            end = b.select(b.icmp_signed("<", end, main), end, main)
            sums = sums_over(block, end)        # (the running sums loaded after its loop)
            for position, value in enumerate(sums):
                b.store(_add(b, b.load(out_at(position), typ=acc_type), value),
                        out_at(position))
        sums = [b.load(out_at(p), typ=acc_type) for p in range(tile)]
    if per_loop > 1:
        with irutil.accumulating_loop(b, main, k, sums, name="kr") as loop:
            loop.set_next(step(loop.index, loop.values))
        sums = loop.results
    for position, value in enumerate(sums):
        b.store(value, out_at(position))
    b.ret_void()
    return function


class _MatMulTask(Task):
    """A task of a MatMul or FusedMatMul step."""

    def __init__(self, ctx, step, plan, packed, index):
        super().__init__(ctx, plan, index)
        self.step = step
        self.packed = packed

    def pointers(self, batch):
        """Pointers to this batch entry's matrices of A, B (or its packed panels), C and the
        epilogue's extra inputs."""
        b, plan, step = self.b, self.plan, self.step
        c = step.outputs[0]

        def at(base, strides, dtype=plan.dtype):
            return loops.batch_entry(b, base, dtype, batch, plan.batch, strides)

        def matrices(tensor, matrix):
            return [s * matrix for s in loops.broadcast_strides(tensor.shape[:-2], plan.batch)]

        a, bt = step.inputs[:2]
        self.a = at(self.ctx.pointer(a), matrices(a, a.shape[-2] * a.shape[-1]))
        if self.packed is not None:
            self.bp = at(self.ctx.keep(self.packed),
                         matrices(bt, plan.panels * plan.k * plan.width), plan.b_dtype)
        else:
            self.bp = at(self.ctx.pointer(bt), matrices(bt, bt.shape[-2] * bt.shape[-1]))
        self.c = at(self.ctx.pointer(c), matrices(c, plan.m * plan.n))
        for x in step.inputs[2:]:
            strides = loops.broadcast_strides(x.shape, c.shape)
            self.extras.append((at(self.ctx.pointer(x), strides[:-2]), strides[-2:]))
