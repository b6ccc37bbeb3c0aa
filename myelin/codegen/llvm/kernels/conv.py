"""Convolutions: ``Conv`` computed directly in register tiles.

``Conv`` (NC[D]HW, any number of spatial axes, groups) splits its rows (images x groups x outer
output indices) over tasks; for each row it computes tiles of ``ROWS`` output channels by
``VECTORS`` vectors along the innermost output axis, like the matmul kernel: for each input
channel and kernel tap one vector of the input row is loaded per tile column (with a stride, a
wider vector whose every s-th lane is kept) and multiplied by the weight of each tile row
splatted over the lanes, so each load feeds ``ROWS`` fused multiply-adds. The taps along the
outer axes that fall in the padding are skipped by loop bounds computed per row; along the
innermost axis the vector tiles cover the columns whose taps are all inside the input, and the
border columns (and the few columns left between the vectors) are computed one at a time with
bounds per column. A convolution with a 1x1 kernel, unit strides and no padding is computed
over the flattened spatial axes. The bias is added where the tile is stored.
"""

import math

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil, loops, mathlib
from myelin.codegen.llvm.kernels import fused
from myelin.codegen.llvm.kernels.base import (ArgumentContext, Kernel, inlined_bytes, mark_glue,
                                              task_range)
from myelin.ops import conv as conv_ops
from myelin.ops import fused as fused_ops

ROWS = 4
VECTORS = 3
UNROLL_TAPS = 16        # innermost kernel taps unrolled in Python up to this many
WIDE_STRIDE = 4         # strides up to this load a wide vector and shuffle; larger ones gather


def ival(value):
    """An i64 IR value from an int or an i64 value."""
    return irutil.i64(value) if isinstance(value, int) else value


def add(b, x, y):
    if isinstance(x, int) and isinstance(y, int):
        return x + y
    if isinstance(y, int) and y == 0:
        return x
    if isinstance(x, int) and x == 0:
        return y
    return b.add(ival(x), ival(y))


def sub(b, x, y):
    """``x - y`` of ints or i64 values."""
    if isinstance(x, int) and isinstance(y, int):
        return x - y
    return b.sub(ival(x), ival(y))


def mul(b, x, factor):
    """``x * factor`` for an int ``factor``."""
    if isinstance(x, int):
        return x * factor
    if factor == 1:
        return x
    return b.mul(x, irutil.i64(factor))


def tap_range(b, position, stride, pad, dilation, taps, size):
    """The kernel taps ``k`` in [lo, hi) for which ``position * stride - pad + k * dilation``
    lies in [0, size); ``position`` is an int or an i64 value, so are the results."""
    if isinstance(position, int):
        start = position * stride - pad
        lo = -(start // dilation) if start < 0 else 0      # ceil(-start / dilation)
        room = size - start
        hi = min(taps, -(-room // dilation)) if room > 0 else 0
        return lo, max(lo, hi)
    zero = irutil.i64(0)
    start = b.sub(b.mul(position, irutil.i64(stride)), irutil.i64(pad))
    before = b.sub(zero, start)                                  # taps to skip, times dilation
    lo = b.sdiv(b.add(before, irutil.i64(dilation - 1)), irutil.i64(dilation))
    lo = b.select(b.icmp_signed(">", before, zero), lo, zero)
    room = b.sub(irutil.i64(size), start)
    hi = b.sdiv(b.add(room, irutil.i64(dilation - 1)), irutil.i64(dilation))
    hi = b.select(b.icmp_signed("<", hi, irutil.i64(taps)), hi, irutil.i64(taps))
    hi = b.select(b.icmp_signed(">", room, zero), hi, zero)
    return lo, hi


def nested_loops(b, sizes, body, name="o"):
    """Runtime loops over ``sizes``; calls ``body(indices)`` innermost."""
    def level(axis, indices):
        if axis == len(sizes):
            body(indices)
            return
        with irutil.for_range(b, 0, sizes[axis], name=f"{name}{axis}") as index:
            level(axis + 1, indices + [index])
    level(0, [])


def outlined(ctx, step, emit, glue=False):
    """Emit ``emit(sub_ctx)`` into a function of its own, called from the cell function with
    the addresses of the step's tensors; steps with the same types and attributes share it.

    A network's convolutions and pools are many loop nests; in separate functions (shared by
    repeated layers) LLVM compiles them much faster than inline in one huge function. Small
    constants are compiled into the function (:func:`~.base.inlined`), so steps share it
    only when those have the same values too.
    """
    tensors = list(step.inputs) + list(step.outputs)
    key = ("outlined", step.type, tuple((t.dtype, tuple(t.shape)) for t in tensors),
           tuple(sorted(step.attrs.items())), ctx.target.features,
           tuple(inlined_bytes(t.root()) for t in tensors))

    def build(module):
        # (named by the op alone: the function is the same code for every step sharing it)
        function, builder = irutil.helper_function(
            module, step.type, len(tensors), 0,
            noalias=len({id(t.root()) for t in tensors}) == len(tensors))
        if glue:
            mark_glue(function)
        arguments = {id(t.root()): a for t, a in zip(tensors, function.args)}
        emit(ArgumentContext(builder, ctx.target, arguments, ctx, ctx.threads))
        builder.ret_void()
        return function

    function = ctx.function(key, build)
    ctx.builder.call(function, [ctx.pointer(t) for t in tensors])


class OutlinedKernel(Kernel):
    """A kernel whose code (``emit_body``) goes into a function of its own: see outlined()."""

    def emit(self, ctx, step):
        outlined(ctx, step, lambda sub: self.emit_body(sub, step), self.glue(step))

    def emit_body(self, ctx, step):
        raise NotImplementedError

    def glue(self, step):
        """True if ``emit_body`` only calls the functions doing ``step``'s work, through
        ``ctx.parallel(..., glue=True)`` (:func:`~.base.mark_glue`)."""
        return False


def supported_floats(step):
    """True if ``step``'s tensors all have one float dtype and its images are plain (not in
    blocks of channels: :mod:`conv_blocked` computes those)."""
    tensors = step.inputs + step.outputs
    return (all(t.dtype == tensors[0].dtype for t in tensors)
            and tensors[0].dtype in ("float32", "float64")
            and not conv_ops.channel_block(step))


class ConvKernel(OutlinedKernel):
    """``Conv`` with any attributes ONNX allows, float32 and float64, and ``FusedConv`` (its
    epilogue applied to each vector of outputs before it is stored)."""

    name = "Conv"
    shares_code = True

    def supports(self, step, target):
        if step.type == "FusedConv" and fused.epilogue(step) is None:
            return False
        return (step.type in ("Conv", "FusedConv") and len(step.inputs[0].shape) >= 3
                and supported_floats(step))

    def flops(self, step):
        w = step.inputs[1]
        return 2 * step.outputs[0].elements * math.prod(w.shape[1:])

    def emit_body(self, ctx, step):
        conv = fused_ops.conv_part(step)
        g = conv_ops.geometry(conv)
        geo = dict(inp=list(g.input), out=list(g.output), kernel=list(g.kernel),
                   strides=list(g.strides), dilations=list(g.dilations),
                   pads=list(g.pads_begin))
        if (all(k == 1 for k in g.kernel) and all(s == 1 for s in g.strides)
                and not any(g.pads_begin + g.pads_end)):
            plane = math.prod(g.input)
            geo = dict(inp=[plane], out=[plane], kernel=[1], strides=[1], dilations=[1],
                       pads=[0])
        # Tasks take runs of rows: (image, group, outer output indices) flattened.
        outer = [g.batch, g.group] + geo["out"][:-1]
        units = math.prod(outer)
        tasks, size = ctx.chunks(units, self.flops(step))

        def task(sub, index):
            b = sub.builder
            start, stop = task_range(b, index, size, units)
            with irutil.for_range(b, start, stop, name="unit") as unit:
                indices = []
                for extent in reversed(outer[1:]):
                    indices.insert(0, b.urem(unit, irutil.i64(extent)))
                    unit = b.udiv(unit, irutil.i64(extent))
                indices.insert(0, unit)
                self._emit_row(sub, step, conv, g, geo, indices)

        ctx.parallel(f"Conv.{step.name}", step.inputs + step.outputs, tasks, task)

    def _emit_row(self, ctx, step, conv, g, geo, indices):
        """One output row: ``indices`` are the image, the group and the outer output axes."""
        x, w, y = step.inputs[0], step.inputs[1], step.outputs[0]
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        epilogue = fused.epilogue(step) if step.type == "FusedConv" else None
        extras = [(ctx.pointer(e), e.shape == y.shape)
                  for e in step.inputs[fused_ops.first_extra(step):]] if epilogue else []
        dtype = y.dtype
        cg, mg = g.in_channels // g.group, g.out_channels // g.group
        in_plane, out_plane = math.prod(g.input), math.prod(g.output)
        ksize = math.prod(g.kernel)
        in_strides = loops.contiguous_strides(geo["inp"])
        out_strides = loops.contiguous_strides(geo["out"])
        k_strides = loops.contiguous_strides(geo["kernel"])
        b = ctx.builder
        ptrs = dict(x=ctx.pointer(x), w=ctx.pointer(w), y=ctx.pointer(y),
                    b=ctx.pointer(bias) if bias is not None else None)
        rank = len(geo["inp"])
        outer = rank - 1
        lanes_full = loops.lanes(ctx.target, dtype)
        s_in, p_in, d_in, k_in = (geo[key][-1] for key in ("strides", "pads", "dilations",
                                                             "kernel"))
        n_in, n_out = geo["inp"][-1], geo["out"][-1]

        # Columns of the innermost axis computed in vectors: all taps inside the input, and a
        # stride's wide load (s lanes per output) not past the row's end.
        first = -(-p_in // s_in)
        over = s_in - 1 if 1 < s_in <= WIDE_STRIDE else 0
        last = (n_in - 1 + p_in - (k_in - 1) * d_in - over)
        end = min(n_out, last // s_in + 1) if last >= 0 else 0
        lanes = lanes_full
        while lanes > 4 and lanes > end - first:
            lanes //= 2
        segments = []       # (start, tiles, vectors, lanes)
        position = first
        if lanes > 1 and end > first:
            for vectors, width in ((VECTORS, lanes), (1, lanes), (1, lanes // 2)):
                if width < 2:
                    continue
                count = (end - position) // (vectors * width)
                if count:
                    segments.append((position, count, vectors, width))
                    position += count * vectors * width
        vector_end = position if segments else first
        if not segments:
            first = vector_end = 0
        scalar_count = n_out - (vector_end - first)

        def tile(bases, ranges, m0, rows, column, vectors, width, border):
            """Compute and store output channels m0..m0+rows at ``column`` (+ vectors*width)."""
            scalar_type = irutil.compute_type(dtype)
            acc_type = irutil.vector_of(scalar_type, width)
            zero = irutil.const(acc_type, 0)
            x_base, y_base, w_base = bases[:3]
            if border:
                inner = tap_range(b, column, s_in, p_in, d_in, k_in, n_in)
            column_in = add(b, mul(b, column, s_in), -p_in)

            def innermost(x_index, w_index, accs, kw):
                at = add(b, x_index, add(b, column_in, mul(b, kw, d_in)))
                w_at = add(b, w_index, kw)
                values = []
                for v in range(vectors):
                    start = add(b, at, v * width * s_in)
                    values.append(self._load_strided(b, ptrs["x"], dtype, start, width, s_in))
                out = list(accs)
                for r in range(rows):
                    weight = irutil.load(b, irutil.element_ptr(
                        b, ptrs["w"], dtype, ival(add(b, w_at, r * cg * ksize))), dtype)
                    weight = irutil.splat(b, weight, width)
                    for v in range(vectors):
                        out[r * vectors + v] = mathlib.fmuladd(b, weight, values[v],
                                                               out[r * vectors + v])
                return out

            def taps(level, x_index, w_index, accs):
                if level == outer:
                    if border or k_in > UNROLL_TAPS:
                        lo, hi = inner if border else (0, k_in)
                        with irutil.accumulating_loop(b, lo, hi, accs, name="kw") as loop:
                            loop.set_next(innermost(x_index, w_index, loop.values, loop.index))
                        return loop.results
                    for kw in range(k_in):
                        accs = innermost(x_index, w_index, accs, kw)
                    return accs
                lo, hi = ranges[level]
                with irutil.accumulating_loop(b, lo, hi, accs, name=f"k{level}") as loop:
                    k = loop.index
                    xi = add(b, x_index, mul(b, k, geo["dilations"][level] * in_strides[level]))
                    wi = add(b, w_index, mul(b, k, k_strides[level]))
                    loop.set_next(taps(level + 1, xi, wi, loop.values))
                return loop.results

            with irutil.accumulating_loop(b, 0, cg, [zero] * (rows * vectors), name="c") as loop:
                c = loop.index
                xi = add(b, x_base, mul(b, c, in_plane))
                wi = add(b, w_base, add(b, mul(b, c, ksize), mul(b, m0, cg * ksize)))
                loop.set_next(taps(0, xi, wi, loop.values))
            results = loop.results
            for r in range(rows):
                channel = add(b, m0, r)
                if ptrs["b"] is not None:
                    term = irutil.load(b, irutil.element_ptr(
                        b, ptrs["b"], dtype, ival(add(b, bases[3], channel))), dtype)
                    term = irutil.splat(b, term, width)
                for v in range(vectors):
                    value = results[r * vectors + v]
                    if ptrs["b"] is not None:
                        value = b.fadd(value, term)
                    at = add(b, y_base, add(b, mul(b, channel, out_plane),
                                            add(b, column, v * width)))
                    if epilogue is not None:
                        # Extra inputs have the output's shape, or one element.
                        values = [irutil.load(b, irutil.element_ptr(b, e, dtype, ival(at)),
                                              dtype, width) if full
                                  else irutil.splat(b, irutil.load(b, e, dtype), width)
                                  for e, full in extras]
                        value = epilogue.apply(b, [value] + values)
                    irutil.store(b, value, irutil.element_ptr(b, ptrs["y"], dtype, ival(at)),
                                 dtype)

        def row(image_group, indices):
            n_index, grp = image_group
            channel_in = add(b, mul(b, n_index, g.in_channels), mul(b, grp, cg))
            x_base = mul(b, channel_in, in_plane)
            channel_out = add(b, mul(b, n_index, g.out_channels), mul(b, grp, mg))
            y_base = mul(b, channel_out, out_plane)
            w_base = mul(b, grp, mg * cg * ksize)
            b_base = mul(b, grp, mg)
            ranges = []
            for axis, o in enumerate(indices):
                ranges.append(tap_range(b, o, geo["strides"][axis], geo["pads"][axis],
                                        geo["dilations"][axis], geo["kernel"][axis],
                                        geo["inp"][axis]))
                start = add(b, mul(b, o, geo["strides"][axis]), -geo["pads"][axis])
                x_base = add(b, x_base, mul(b, start, in_strides[axis]))
                y_base = add(b, y_base, mul(b, o, out_strides[axis]))
            bases = (x_base, y_base, w_base, b_base)

            def channel_block(m0, rows):
                for start, count, vectors, width in segments:
                    with irutil.for_range(b, 0, count, name="t") as t:
                        column = add(b, mul(b, t, vectors * width), start)
                        tile(bases, ranges, m0, rows, column, vectors, width, False)
                if scalar_count:
                    with irutil.for_range(b, 0, scalar_count, name="s") as j:
                        if vector_end > first:
                            skip = b.icmp_signed(">=", j, irutil.i64(first))
                            column = b.select(skip, b.add(j, irutil.i64(vector_end - first)), j)
                        else:
                            column = j
                        tile(bases, ranges, m0, rows, column, 1, 1, True)

            full = mg - mg % ROWS
            if full:
                with irutil.for_range(b, 0, full, ROWS, name="m") as m0:
                    channel_block(m0, ROWS)
            if mg > full:
                channel_block(full, mg - full)

        row(indices[:2], indices[2:])

    @staticmethod
    def _load_strided(b, base, dtype, start, width, stride):
        """``width`` elements at ``start``, ``start + stride``, ... as a vector (or scalar)."""
        if width == 1 or stride == 1:
            return irutil.load(b, irutil.element_ptr(b, base, dtype, ival(start)), dtype, width)
        if stride <= WIDE_STRIDE:
            wide = irutil.load(b, irutil.element_ptr(b, base, dtype, ival(start)), dtype,
                               width * stride)
            return irutil.every_nth(b, wide, stride, width)
        vector = ir.Constant(irutil.vector_of(irutil.compute_type(dtype), width), ir.Undefined)
        for lane in range(width):
            at = irutil.element_ptr(b, base, dtype, ival(add(b, start, lane * stride)))
            vector = b.insert_element(vector, irutil.load(b, at, dtype),
                                      ir.Constant(irutil.I32, lane))
        return vector
