"""Pooling and local response normalization.

``PoolKernel`` computes MaxPool (with its Indices output), AveragePool, LpPool and the global
pools one output element at a time (a NaN in a MaxPool window gives NaN, and its Indices the
first NaN, as the reference): for each window the taps inside the input are found by
loop bounds per axis (so padding and ceil_mode windows cost nothing), folded into a scalar
accumulator, and finished (divided by the count, or raised to 1/p). A MaxPool (without
Indices) or AveragePool of any rank with stride 1 or 2 along its last axis computes the
columns whose windows lie inside the input row in vectors instead, one load (and a shuffle,
for stride 2) per tap; only the border columns go one at a time. GlobalAveragePool and
GlobalMaxPool fold each plane in vectors, with several accumulators. ``LRNKernel`` runs in
vectors over the spatial positions of each channel, summing the squares over the channel
window.
"""

import math

from myelin.codegen.llvm import elementwise, irutil, loops, mathlib
from myelin.codegen.llvm.kernels.base import task_range
from myelin.codegen.llvm.kernels.conv import (OutlinedKernel, add, ival, mul, nested_loops,
                                              supported_floats, tap_range)
from myelin.codegen.llvm.kernels.reduction import horizontal
from myelin.flow.attributes import Attributes
from myelin.ops import conv as conv_ops
from myelin.ops.registry import attribute


GLOBAL_ACCUMULATORS = 4     # vector accumulators of a global pool's plane


class PoolKernel(OutlinedKernel):
    """MaxPool, AveragePool, LpPool, GlobalMaxPool, GlobalAveragePool and GlobalLpPool."""

    TYPES = ("MaxPool", "AveragePool", "LpPool", "GlobalMaxPool", "GlobalAveragePool",
             "GlobalLpPool")
    name = "Pool"
    shares_code = True

    def supports(self, step, target):
        x = step.inputs[0]
        if step.type not in self.TYPES or len(x.shape) < 3:
            return False
        if len(step.outputs) == 2:
            return (step.type == "MaxPool" and step.outputs[1].dtype == "int64"
                    and x.dtype == step.outputs[0].dtype in ("float32", "float64"))
        return len(step.outputs) == 1 and supported_floats(step)

    def kernel_name(self, step):
        return step.type

    def flops(self, step):
        g = conv_ops.geometry(step)
        return step.outputs[0].elements * math.prod(g.kernel)

    def emit_body(self, ctx, step):
        g = conv_ops.geometry(step)
        planes = g.batch * g.in_channels
        tasks, size = ctx.chunks(planes, self.flops(step))
        ctx.parallel(f"{step.type}.{step.name}", step.inputs + step.outputs, tasks,
                     lambda sub, index: self._planes(sub, step, g, index, size))

    def _planes(self, ctx, step, g, index, size):
        """The pooled planes (image x channel) [index * size, (index + 1) * size)."""
        kind = step.type.replace("Global", "")
        x, y = step.inputs[0], step.outputs[0]
        indices = step.outputs[1] if len(step.outputs) == 2 else None
        dtype = y.dtype
        b = ctx.builder
        xp, yp = ctx.pointer(x), ctx.pointer(y)
        ip = ctx.pointer(indices) if indices is not None else None
        typ = irutil.compute_type(dtype)
        in_plane, out_plane = math.prod(g.input), math.prod(g.output)
        in_strides = loops.contiguous_strides(g.input)
        out_strides = loops.contiguous_strides(g.output)
        # Strides of the flat index Indices reports: row-major, or column-major spatial axes.
        column_major = kind == "MaxPool" and step.attrs.get_int("storage_order", 0) == 1
        index_strides = (loops.contiguous_strides(g.input[::-1])[::-1] if column_major
                         else in_strides)
        p = attribute(step, "p") if kind == "LpPool" else None
        include_pad = kind == "AveragePool" and step.attrs.get_int("count_include_pad", 0)

        def element(nc, outs):
            ranges = [tap_range(b, o, g.strides[a], g.pads_begin[a], g.dilations[a],
                                g.kernel[a], g.input[a]) for a, o in enumerate(outs)]
            x_start = mul(b, nc, in_plane)
            index_start = x_start
            for a, o in enumerate(outs):
                start = add(b, mul(b, o, g.strides[a]), -g.pads_begin[a])
                x_start = add(b, x_start, mul(b, start, in_strides[a]))
                index_start = add(b, index_start, mul(b, start, index_strides[a]))
            if kind == "MaxPool":
                initial = [irutil.const(typ, -math.inf)]
                if ip is not None:
                    initial.append(irutil.i64(-1))
            else:
                initial = [irutil.const(typ, 0)]

            def fold(values, x_at, index_at):
                v = irutil.load(b, irutil.element_ptr(b, xp, dtype, ival(x_at)), dtype)
                if kind == "MaxPool":
                    if ip is None:
                        return [_maximum(b, values[0], v, dtype)]
                    # The first greatest tap, a NaN above any number (as NumPy's argmax).
                    better = b.and_(b.fcmp_unordered(">", v, values[0]),
                                    b.fcmp_ordered("ord", values[0], values[0]))
                    better = b.or_(better, b.icmp_signed("<", values[1], irutil.i64(0)))
                    return [b.select(better, v, values[0]),
                            b.select(better, ival(index_at), values[1])]
                if kind == "AveragePool":
                    return [b.fadd(values[0], v)]
                a = mathlib.intrinsic(b, "llvm.fabs", [v])
                if p == 1:
                    term = a
                elif p == 2:
                    term = b.fmul(a, a)
                else:
                    term = mathlib.pow(b, a, irutil.const(typ, p))
                return [b.fadd(values[0], term)]

            def taps(axis, values, x_at, index_at):
                if axis == g.rank:
                    return fold(values, x_at, index_at)
                lo, hi = ranges[axis]
                with irutil.accumulating_loop(b, lo, hi, values, name=f"k{axis}") as loop:
                    k = loop.index
                    xi = add(b, x_at, mul(b, k, g.dilations[axis] * in_strides[axis]))
                    ii = add(b, index_at, mul(b, k, g.dilations[axis] * index_strides[axis]))
                    loop.set_next(taps(axis + 1, loop.values, xi, ii))
                return loop.results

            results = taps(0, initial, x_start, index_start)
            value = results[0]
            if kind == "AveragePool":
                count = irutil.i64(1)
                for a, o in enumerate(outs):
                    if include_pad:
                        lo, hi = tap_range(b, o, g.strides[a], 0, g.dilations[a], g.kernel[a],
                                           g.input[a] + g.pads_begin[a] + g.pads_end[a])
                    else:
                        lo, hi = ranges[a]
                    count = b.mul(count, b.sub(ival(hi), ival(lo)))
                value = b.fdiv(value, b.sitofp(count, typ))
            elif kind == "LpPool":
                if p == 2:
                    value = mathlib.intrinsic(b, "llvm.sqrt", [value])
                elif p != 1:
                    value = mathlib.pow(b, value, irutil.const(typ, 1.0 / p))
            y_at = mul(b, nc, out_plane)
            for a, o in enumerate(outs):
                y_at = add(b, y_at, mul(b, o, out_strides[a]))
            irutil.store(b, value, irutil.element_ptr(b, yp, dtype, ival(y_at)), dtype)
            if ip is not None:
                irutil.store(b, results[1], irutil.element_ptr(b, ip, "int64", ival(y_at)),
                             "int64")

        start, end = task_range(b, index, size, g.batch * g.in_channels)
        lanes = loops.lanes(ctx.target, dtype)
        first, last = (_vector_columns(g, lanes) if kind in ("MaxPool", "AveragePool")
                       and ip is None else (0, 0))
        vectors = -(-(last - first) // lanes)

        def row(nc, outer):
            # Border columns one at a time, the others in vectors, the last of which ends at
            # ``last`` (computing some outputs twice, to the same values).
            for lo, hi in ((0, first), (last, g.output[-1])):
                if lo < hi:
                    with irutil.for_range(b, lo, hi, name="ox") as ox:
                        element(nc, outer + [ox])
            with irutil.for_range(b, 0, vectors, name="ov") as v:
                ox = b.add(b.mul(v, irutil.i64(lanes)), irutil.i64(first))
                final = irutil.i64(last - lanes)
                ox = b.select(b.icmp_signed("<", ox, final), ox, final)
                _pool_vector(ctx, step, g, lanes, include_pad, nc, outer, ox)

        with irutil.for_range(b, start, end, name="nc") as nc:
            if step.type in ("GlobalAveragePool", "GlobalMaxPool") and lanes > 1:
                _global_plane(ctx, step, in_plane, lanes, nc)
            elif not vectors:
                nested_loops(b, list(g.output), lambda outs: element(nc, outs), name="o")
            else:
                nested_loops(b, list(g.output[:-1]), lambda outer: row(nc, outer), name="o")


def _global_plane(ctx, step, size, lanes, nc):
    """Output ``nc`` of a global average or max pool: the ``size`` elements of input plane
    ``nc`` folded into ``GLOBAL_ACCUMULATORS`` vectors (independent chains), then across."""
    b, dtype = ctx.builder, step.outputs[0].dtype
    xp, yp = ctx.pointer(step.inputs[0]), ctx.pointer(step.outputs[0])
    typ = irutil.compute_type(dtype)
    if step.type == "GlobalMaxPool":
        identity = -math.inf
        fold = lambda x, y: _maximum(b, x, y, dtype)       # noqa: E731
    else:
        identity = 0.0
        fold = b.fadd
    base = b.mul(nc, irutil.i64(size))

    def load(at, width):
        return irutil.load(b, irutil.element_ptr(b, xp, dtype, b.add(base, ival(at))), dtype,
                           width)

    chunk = GLOBAL_ACCUMULATORS * lanes
    accs = [irutil.const(irutil.vector_of(typ, lanes), identity)] * GLOBAL_ACCUMULATORS
    if size >= chunk:
        with irutil.accumulating_loop(b, 0, size // chunk, accs, name="gc") as loop:
            at = b.mul(loop.index, irutil.i64(chunk))
            loop.set_next([fold(acc, load(b.add(at, irutil.i64(i * lanes)), lanes))
                           for i, acc in enumerate(loop.values)])
        accs = loop.results
    done = size - size % chunk
    for i in range((size - done) // lanes):
        accs[i] = fold(accs[i], load(done + i * lanes, lanes))
    while len(accs) > 1:
        accs = [fold(x, y) for x, y in zip(accs[::2], accs[1::2])]
    value = horizontal(b, accs[0], lambda bb, x, y: fold(x, y))
    for at in range(size - size % lanes, size):
        value = fold(value, load(at, 1))
    if step.type == "GlobalAveragePool":
        value = b.fdiv(value, irutil.const(typ, size))
    irutil.store(b, value, irutil.element_ptr(b, yp, dtype, nc), dtype)


def _maximum(builder, x, y, dtype):
    """The greater of ``x`` and ``y``, NaN if either is (the lowering of Maximum)."""
    return elementwise.emit(builder, "Maximum", [x, y], [dtype, dtype], dtype, Attributes())


def _vector_columns(g, lanes):
    """The output columns [first, last) of a pool (strides 1 or 2 along the last axis) whose
    windows lie inside the input row far enough from its end that each tap row of ``lanes``
    outputs is one load, or (0, 0) where they are fewer than ``lanes``."""
    if g.strides[-1] > 2 or lanes < 2:
        return 0, 0
    width, kw = g.input[-1], g.kernel[-1]
    stride, dilation, pad = g.strides[-1], g.dilations[-1], g.pads_begin[-1]
    first = -(-pad // stride)
    # A vector at column o loads input columns o*stride - pad + tap*dilation onwards,
    # stride * lanes of them for the last tap.
    last_start = min((width + pad - (kw - 1) * dilation - stride * lanes) // stride,
                     g.output[-1] - lanes)
    if last_start < first:
        return 0, 0
    return first, last_start + lanes


def _pool_vector(ctx, step, g, lanes, include_pad, nc, outer, ox):
    """Outputs [ox, ox + lanes) of the row at output coordinates ``outer`` (all axes but the
    last) of plane ``nc`` of a MaxPool or AveragePool whose windows lie inside the input row:
    the maximum or mean of one load per tap."""
    b, dtype = ctx.builder, step.outputs[0].dtype
    x, y = step.inputs[0], step.outputs[0]
    kw, sw, dw, pw = g.kernel[-1], g.strides[-1], g.dilations[-1], g.pads_begin[-1]
    in_strides = loops.contiguous_strides(g.input)
    out_strides = loops.contiguous_strides(g.output)
    vector = irutil.vector_of(irutil.compute_type(dtype), lanes)
    maximum = step.type == "MaxPool"
    ranges = [tap_range(b, o, g.strides[a], g.pads_begin[a], g.dilations[a], g.kernel[a],
                        g.input[a]) for a, o in enumerate(outer)]
    start = b.add(b.mul(nc, irutil.i64(math.prod(g.input))),
                  b.sub(b.mul(ox, irutil.i64(sw)), irutil.i64(pw)))
    for a, o in enumerate(outer):
        origin = b.sub(b.mul(o, irutil.i64(g.strides[a])), irutil.i64(g.pads_begin[a]))
        start = b.add(start, b.mul(origin, irutil.i64(in_strides[a])))
    xp = ctx.pointer(x)

    def fold(axis, total, line):
        """``total`` folded with the taps of the window's axes from ``axis`` on, the earlier
        axes' taps fixed (their row starting at ``line``)."""
        if axis == len(outer):
            for kx in range(kw):
                at = irutil.element_ptr(b, xp, dtype, b.add(line, irutil.i64(kx * dw)))
                value = irutil.load(b, at, dtype, sw * lanes)
                if sw > 1:
                    value = irutil.every_nth(b, value, sw, lanes)
                total = _maximum(b, total, value, dtype) if maximum else b.fadd(total, value)
            return total
        lo, hi = ranges[axis]
        tap_stride = irutil.i64(g.dilations[axis] * in_strides[axis])
        with irutil.accumulating_loop(b, lo, hi, [total], name=f"k{axis}") as loop:
            at = b.add(line, b.mul(loop.index, tap_stride))
            loop.set_next([fold(axis + 1, loop.values[0], at)])
        return loop.results[0]

    total = fold(0, irutil.const(vector, -math.inf if maximum else 0), start)
    if not maximum:
        count = irutil.i64(kw)
        for a, o in enumerate(outer):
            lo, hi = ranges[a]
            if include_pad:
                lo, hi = tap_range(b, o, g.strides[a], 0, g.dilations[a], g.kernel[a],
                                   g.input[a] + g.pads_begin[a] + g.pads_end[a])
            count = b.mul(count, b.sub(hi, lo))
        total = b.fdiv(total, irutil.splat(b, b.sitofp(count, vector.element), lanes))
    at = b.add(b.mul(nc, irutil.i64(math.prod(g.output))), ox)
    for a, o in enumerate(outer):
        at = b.add(at, b.mul(o, irutil.i64(out_strides[a])))
    irutil.store(b, total, irutil.element_ptr(b, ctx.pointer(y), dtype, at), dtype)


class LRNKernel(OutlinedKernel):
    """``LRN`` across channels, in vectors over each channel's spatial positions."""

    name = "LRN"
    shares_code = True

    def supports(self, step, target):
        return (step.type == "LRN" and len(step.inputs[0].shape) >= 2
                and supported_floats(step))

    def flops(self, step):
        return step.outputs[0].elements * (2 * step.attrs.get_int("size") + 20)

    def emit_body(self, ctx, step):
        x, y = step.inputs[0], step.outputs[0]
        dtype = y.dtype
        batch, channels = x.shape[:2]
        plane = math.prod(x.shape[2:])
        size = step.attrs.get_int("size")
        alpha, beta, bias = (attribute(step, name) for name in ("alpha", "beta", "bias"))
        before, after = (size - 1) // 2, -(-(size - 1) // 2)
        b = ctx.builder
        xp, yp = ctx.pointer(x), ctx.pointer(y)
        typ = irutil.compute_type(dtype)
        lanes = loops.lanes(ctx.target, dtype)
        if plane < lanes:
            lanes = 1
        full = plane - plane % lanes

        def compute(base, lo, hi, at, width):
            vtype = irutil.vector_of(typ, width)
            with irutil.accumulating_loop(b, lo, hi, [irutil.const(vtype, 0)], name="w") as loop:
                index = b.add(b.mul(loop.index, irutil.i64(plane)), at)
                v = irutil.load(b, irutil.element_ptr(b, xp, dtype, b.add(base, index)), dtype,
                                width)
                loop.set_next([mathlib.fmuladd(b, v, v, loop.values[0])])
            total = loop.results[0]
            scaled = mathlib.fmuladd(b, total, irutil.const(vtype, alpha / size),
                                     irutil.const(vtype, bias))
            # scaled ** -beta
            factor = mathlib.exp(b, b.fmul(mathlib.log(b, scaled), irutil.const(vtype, -beta)))
            own = b.add(base, b.add(b.mul(channel_value[0], irutil.i64(plane)), at))
            v = irutil.load(b, irutil.element_ptr(b, xp, dtype, own), dtype, width)
            irutil.store(b, b.fmul(v, factor), irutil.element_ptr(b, yp, dtype, own), dtype)

        channel_value = [None]
        with irutil.for_range(b, 0, batch, name="n") as n:
            base = b.mul(n, irutil.i64(channels * plane))
            with irutil.for_range(b, 0, channels, name="c") as c:
                channel_value[0] = c
                lo = b.sub(c, irutil.i64(before))
                lo = b.select(b.icmp_signed("<", lo, irutil.i64(0)), irutil.i64(0), lo)
                hi = b.add(c, irutil.i64(after + 1))
                hi = b.select(b.icmp_signed(">", hi, irutil.i64(channels)),
                              irutil.i64(channels), hi)
                if full:
                    with irutil.for_range(b, 0, full, lanes, name="v") as at:
                        compute(base, lo, hi, at, lanes)
                if plane > full:
                    with irutil.for_range(b, full, plane, name="s") as at:
                        compute(base, lo, hi, at, 1)

