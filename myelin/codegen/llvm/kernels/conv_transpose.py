"""``ConvTranspose`` as a matrix product and a col2im.

For each image and group, the columns ``Cols[Mg * K, P] = W_g^T x X_g`` hold in row (m, k)
and column p what input pixel p adds to output channel m through kernel tap k; X_g [Cg, P] is
the group's input as the matrix it already is, W_g^T the group's weights [Cg, Mg * K] read
transposed (their stored layout), so nothing is copied or repacked. The product runs on
:mod:`matmul`'s register tiles (:class:`~.matmul.Plan`, :class:`~.matmul.Task`), a window of
``chunk`` columns at a time into a buffer on the stack of at most ``SCRATCH_BYTES`` (in blocks
of whole channels where all the rows would not fit beside one panel), and col2im adds the window
into the output while it is in cache.

Col2im goes by rows of the innermost axis. Tap kx of input column ix lands on output column
``ix * s + kx * d - p``, which is ``(ix + q) * s + r`` with q, r the floor quotient and remainder
of ``kx * d - p`` by the stride s. So for a vector of consecutive u, the output columns
``u * s + r`` are the sum, over the taps of remainder r, of the tap's column row read at
``u - q``: contiguous loads, interleaved into ``s`` vectors of contiguous output (for kernel =
stride, a pixel shuffle). Columns near the ends of a row, and strides above ``MAX_INTERLEAVE``,
go one at a time.

Where kernel = stride and dilation 1 on every axis and the taps cover the whole output, every
output element comes from exactly one column: col2im stores it plus the bias. Otherwise a task
first sets its part of the output to the bias, and col2im adds.

Tasks split images, groups and blocks of the outermost output axis. A task computes the columns
of the input rows that reach its block (a row or two more than its share where taps overlap)
and writes only its block, so no two tasks write the same element.
"""

import math

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil, loops
from myelin.codegen.llvm.kernels.base import PARALLEL_WORK, TASKS_PER_THREAD, Kernel
from myelin.codegen.llvm.kernels.conv import nested_loops, supported_floats
from myelin.codegen.llvm.kernels.matmul import Plan, Task
from myelin.ops import conv as conv_ops

SCRATCH_BYTES = 192 << 10   # the columns a task keeps on its stack
MAX_INTERLEAVE = 4          # strides whose output columns are interleaved from vectors

i64 = irutil.i64


class _Geometry:
    """The sizes of a ConvTranspose with at least two spatial axes (a unit one put before the
    only axis of a 1-D one), and what follows from them."""

    def __init__(self, step):
        g = conv_ops.geometry(step)
        unit = (1,) if g.rank == 1 else ()
        zero = (0,) if g.rank == 1 else ()
        self.g = g
        self.input, self.output = unit + tuple(g.input), unit + tuple(g.output)
        self.kernel, self.strides = unit + tuple(g.kernel), unit + tuple(g.strides)
        self.dilations, self.pads = unit + tuple(g.dilations), zero + tuple(g.pads_begin)
        self.cg, self.mg = g.in_channels // g.group, g.out_channels // g.group
        self.taps = math.prod(g.kernel)
        self.pixels = math.prod(g.input)                     # P: columns of an image's product
        self.out_plane = math.prod(g.output)
        self.row = math.prod(self.input[1:])                 # columns per input row of axis 0
        self.out_row = math.prod(self.output[1:])
        # Each output element has exactly one tap: col2im stores instead of adding.
        self.exact = all(k == s and d == 1 and o + p <= n * s for k, s, d, o, p, n in zip(
            self.kernel, self.strides, self.dilations, self.output, self.pads, self.input))

    def blocks(self, threads):
        """(blocks, rows per block) of the outermost output axis per image and group."""
        g, rows = self.g, self.output[0]
        flops = 2 * g.batch * g.in_channels * self.pixels * self.mg * self.taps
        images = g.batch * g.group
        wanted = 1
        if threads > 1 and flops >= PARALLEL_WORK and images:
            wanted = min(rows, -(-threads * TASKS_PER_THREAD // images))
        size = -(-rows // wanted)
        return -(-rows // size), size


class ConvTransposeKernel(Kernel):
    """``ConvTranspose`` with any attributes ONNX allows, float32 and float64 (see the module
    docstring)."""

    name = "ConvTranspose"

    def supports(self, step, target):
        return (step.type == "ConvTranspose" and len(step.inputs[0].shape) >= 3
                and supported_floats(step))

    def flops(self, step):
        w = step.inputs[1]
        return 2 * step.inputs[0].elements * math.prod(w.shape[1:])

    def emit(self, ctx, step):
        geo = _Geometry(step)
        blocks, size = geo.blocks(ctx.threads)
        tasks = geo.g.batch * geo.g.group * blocks
        ctx.parallel(f"ConvTranspose.{step.name}", step.inputs + step.outputs, tasks,
                     lambda sub, index: _Task(sub, step, geo, (blocks, size), index).emit(),
                     outline=True)


class _Product(Task):
    """The matrix product of one window of columns into the stack buffer: ``a`` the group's
    weights, ``bp`` the window's first column of the group's input, ``c`` the buffer, all set
    by the caller."""

    def pointers(self, batch):
        pass


class _Task:
    """One task: an image, a group and a block of the outermost output axis."""

    def __init__(self, ctx, step, geo, blocks, index):
        self.ctx, self.b, self.geo = ctx, ctx.builder, geo
        self.step, self.blocks, self.index = step, blocks, index
        self.dtype = step.outputs[0].dtype
        self.itemsize = step.outputs[0].itemsize
        self.lanes = loops.lanes(ctx.target, self.dtype)

    def emit(self):
        b, geo, g = self.b, self.geo, self.geo.g
        index = self.index
        blocks, size = self.blocks
        block, image = i64(0), index
        if blocks > 1:
            block, image = b.urem(index, i64(blocks)), b.udiv(index, i64(blocks))
        n, group = b.udiv(image, i64(g.group)), b.urem(image, i64(g.group))
        first = b.mul(block, i64(size))
        last = self._min(b.add(first, i64(size)), i64(geo.output[0]))
        self.owned = (first, last)
        channel = b.add(b.mul(n, i64(g.out_channels)), b.mul(group, i64(geo.mg)))
        self.y = irutil.element_ptr(b, self.ctx.pointer(self.step.outputs[0]), self.dtype,
                                    b.mul(channel, i64(geo.out_plane)))
        self.bias = None
        if len(self.step.inputs) > 2:
            self.bias = irutil.element_ptr(b, self.ctx.pointer(self.step.inputs[2]), self.dtype,
                                           b.mul(group, i64(geo.mg)))
        if not geo.exact:
            self._fill(first, last)
        x_channel = b.add(b.mul(n, i64(g.in_channels)), b.mul(group, i64(geo.cg)))
        x = irutil.element_ptr(b, self.ctx.pointer(self.step.inputs[0]), self.dtype,
                               b.mul(x_channel, i64(geo.pixels)))
        w = irutil.element_ptr(b, self.ctx.pointer(self.step.inputs[1]), self.dtype,
                               b.mul(group, i64(geo.cg * geo.mg * geo.taps)))
        self._windows(x, w)

    # Output.
    def _fill(self, first, last):
        """Set rows [first, last) of axis 0 of every channel of the task's group to the bias
        (or zero)."""
        b, geo, lanes = self.b, self.geo, self.lanes
        start = b.mul(first, i64(geo.out_row))
        count = b.mul(b.sub(last, first), i64(geo.out_row))
        whole = b.mul(b.udiv(count, i64(lanes)), i64(lanes))
        with irutil.for_range(b, 0, geo.mg, name="fm") as m:
            value = self._bias(m)
            vector = irutil.splat(b, value, lanes)
            row = irutil.element_ptr(b, self.y, self.dtype,
                                     b.add(b.mul(m, i64(geo.out_plane)), start))
            with irutil.for_range(b, 0, whole, lanes, name="fv") as j:
                irutil.store(b, vector, irutil.element_ptr(b, row, self.dtype, j), self.dtype)
            with irutil.for_range(b, whole, count, name="fs") as j:
                irutil.store(b, value, irutil.element_ptr(b, row, self.dtype, j), self.dtype)

    def _bias(self, m):
        if self.bias is None:
            return irutil.const(irutil.compute_type(self.dtype), 0)
        return irutil.load(self.b, irutil.element_ptr(self.b, self.bias, self.dtype, m),
                           self.dtype)

    # Windows of columns.
    def _windows(self, x, w):
        """For each window of the columns of the input rows that reach the task's block: the
        product into the stack buffer, then col2im."""
        b, geo, ctx = self.b, self.geo, self.ctx
        rows = geo.mg * geo.taps
        plan = Plan(ctx, rows, geo.pixels, geo.cg, (), self.dtype, "run", trans_a=True)
        panel = plan.width * self.itemsize
        block = rows
        if rows * panel > SCRATCH_BYTES:
            unit = math.lcm(geo.taps, plan.rows)
            block = min(rows, max(1, SCRATCH_BYTES // (panel * unit)) * unit)
        chunk = max(1, SCRATCH_BYTES // (block * panel)) * plan.width
        if chunk >= geo.pixels:
            chunk = geo.pixels
        else:
            plan = Plan(ctx, rows, chunk, geo.cg, (), self.dtype, "run", trans_a=True)
        self.chunk, self.block = chunk, block
        scratch = irutil.stack_array(b, irutil.storage_type(self.dtype), block * chunk)

        # Input rows of axis 0 that reach the owned output rows [first, last).
        first, last = self.owned
        s, d, p, k = geo.strides[0], geo.dilations[0], geo.pads[0], geo.kernel[0]
        low = b.add(first, i64(p - (k - 1) * d))                 # i * s >= low
        low = b.select(b.icmp_signed(">", low, i64(0)), low, i64(0))
        begin = b.udiv(b.add(low, i64(s - 1)), i64(s))
        end = self._min(b.add(b.udiv(b.add(last, i64(p - 1)), i64(s)), i64(1)),
                        i64(geo.input[0]))
        columns_end = b.mul(end, i64(geo.row))
        with irutil.for_range(b, b.mul(begin, i64(geo.row)), columns_end, chunk,
                              name="win") as window:
            # The last window is moved back to end at the last column, where it recomputes
            # columns it does not add again.
            start = self._min(window, i64(geo.pixels - chunk))
            stop = self._min(b.add(window, i64(chunk)), columns_end)
            with irutil.for_range(b, 0, rows, block, name="cb") as row_start:
                product = _Product(ctx, plan, i64(0))
                product.a = w
                product.bp = irutil.element_ptr(b, x, self.dtype, start)
                product.b_stride = geo.pixels
                # The buffer holds the block's rows only.
                product.c = irutil.element_ptr(b, scratch, self.dtype,
                                               b.sub(i64(0), b.mul(row_start, i64(chunk))))
                row_end = self._min(b.add(row_start, i64(block)), i64(rows))
                product.emit((row_start, row_end))
                self._col2im(scratch, start, window, stop,
                             b.udiv(row_start, i64(geo.taps)), b.udiv(row_end, i64(geo.taps)))

    # Col2im.
    def _col2im(self, scratch, start, begin, end, m_begin, m_end):
        """Add (or store) columns [begin, end) of the window at ``start`` for the output
        channels [m_begin, m_end), whose rows the buffer holds from its first row."""
        b, geo = self.b, self.geo
        width = geo.input[-1]
        first_row = b.udiv(begin, i64(width))
        last_row = b.udiv(b.sub(end, i64(1)), i64(width))
        with irutil.for_range(b, first_row, b.add(last_row, i64(1)), name="iq") as q:
            row_column = b.mul(q, i64(width))
            lo = b.sub(begin, row_column)
            lo = b.select(b.icmp_signed(">", lo, i64(0)), lo, i64(0))
            hi = self._min(b.sub(end, row_column), i64(width))
            # The input row's coordinates on the outer axes.
            coordinates, rest = [], q
            for size in reversed(geo.input[:-1]):
                coordinates.insert(0, b.urem(rest, i64(size)))
                rest = b.udiv(rest, i64(size))
            with irutil.for_range(b, m_begin, m_end, name="cm") as m:
                nested_loops(b, list(geo.kernel[:-1]), lambda taps: self._tap_row(
                    scratch, start, row_column, lo, hi, coordinates, m, m_begin, taps),
                    name="ck")

    def _tap_row(self, scratch, start, row_column, lo, hi, coordinates, m, m_begin, taps):
        """The input row's columns [lo, hi) through the outer taps ``taps`` into the output
        row they reach, if it is the task's."""
        b, geo = self.b, self.geo
        inside, out_row = None, i64(0)
        for axis, (i, k) in enumerate(zip(coordinates, taps)):
            o = b.add(b.mul(i, i64(geo.strides[axis])),
                      b.sub(b.mul(k, i64(geo.dilations[axis])), i64(geo.pads[axis])))
            if axis == 0:
                first, last = self.owned
                ok = b.icmp_unsigned("<", b.sub(o, first), b.sub(last, first))
            else:
                ok = b.icmp_unsigned("<", o, i64(geo.output[axis]))
            inside = ok if inside is None else b.and_(inside, ok)
            out_row = b.add(b.mul(out_row, i64(geo.output[axis])), o)
        tap = i64(0)
        for k, size in zip(taps, geo.kernel[:-1]):
            tap = b.add(b.mul(tap, i64(size)), k)
        with b.if_then(inside):
            y = irutil.element_ptr(b, self.y, self.dtype,
                                   b.add(b.mul(m, i64(geo.out_plane)),
                                         b.mul(out_row, i64(geo.output[-1]))))
            # Row (m, tap, kx) of the buffer at input column ix: its element
            # (m - m_begin) * K + tap * kw + kx, ix + row_column - start.
            kw = geo.kernel[-1]
            row = b.add(b.mul(b.sub(m, m_begin), i64(geo.taps)), b.mul(tap, i64(kw)))
            base = b.sub(b.add(b.mul(row, i64(self.chunk)), row_column), start)
            source = irutil.element_ptr(b, scratch, self.dtype, base)
            self._row(source, y, lo, hi, self._bias(m) if geo.exact else None)

    def _row(self, source, y, lo, hi, bias):
        """Output row ``y`` += (or = ``bias`` +) tap kx's row at ``source + kx * chunk`` over
        input columns [lo, hi): see the module docstring."""
        b, geo = self.b, self.geo
        s, d, p, kw = geo.strides[-1], geo.dilations[-1], geo.pads[-1], geo.kernel[-1]
        out_width = geo.output[-1]
        taps = [divmod(kx * d - p, s) for kx in range(kw)]        # (q, r) of each tap
        q_min, q_max = min(q for q, _ in taps), max(q for q, _ in taps)
        u_lo, u_hi = b.add(lo, i64(q_min)), b.add(hi, i64(q_max))
        lanes = self.lanes if s <= MAX_INTERLEAVE else 0
        v_lo = v_hi = u_lo
        if lanes:
            v_lo = b.add(lo, i64(q_max))
            v_lo = self._min(b.select(b.icmp_signed(">", v_lo, i64(0)), v_lo, i64(0)), u_hi)
            top = self._min(b.add(hi, i64(q_min)), i64(out_width // s))
            span = b.sub(top, v_lo)
            span = b.select(b.icmp_signed(">", span, i64(0)), span, i64(0))
            v_hi = b.add(v_lo, b.mul(b.udiv(span, i64(lanes)), i64(lanes)))
            with irutil.for_range(b, v_lo, v_hi, lanes, name="cu") as u:
                self._vector(source, y, u, taps, lanes, bias)
        for part in ((u_lo, v_lo), (v_hi, u_hi)):
            with irutil.for_range(b, part[0], part[1], name="cs") as u:
                self._single(source, y, u, lo, hi, taps, bias)

    def _vector(self, source, y, u, taps, lanes, bias):
        """Output columns u * s .. (u + lanes) * s, all inside the row and fed by columns
        inside [lo, hi)."""
        b, dtype, s = self.b, self.dtype, self.geo.strides[-1]
        vector_type = irutil.vector_of(irutil.compute_type(dtype), lanes)
        sums = [None] * s
        for kx, (q, r) in enumerate(taps):
            at = irutil.element_ptr(b, source, dtype, b.add(u, i64(kx * self.chunk - q)))
            value = irutil.load(b, at, dtype, lanes)
            sums[r] = value if sums[r] is None else b.fadd(sums[r], value)
        sums = [irutil.const(vector_type, 0) if v is None else v for v in sums]
        value = _interleave(b, sums)
        at = irutil.element_ptr(b, y, dtype, b.mul(u, i64(s)))
        if bias is not None:
            value = b.fadd(value, irutil.splat(b, bias, lanes * s))
        else:
            value = b.fadd(irutil.load(b, at, dtype, lanes * s), value)
        irutil.store(b, value, at, dtype)

    def _single(self, source, y, u, lo, hi, taps, bias):
        """Output columns u * s + r of every tap whose input column is in [lo, hi) and output
        column inside the row."""
        b, dtype = self.b, self.dtype
        s, out_width = self.geo.strides[-1], self.geo.output[-1]
        for kx, (q, r) in enumerate(taps):
            column = b.sub(u, i64(q))
            o = b.add(b.mul(u, i64(s)), i64(r))
            ok = b.and_(b.icmp_unsigned("<", b.sub(column, lo), b.sub(hi, lo)),
                        b.icmp_unsigned("<", o, i64(out_width)))
            with b.if_then(ok):
                value = irutil.load(b, irutil.element_ptr(
                    b, source, dtype, b.add(column, i64(kx * self.chunk))), dtype)
                at = irutil.element_ptr(b, y, dtype, o)
                if bias is not None:
                    value = b.fadd(value, bias)
                else:
                    value = b.fadd(irutil.load(b, at, dtype), value)
                irutil.store(b, value, at, dtype)

    def _min(self, x, y):
        return self.b.select(self.b.icmp_signed("<", x, y), x, y)


def _interleave(b, vectors):
    """Lane j of the result is lane j // len(vectors) of vector j % len(vectors)."""
    count, lanes = len(vectors), irutil.width_of(vectors[0])
    if count == 1:
        return vectors[0]
    whole = vectors[0]
    for vector in vectors[1:]:
        size = irutil.width_of(whole)
        if size > lanes:        # widen to the concatenation's type with undefined lanes
            vector = b.shuffle_vector(vector, ir.Constant(vector.type, ir.Undefined), ir.Constant(
                ir.VectorType(irutil.I32, size), list(range(lanes)) + [0] * (size - lanes)))
        whole = b.shuffle_vector(whole, vector, ir.Constant(
            ir.VectorType(irutil.I32, size + lanes), list(range(size + lanes))))
    mask = [(j % count) * lanes + j // count for j in range(count * lanes)]
    return b.shuffle_vector(whole, ir.Constant(whole.type, ir.Undefined),
                            ir.Constant(ir.VectorType(irutil.I32, count * lanes), mask))
