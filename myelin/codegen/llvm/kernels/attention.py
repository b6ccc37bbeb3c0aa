"""Scaled dot-product attention (``Attention``) in one pass over the keys and values, with an
online softmax: the scores of a query are never all stored, only those of one block of keys.

A task computes the outputs of one batch entry's block of queries. It walks the keys and
values in blocks of ``block`` keys; for each, the block's keys are copied into a buffer on the
stack transposed (D rows of keys, zero past the last key) and, unless a row of V is whole
vectors, its values too (zero past Dv). Then, for each tile of ``rows`` queries:

1. scores: the tile's queries times the block's keys, times the scale, in register tiles (the
   tile's rows x ``SCORE_VECTORS`` vectors of keys, over D), into a scores buffer;
2. the online softmax: each row's scores get the biases, and -inf at the keys a causal query
   does not see; for the tile's rows at once, the running maxima m rise to the block's, and
   the running sums l and the rows' accumulators are scaled by exp(m_before - m) (the
   accumulators but in the first block, where they are zeros); each row's scores become
   exp(s - m) and l gains their sum;
3. values: the accumulators (the task's rows x Dv, on the stack) gain the probabilities times
   the block's values, in register tiles (the tile's rows x ``VALUE_VECTORS`` vectors of Dv).

At the end each output row is its accumulator divided by l. A row whose scores are all -inf
so far keeps m = -inf and computes with 0 in its place, so it gains nothing and ends as 0 / 0
= NaN, as the softmax does. The maxima pass over NaN scores, whose exp makes l, and so the
row, NaN; a +inf score makes m +inf and the row NaN (inf - inf). A causal tile stops at the
last key its last query sees, and the keys past a query's own last are left out of its row
(their probabilities and products masked, not multiplied by zero).

The last tile of a task computes whole rows past the last query on copies of it, into spare
accumulators that are never stored.
"""

import math

import llvmlite.ir as ir
import numpy as np

from myelin.codegen.llvm import irutil, loops, mathlib
from myelin.codegen.llvm.kernels.base import PARALLEL_WORK, TASKS_PER_THREAD, Kernel
from myelin.codegen.llvm.kernels.reduction import horizontal
from myelin.flow import dtypes
from myelin.ops.attention import dimensions, operand_shapes, permutation, seen_keys
from myelin.ops.registry import attribute

SCORE_VECTORS = 2          # vectors of keys per row of a scores tile
VALUE_VECTORS = 2          # vectors of Dv per row of a values tile
BLOCK_BYTES = 64 << 10     # a block's keys and values in the buffers, at most
ACCUMULATOR_BYTES = 64 << 10  # a task's output accumulators, at most
SOFTMAX_WORK = 16          # flops counted per score for its share of the softmax


def _ceil(x, y):
    return -(-x // y)


class Plan:
    """The sizes of an Attention step's code: its dimensions, the register tiles' ``rows``,
    the keys per ``block``, the queries per task (``block_rows``, ``block_tiles`` tiles) and
    the ``tasks`` (batch entries x ``row_blocks``)."""

    def __init__(self, ctx, step):
        out = step.outputs[0]
        self.dtype = out.dtype
        self.itemsize = dtypes.itemsize(self.dtype)
        self.lanes = loops.lanes(ctx.target, self.dtype)
        self.sq, self.skv, self.d, self.dv = dimensions(step)
        shapes = operand_shapes(step)
        self.batch = _batch(shapes)
        # Each operand's (and the result's) strides in elements, axis by axis of its shape
        # through its permutation (see myelin.ops.attention).
        self.strides = {}
        for name, tensor in zip(("q", "k", "v"), step.inputs[:3]):
            own = loops.contiguous_strides(tensor.shape)
            self.strides[name] = tuple(own[axis] for axis in
                                       permutation(step, f"perm_{name}", len(tensor.shape)))
        own = loops.contiguous_strides(out.shape)
        perm_out = permutation(step, "perm_out", len(out.shape))
        self.strides["out"] = tuple(own[perm_out.index(axis)] for axis in range(len(own)))
        self.shapes = dict(zip(("q", "k", "v"), shapes), out=self.batch + (self.sq, self.dv))
        self.q_row, self.v_row, self.out_row = (self.strides[name][-2]
                                                for name in ("q", "v", "out"))
        # K's strides from one key to the next and along the depth.
        k_rows, k_columns = self.strides["k"][-2:]
        self.batches = math.prod(self.batch)
        self.scale = attribute(step, "scale")
        self.causal = attribute(step, "causal")
        self.transpose_k = attribute(step, "transpose_k")
        self.key_stride, self.depth_stride = ((k_columns, k_rows) if self.transpose_k
                                              else (k_rows, k_columns))
        # As many rows as the registers hold, evened out over the tiles a query block needs
        # (128 queries: 10 tiles of 13 rows, not 9 of 14 and one of 2).
        most_rows = max(1, (ctx.target.vector_registers - SCORE_VECTORS - 1) // SCORE_VECTORS)
        self.rows = _ceil(self.sq, _ceil(self.sq, most_rows)) if self.sq else 1
        self.dv_vectors = _ceil(self.dv, self.lanes)
        self.dv_pad = self.dv_vectors * self.lanes
        self.packs_values = self.dv != self.dv_pad
        self.chunk = SCORE_VECTORS * self.lanes           # keys per scores tile
        fit = BLOCK_BYTES // ((self.d + self.dv_pad) * self.itemsize) // self.chunk
        self.block = self.chunk * max(1, min(_ceil(self.skv, self.chunk), fit))
        work = self.batches * self.sq * self.skv * (2 * self.d + 2 * self.dv + SOFTMAX_WORK)
        self.large = work >= PARALLEL_WORK
        tiles = _ceil(self.sq, self.rows)
        row_blocks = 1
        if ctx.threads > 1 and self.large:
            row_blocks = min(tiles, _ceil(ctx.threads * TASKS_PER_THREAD, self.batches))
        most = max(1, ACCUMULATOR_BYTES // (self.rows * self.dv_pad * self.itemsize))
        self.block_tiles = _ceil(tiles, max(row_blocks, _ceil(tiles, most)))
        self.block_rows = self.block_tiles * self.rows
        self.row_blocks = _ceil(tiles, self.block_tiles)
        self.tasks = self.batches * self.row_blocks


class AttentionKernel(Kernel):
    """``Attention`` of float32 or float64 tensors."""

    name = "Attention"
    shares_code = True

    def supports(self, step, target):
        return all(t.dtype in ("float32", "float64") and t.dtype == step.outputs[0].dtype
                   for t in step.inputs)

    def flops(self, step):
        sq, skv, d, dv = dimensions(step)
        return math.prod(_batch(operand_shapes(step))) * sq * skv * (2 * d + 2 * dv)

    def emit(self, ctx, step):
        plan = Plan(ctx, step)
        if plan.skv == 0:
            _no_keys(ctx, step, plan)
            return
        ctx.parallel("Attention", step.inputs + step.outputs, plan.tasks,
                     lambda sub, index: _Task(sub, step, plan, index).emit(),
                     outline=plan.large)


def _batch(shapes):
    """The batch axes of an attention of operands of ``shapes`` (q's, k's and v's)."""
    return tuple(np.broadcast_shapes(*(shape[:-2] for shape in shapes)))


def _no_keys(ctx, step, plan):
    """The output over no keys: zeros (an empty softmax times V), NaN where causal (no query
    sees a key)."""
    value = math.nan if plan.causal else 0.0
    typ = irutil.compute_type(plan.dtype)
    loops.elementwise(ctx.builder, ctx.target, step.outputs[0].shape, [],
                      [ctx.operand(step.outputs[0])],
                      lambda b, values, lanes: [irutil.const(irutil.vector_of(typ, lanes),
                                                             value)])


def _larger(b, x, y):
    """The larger of floats ``x`` and ``y``: ``x`` where they do not compare (a NaN ``y``
    is passed over)."""
    return b.select(b.fcmp_ordered(">", y, x), y, x)


class _Task:
    """The code of one task: a batch entry's block of queries (see the module's doc)."""

    def __init__(self, ctx, step, plan, index):
        self.ctx, self.step, self.plan, self.b = ctx, step, plan, ctx.builder
        self.index = index
        self.vector = irutil.vector_of(irutil.compute_type(plan.dtype), plan.lanes)
        self.lane_index = ir.Constant(ir.VectorType(irutil.I64, plan.lanes),
                                      list(range(plan.lanes)))

    def emit(self):
        b, plan = self.b, self.plan
        batch, block = self.index, irutil.i64(0)
        if plan.row_blocks > 1:
            batch = b.udiv(self.index, irutil.i64(plan.row_blocks))
            block = b.urem(self.index, irutil.i64(plan.row_blocks))
        self._pointers(batch)
        self.first = b.mul(block, irutil.i64(plan.block_rows))
        self.count = irutil.smin(b, irutil.i64(plan.block_rows),
                                 b.sub(irutil.i64(plan.sq), self.first))
        self._buffers()
        keys = irutil.i64(plan.skv)
        if plan.causal:
            last = b.add(self.first, b.sub(self.count, irutil.i64(1)))
            keys = irutil.smax(b, irutil.smin(b, self._seen(last), keys), irutil.i64(0))
        with irutil.for_range(b, 0, keys, plan.block, name="kv") as start:
            count = irutil.smin(b, irutil.i64(plan.block), b.sub(keys, start))
            self._pack_keys(start, count)
            values, stride = self._values(start, count)
            tiles = b.udiv(b.add(self.count, irutil.i64(plan.rows - 1)), irutil.i64(plan.rows))
            with irutil.for_range(b, 0, tiles, name="tile") as tile:
                self._tile(tile, start, count, values, stride)
        self._store()

    def _seen(self, query):
        """How many keys ``query`` (an i64) sees in a causal attention."""
        plan = self.plan
        return self.b.add(query, irutil.i64(seen_keys(0, plan.sq, plan.skv)))

    def _pointers(self, batch):
        """The batch entry's Q, K, V, output and biases (with their row and column strides)."""
        b, plan, step = self.b, self.plan, self.step
        q, k, v = step.inputs[:3]
        out = step.outputs[0]

        def matrix(tensor, name):
            shape, strides = plan.shapes[name][:-2], plan.strides[name][:-2]
            leading = len(plan.batch) - len(shape)
            batch_strides = [0] * leading + [0 if n == 1 else s for n, s in zip(shape, strides)]
            return loops.batch_entry(b, self.ctx.pointer(tensor), plan.dtype, batch,
                                     plan.batch, batch_strides)

        self.q, self.k, self.v, self.out = (matrix(tensor, name) for tensor, name in
                                            zip((q, k, v, out), ("q", "k", "v", "out")))
        self.biases = []
        scores = plan.batch + (plan.sq, plan.skv)
        for bias in step.inputs[3:]:
            strides = loops.broadcast_strides(bias.shape, scores)
            base = loops.batch_entry(b, self.ctx.pointer(bias), plan.dtype, batch, plan.batch,
                                     strides[:-2])
            self.biases.append((base, strides[-2], strides[-1]))

    def _buffers(self):
        """The stack buffers, and the accumulators set to start: m = -inf, l = 0, sums 0."""
        b, plan = self.b, self.plan
        element = irutil.storage_type(plan.dtype)
        self.keys = irutil.stack_array(b, element, max(1, plan.d) * plan.block)
        self.packed_values = (irutil.stack_array(b, element, plan.block * plan.dv_pad)
                              if plan.packs_values else None)
        self.scores = irutil.stack_array(b, element, plan.rows * plan.block)
        self.sums = irutil.stack_array(b, element, plan.block_rows * plan.dv_pad)
        self.maxima = irutil.stack_array(b, element, plan.block_rows)
        self.totals = irutil.stack_array(b, element, plan.block_rows)
        self.peaks, self.shifts, self.added = (irutil.stack_array(b, element, plan.rows)
                                               for _ in range(3))
        typ = irutil.compute_type(plan.dtype)
        with irutil.for_range(b, 0, plan.block_rows, name="init") as row:
            self._put(irutil.const(typ, -math.inf), self.maxima, row)
            self._put(irutil.const(typ, 0), self.totals, row)
        with irutil.for_range(b, 0, plan.block_rows * plan.dv_pad, plan.lanes,
                              name="zero") as at:
            self._put(irutil.const(self.vector, 0), self.sums, at)

    # Loads and stores of the compute type.
    def _get(self, base, at, width=1):
        return irutil.load(self.b, irutil.element_ptr(self.b, base, self.plan.dtype, at),
                           self.plan.dtype, width)

    def _put(self, value, base, at):
        irutil.store(self.b, value, irutil.element_ptr(self.b, base, self.plan.dtype, at),
                     self.plan.dtype)

    def _tail_mask(self, count):
        """Lanes below ``count`` (an i64)."""
        return self.b.icmp_signed("<", self.lane_index,
                                  irutil.splat(self.b, count, self.plan.lanes))

    def _load_part(self, base, at, count):
        """The first ``count`` elements at ``base[at]`` as a vector, zeros past them, reading
        nothing past them."""
        zero = ir.Constant(ir.VectorType(irutil.storage_type(self.plan.dtype), self.plan.lanes),
                           None)
        return irutil.masked_load(self.b, irutil.element_ptr(self.b, base, self.plan.dtype, at),
                                  self.plan.dtype, self._tail_mask(count), zero)

    def _copy_row(self, source, target, count, width):
        """``target[:width]`` (a multiple of lanes) = ``source[:count]``, zeros after."""
        b, lanes = self.b, self.plan.lanes
        whole = b.mul(b.udiv(count, irutil.i64(lanes)), irutil.i64(lanes))
        with irutil.for_range(b, 0, whole, lanes, name="copy") as at:
            self._put(self._get(source, at, lanes), target, at)
        with b.if_then(b.icmp_signed("<", whole, count)):
            self._put(self._load_part(source, whole, b.sub(count, whole)), target, whole)
        rest = b.mul(b.udiv(b.add(count, irutil.i64(lanes - 1)), irutil.i64(lanes)),
                     irutil.i64(lanes))
        with irutil.for_range(b, rest, width, lanes, name="pad") as at:
            self._put(irutil.const(self.vector, 0), target, at)

    def _pack_keys(self, start, count):
        """The keys [start, start + count) into the buffer, transposed: row d holds their
        element d, zeros up to a whole number of scores tiles."""
        b, plan = self.b, self.plan
        width = b.mul(b.udiv(b.add(count, irutil.i64(plan.chunk - 1)), irutil.i64(plan.chunk)),
                      irutil.i64(plan.chunk))
        first = 0
        if plan.key_stride != 1 and plan.depth_stride == 1:
            first = plan.d - plan.d % plan.lanes
            self._pack_key_blocks(start, count, width, first)
        with irutil.for_range(b, first, plan.d, name="kd") as depth:
            row = irutil.element_ptr(b, self.keys, plan.dtype, b.mul(depth, irutil.i64(plan.block)))
            if plan.key_stride == 1:        # (K^T's rows: the keys of one depth in a row)
                source = irutil.element_ptr(
                    b, self.k, plan.dtype, b.add(b.mul(depth, irutil.i64(plan.depth_stride)),
                                                 start))
                self._copy_row(source, row, count, width)
            else:
                with irutil.for_range(b, 0, count, name="kc") as key:
                    at = b.add(b.mul(b.add(start, key), irutil.i64(plan.key_stride)),
                               b.mul(depth, irutil.i64(plan.depth_stride)))
                    self._put(self._get(self.k, at), row, key)
                with irutil.for_range(b, count, width, name="kz") as key:
                    self._put(irutil.const(irutil.compute_type(plan.dtype), 0), row, key)

    def _pack_key_blocks(self, start, count, width, depths):
        """Rows [0, ``depths``) of the keys buffer (a multiple of the lanes), from keys whose
        depths are contiguous (K as the model lays it out, [keys, heads, depth]): blocks of
        lanes keys by lanes depths, loaded a key at a time and transposed in registers;
        zeros for the keys from ``count`` to ``width``."""
        b, plan = self.b, self.plan
        lanes = plan.lanes
        last = b.sub(count, irutil.i64(1))
        zero = irutil.const(self.vector, 0)
        with irutil.for_range(b, 0, width, lanes, name="kb") as key0:
            keys = [b.add(key0, irutil.i64(r)) for r in range(lanes)]
            rows = [b.mul(b.add(start, irutil.smin(b, key, last)), irutil.i64(plan.key_stride))
                    for key in keys]
            with irutil.for_range(b, 0, depths, lanes, name="kdb") as depth:
                block = [b.select(b.icmp_signed("<", key, count),
                                  self._get(self.k, b.add(row, depth), lanes), zero)
                         for key, row in zip(keys, rows)]
                for q, value in enumerate(irutil.transpose_block(b, block)):
                    at = b.add(b.mul(b.add(depth, irutil.i64(q)), irutil.i64(plan.block)), key0)
                    self._put(value, self.keys, at)

    def _values(self, start, count):
        """(a pointer to the block's first row of values, elements between rows): V itself,
        or its rows copied into the buffer with zeros past Dv."""
        b, plan = self.b, self.plan
        first = irutil.element_ptr(b, self.v, plan.dtype, b.mul(start, irutil.i64(plan.v_row)))
        if not plan.packs_values:
            return first, plan.v_row
        with irutil.for_range(b, 0, count, name="vc") as key:
            source = irutil.element_ptr(b, first, plan.dtype, b.mul(key, irutil.i64(plan.v_row)))
            target = irutil.element_ptr(b, self.packed_values, plan.dtype,
                                        b.mul(key, irutil.i64(plan.dv_pad)))
            self._copy_row(source, target, irutil.i64(plan.dv), plan.dv_pad)
        return self.packed_values, plan.dv_pad

    def _tile(self, tile, start, count, values, stride):
        """A tile of queries against the block of ``count`` keys from ``start``."""
        b, plan = self.b, self.plan
        local = b.mul(tile, irutil.i64(plan.rows))      # the tile's first row in the task
        first = b.add(self.first, local)
        # seen: the keys of the block the tile's first query sees; the r-th sees seen + r.
        seen, used = count, count
        if plan.causal:
            seen = b.sub(self._seen(first), start)
            used = irutil.smin(b, count, b.add(seen, irutil.i64(plan.rows - 1)))
        with b.if_then(b.icmp_signed(">", used, irutil.i64(0))):
            self._scores(first, used)
            self._softmax(first, local, start, used, seen)
            for group in range(0, plan.dv_vectors, VALUE_VECTORS):
                vectors = min(VALUE_VECTORS, plan.dv_vectors - group)
                function = self.ctx.function(
                    ("attention values", plan.dtype, plan.rows, vectors, plan.lanes,
                     plan.block, stride, plan.dv_pad),
                    lambda module, vectors=vectors: _values_function(module, plan, vectors,
                                                                       stride))
                column = group * plan.lanes
                sums = irutil.element_ptr(b, self.sums, plan.dtype,
                                          b.add(b.mul(local, irutil.i64(plan.dv_pad)),
                                                irutil.i64(column)))
                b.call(function, [self.scores, irutil.element_ptr(b, values, plan.dtype, column),
                                  sums, used, seen])

    def _scores(self, first, used):
        """The scores buffer's columns [0, used) (whole scores tiles) = the tile's queries
        (past the last query, copies of it) times the packed keys."""
        b, plan = self.b, self.plan
        table = irutil.stack_array(b, irutil.PTR, plan.rows, 8)
        for r in range(plan.rows):
            query = irutil.smin(b, b.add(first, irutil.i64(r)), irutil.i64(plan.sq - 1))
            b.store(irutil.element_ptr(b, self.q, plan.dtype,
                                       b.mul(query, irutil.i64(plan.q_row))),
                    irutil.element_ptr(b, table, "int64", r))
        function = self.ctx.function(
            ("attention scores", plan.dtype, plan.d, plan.rows, plan.lanes, plan.block,
             plan.scale),
            lambda module: _scores_function(module, plan))
        with irutil.for_range(b, 0, used, plan.chunk, name="sc") as column:
            b.call(function, [table,
                              irutil.element_ptr(b, self.keys, plan.dtype, column),
                              irutil.element_ptr(b, self.scores, plan.dtype, column)])

    def _softmax(self, first, local, start, used, seen):
        """The tile's scores [0, used) biased, masked and turned into exp(s - m), and each
        row's m, l and accumulators updated (see the module's doc)."""
        b, plan = self.b, self.plan
        lanes, dtype, rows = plan.lanes, plan.dtype, plan.rows
        whole = b.mul(b.udiv(used, irutil.i64(lanes)), irutil.i64(lanes))
        vectors_end = b.mul(b.udiv(b.add(used, irutil.i64(lanes - 1)), irutil.i64(lanes)),
                            irutil.i64(lanes))
        # Each row's scores biased and masked, and their largest.
        with irutil.for_range(b, 0, rows, name="row") as r:
            self._put(self._prepare(r, first, start, used, seen, whole), self.peaks, r)
        # For the rows at once: the new maxima, the shifts of the exponents (0 while a row
        # has only -inf) and the factors that rescale what the rows summed before.
        before = self._get(self.maxima, local, rows)
        peak = _larger(b, before, self._get(self.peaks, 0, rows))
        shift = b.select(b.fcmp_ordered("==", peak, irutil.const(peak.type, -math.inf)),
                         irutil.const(peak.type, 0), peak)
        rescale = mathlib.exp(b, b.fsub(before, shift))
        self._put(peak, self.maxima, local)
        self._put(shift, self.shifts, 0)
        with irutil.for_range(b, 0, rows, name="ex") as r:
            scores = irutil.element_ptr(b, self.scores, dtype, b.mul(r, irutil.i64(plan.block)))
            shift_vector = irutil.splat(b, self._get(self.shifts, r), lanes)
            zero = irutil.const(self.vector, 0)
            with irutil.accumulating_loop(b, 0, vectors_end, [zero], lanes, name="ev") as loop:
                p = mathlib.exp(b, b.fsub(self._get(scores, loop.index, lanes), shift_vector))
                self._put(p, scores, loop.index)
                loop.set_next([b.fadd(loop.values[0], p)])
            self._put(horizontal(b, loop.results[0], lambda bb, x, y: bb.fadd(x, y)),
                      self.added, r)
        self._put(b.fadd(b.fmul(self._get(self.totals, local, rows), rescale),
                         self._get(self.added, 0, rows)), self.totals, local)
        # The accumulators rescaled, but in the first block, where they are zeros.
        with b.if_then(b.icmp_signed(">", start, irutil.i64(0))):
            self._put(rescale, self.shifts, 0)
            with irutil.for_range(b, 0, rows, name="rs") as r:
                sums = irutil.element_ptr(b, self.sums, dtype,
                                          b.mul(b.add(local, r), irutil.i64(plan.dv_pad)))
                factor = irutil.splat(b, self._get(self.shifts, r), lanes)
                for v in range(plan.dv_vectors):
                    self._put(b.fmul(self._get(sums, v * lanes, lanes), factor), sums, v * lanes)

    def _prepare(self, r, first, start, used, seen, whole):
        """Row ``r`` of the tile's scores with the biases added and the keys it does not see
        (past ``used``, or where causal past its own last) set to -inf; returns their
        largest (NaNs passed over: they reach the row through its sum)."""
        b, plan = self.b, self.plan
        lanes, dtype = plan.lanes, plan.dtype
        query = irutil.smin(b, b.add(first, r), irutil.i64(plan.sq - 1))
        scores = irutil.element_ptr(b, self.scores, dtype, b.mul(r, irutil.i64(plan.block)))
        visible = irutil.smax(b, irutil.smin(b, b.add(seen, r), used), irutil.i64(0))

        def prepare(at, part, peak):
            x = self._get(scores, at, lanes)
            for base, row_stride, column_stride in self.biases:
                x = b.fadd(x, self._bias(base, row_stride, column_stride, query,
                                         b.add(start, at), part))
            if plan.causal or part is not None:
                columns = b.add(self.lane_index, irutil.splat(b, at, lanes))
                x = b.select(b.icmp_signed("<", columns, irutil.splat(b, visible, lanes)),
                             x, irutil.const(self.vector, -math.inf))
            if self.biases or plan.causal or part is not None:
                self._put(x, scores, at)
            return _larger(b, peak, x)

        lowest = irutil.const(self.vector, -math.inf)
        with irutil.accumulating_loop(b, 0, whole, [lowest], lanes, name="mx") as loop:
            loop.set_next([prepare(loop.index, None, loop.values[0])])
        peak, before_tail = loop.results[0], b.block
        tail = b.sub(used, whole)
        with b.if_then(b.icmp_signed(">", tail, irutil.i64(0))):
            tail_peak = prepare(whole, tail, peak)
            tail_block = b.block
        merged = b.phi(self.vector)
        merged.add_incoming(peak, before_tail)
        merged.add_incoming(tail_peak, tail_block)
        return horizontal(b, merged, _larger)

    def _bias(self, base, row_stride, column_stride, query, column, part):
        """A bias's vector for ``query`` at keys from ``column``: ``part`` (an i64, or None
        for a whole vector) elements read."""
        b, plan = self.b, self.plan
        at = b.mul(query, irutil.i64(row_stride))
        if column_stride == 0:
            return irutil.splat(b, self._get(base, at), plan.lanes)
        at = b.add(at, column)
        if part is None:
            return self._get(base, at, plan.lanes)
        return self._load_part(base, at, part)

    def _store(self):
        """Each output row of the task: its accumulators over l."""
        b, plan = self.b, self.plan
        lanes, dtype = plan.lanes, plan.dtype
        with irutil.for_range(b, 0, self.count, name="out") as r:
            sums = irutil.element_ptr(b, self.sums, dtype, b.mul(r, irutil.i64(plan.dv_pad)))
            target = irutil.element_ptr(b, self.out, dtype,
                                        b.mul(b.add(self.first, r), irutil.i64(plan.out_row)))
            total = irutil.splat(b, self._get(self.totals, r), lanes)
            for v in range(plan.dv_vectors):
                value = b.fdiv(self._get(sums, v * lanes, lanes), total)
                valid = min(lanes, plan.dv - v * lanes)
                if valid == lanes:
                    self._put(value, target, v * lanes)
                else:
                    irutil.store_lanes(b, value, irutil.element_ptr(b, target, dtype, v * lanes),
                                       dtype, valid)


def _helper(module, name, arguments):
    """An internal, never-inlined function of ``module`` (so LLVM allocates a register
    tile's registers alone) and a builder at its entry."""
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), arguments),
                           module.get_unique_name(name))
    function.linkage = "internal"
    function.attributes.add("nounwind")
    function.attributes.add("noinline")
    return function, ir.IRBuilder(function.append_basic_block("entry"))


def _scores_function(module, plan):
    """``void(ptr queries, ptr keys, ptr out)``: ``out`` (rows ``block`` apart) = the
    ``rows`` queries (a table of pointers to their rows) times ``SCORE_VECTORS`` vectors of
    the packed keys from ``keys`` (rows ``block`` apart), over D, times the scale."""
    function, b = _helper(module, "attention.scores", [irutil.PTR] * 3)
    table, keys, out = function.args
    dtype, lanes = plan.dtype, plan.lanes
    vector = irutil.vector_of(irutil.compute_type(dtype), lanes)
    queries = [b.load(irutil.element_ptr(b, table, "int64", r), typ=irutil.PTR)
               for r in range(plan.rows)]
    zero = irutil.const(vector, 0)
    with irutil.accumulating_loop(b, 0, plan.d, [zero] * (plan.rows * SCORE_VECTORS),
                                  name="d") as loop:
        row = irutil.element_ptr(b, keys, dtype, b.mul(loop.index, irutil.i64(plan.block)))
        loaded = [irutil.load(b, irutil.element_ptr(b, row, dtype, v * lanes), dtype, lanes)
                  for v in range(SCORE_VECTORS)]
        sums = []
        for r, query in enumerate(queries):
            element = irutil.splat(b, irutil.load(b, irutil.element_ptr(b, query, dtype,
                                                                        loop.index), dtype),
                                   lanes)
            sums += [mathlib.fmuladd(b, element, loaded[v], loop.values[r * SCORE_VECTORS + v])
                     for v in range(SCORE_VECTORS)]
        loop.set_next(sums)
    for r in range(plan.rows):
        for v in range(SCORE_VECTORS):
            at = irutil.element_ptr(b, out, dtype, r * plan.block + v * lanes)
            value = loop.results[r * SCORE_VECTORS + v]
            if plan.scale != 1.0:
                value = b.fmul(value, irutil.const(vector, plan.scale))
            irutil.store(b, value, at, dtype)
    b.ret_void()
    return function


def _values_function(module, plan, vectors, stride):
    """``void(ptr p, ptr values, ptr sums, i64 used, i64 seen)``: the ``rows`` x ``vectors``
    accumulators at ``sums`` (rows ``dv_pad`` apart) += the probabilities ``p`` (rows
    ``block`` apart) of keys [0, used) times the values' rows (``stride`` apart). Row r takes
    keys below ``seen + r`` only (all when ``seen`` >= ``used``)."""
    function, b = _helper(module, "attention.values",
                          [irutil.PTR] * 3 + [irutil.I64, irutil.I64])
    p, values, sums, used, seen = function.args
    dtype, lanes, rows = plan.dtype, plan.lanes, plan.rows

    def at(r, v):
        return irutil.element_ptr(b, sums, dtype, r * plan.dv_pad + v * lanes)

    accumulators = [irutil.load(b, at(r, v), dtype, lanes)
                    for r in range(rows) for v in range(vectors)]

    def step(key, current, guarded):
        row = irutil.element_ptr(b, values, dtype, b.mul(key, irutil.i64(stride)))
        loaded = [irutil.load(b, irutil.element_ptr(b, row, dtype, v * lanes), dtype, lanes)
                  for v in range(vectors)]
        out = []
        for r in range(rows):
            weight = irutil.load(b, irutil.element_ptr(
                b, p, dtype, b.add(irutil.i64(r * plan.block), key)), dtype)
            weight = irutil.splat(b, weight, lanes)
            for v in range(vectors):
                acc = current[r * vectors + v]
                new = mathlib.fmuladd(b, weight, loaded[v], acc)
                if guarded:
                    new = b.select(b.icmp_signed("<", key, b.add(seen, irutil.i64(r))), new, acc)
                out.append(new)
        return out

    full = irutil.smax(b, irutil.smin(b, seen, used), irutil.i64(0))
    with irutil.accumulating_loop(b, 0, full, accumulators, name="k") as loop:
        loop.set_next(step(loop.index, loop.values, False))
    with irutil.accumulating_loop(b, full, used, loop.results, name="kg") as guarded:
        guarded.set_next(step(guarded.index, guarded.values, True))
    for index, value in enumerate(guarded.results):
        irutil.store(b, value, at(index // vectors, index % vectors), dtype)
    b.ret_void()
    return function
