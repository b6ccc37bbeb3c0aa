"""Depthwise 2-D convolution (one input channel per group, any channel multiplier) in whole
vectors, split over threads.

The work is split into tasks by image, input channel and band of output rows. For each of
its pieces a task copies the input rows the band reads into a zero-padded buffer on the
stack, so every tap of every output column lies inside it; with a horizontal stride s each
buffer row holds s phases (padded column s * j + p at j of phase p), so the taps of
consecutive outputs are consecutive elements. Then, for each output channel of the input
channel, it computes ``ROWS`` output rows at a time, one vector of columns at a time, the
weights splatted in registers: each vector loaded from the buffer feeds every row of the group
that uses it. The last vector of a row is stored in pieces of halving widths (masked stores
were twice as slow on Zen 3), its epilogue inputs read through a mask; the bias and the fused
epilogue are applied before the store.

A depthwise ``ConvInteger`` (:mod:`myelin.ops.quantized`: the bytes of a quantized network,
less their zero point, by int8 or int16 weights) runs on the same code in float32: the copy
converts the bytes to ``x - x_zero`` (the padding 0), the weights are their integers, and
every product and sum is an integer below 2 ** 24, so exact (:func:`_exact`), as the int32
sums it stands for. The sums are then dequantized (times the scale plus the bias of their
channel), go through the op's recipe and are stored in its output type: the bytes the next
quantized layer reads.
"""

import math

import llvmlite.ir as ir
import numpy as np

from myelin.codegen.llvm import elementwise, irutil, loops, mathlib
from myelin.codegen.llvm.kernels import fused
from myelin.codegen.llvm.kernels.base import task_range
from myelin.codegen.llvm.kernels.conv import OutlinedKernel, ival, supported_floats
from myelin.codegen.llvm.kernels.conv_int8 import dequantize, requantization
from myelin.ops import conv as conv_ops
from myelin.ops import fused as fused_ops
from myelin.ops import quantized as quantized_ops

ROWS = 4                 # output rows computed together
TAPS_PER_GROUP = 128     # fewer rows per group for large kernels (the group is unrolled)
MAX_STRIDE = 4           # horizontal strides up to this are split into phases
BUFFER_BYTES = 32 << 10  # the padded band of input rows a task copies
MAX_BUFFER_BYTES = 256 << 10
EXACT = 2 ** 24          # float32 holds every integer up to this


def _geometry(step):
    part = quantized_ops.conv_part if step.type == "ConvInteger" else fused_ops.conv_part
    return conv_ops.geometry(part(step))


def _compute_type(step):
    """The type the kernel computes in: a ConvInteger's scale's (its sums exact in it)."""
    return step.inputs[3].dtype if step.type == "ConvInteger" else step.outputs[0].dtype


def _exact(step):
    """True if a ConvInteger's sums are exact in its compute type: every byte less the zero
    point is at most 255 in magnitude, so the taps' products sum to under 2 ** 24."""
    weights = np.abs(np.asarray(step.inputs[1].constant_data(), np.int64))
    return 255 * int(weights.reshape(len(weights), -1).sum(axis=1).max(initial=0)) < EXACT


def _lanes(target, dtype, width):
    """Lanes of the vectors along an output row of ``width`` columns: the target's, or as few
    as hold the row where it is narrower (a 7-column row in 8 lanes, not 16), at least 4."""
    lanes = loops.lanes(target, dtype)
    while lanes > 4 and lanes // 2 >= width:
        lanes //= 2
    return lanes


class _Shape:
    """The sizes of the computation of a depthwise step for ``lanes`` lanes."""

    def __init__(self, g, lanes, itemsize):
        self.g = g
        (self.oh, self.ow), (self.kh, self.kw) = g.output, g.kernel
        (self.sh, self.sw), (self.dh, self.dw) = g.strides, g.dilations
        self.lanes = lanes
        self.vectors = -(-self.ow // lanes)
        shift = (self.kw - 1) * self.dw // self.sw
        self.phase = -(-(self.vectors * lanes + shift) // lanes) * lanes   # elements
        self.row = self.sw * self.phase
        self.rows = max(1, min(ROWS, TAPS_PER_GROUP // (self.kh * self.kw), self.oh))
        self.itemsize = itemsize

    def span(self, rows):
        """Input rows read by ``rows`` consecutive output rows."""
        return (rows - 1) * self.sh + (self.kh - 1) * self.dh + 1

    def band(self, limit):
        """The most output rows (all, or a multiple of ``rows``) whose span fits ``limit``
        bytes of buffer; 0 if not even one group's does."""
        fit = (limit // (self.row * self.itemsize) - (self.kh - 1) * self.dh - 1) // self.sh + 1
        if fit >= self.oh:
            return self.oh
        return fit - fit % self.rows if fit >= self.rows else 0


class DepthwiseConvKernel(OutlinedKernel):
    """2-D ``Conv``, ``FusedConv`` and dequantizing ``ConvInteger`` with as many groups as
    input channels, float32 and float64."""

    name = "ConvDepthwise"
    shares_code = True

    def supports(self, step, target):
        if len(step.inputs[0].shape) != 4:
            return False
        if step.type == "ConvInteger":
            if (len(step.inputs) < 5 or step.inputs[1].constant_data() is None
                    or step.inputs[3].dtype != "float32" or not _exact(step)):
                return False
        elif step.type not in ("Conv", "FusedConv") or not supported_floats(step):
            return False
        if step.type == "FusedConv" and fused.epilogue(step) is None:
            return False
        g = _geometry(step)
        if g.group != g.in_channels or g.strides[1] > MAX_STRIDE:
            return False
        dtype = _compute_type(step)
        shape = _Shape(g, _lanes(target, dtype, g.output[1]), np.dtype(dtype).itemsize)
        return shape.band(MAX_BUFFER_BYTES) > 0

    def flops(self, step):
        return 2 * step.outputs[0].elements * math.prod(step.inputs[1].shape[1:])

    def loaded_inputs(self, step):
        return (2,) if step.type == "ConvInteger" else ()     # the zero point

    def emit_body(self, ctx, step):
        g = _geometry(step)
        dtype = _compute_type(step)
        s = _Shape(g, _lanes(ctx.target, dtype, g.output[1]), np.dtype(dtype).itemsize)
        band = s.band(BUFFER_BYTES) or s.band(MAX_BUFFER_BYTES)
        planes = g.batch * g.in_channels
        # Bands small enough that there are tasks for every thread.
        wanted, _ = ctx.chunks(planes * -(-s.oh // s.rows), self.flops(step))
        per_plane = -(-wanted // planes)
        if per_plane > 1:
            split = -(-s.oh // per_plane)
            band = min(band, max(s.rows, split + -split % s.rows))
        bands = -(-s.oh // band)
        units = planes * bands
        tasks, size = ctx.chunks(units, self.flops(step))

        def task(sub, index):
            b = sub.builder
            start, stop = task_range(b, index, size, units)
            buffer = irutil.stack_array(b, irutil.storage_type(dtype), s.span(band) * s.row)
            with irutil.for_range(b, start, stop, name="unit") as unit:
                _Piece(sub, step, s, band, bands, buffer, unit).emit()

        ctx.parallel(f"ConvDepthwise.{step.name}", step.inputs + step.outputs, tasks, task)


class _Piece:
    """The code of one unit of work: one input plane's band of output rows, for every output
    channel of that input channel."""

    def __init__(self, ctx, step, shape, band, bands, buffer, unit):
        self.ctx, self.step, self.s, self.band, self.bands = ctx, step, shape, band, bands
        self.buffer, self.b = buffer, ctx.builder
        self.dtype = _compute_type(step)
        self.integer = step.type == "ConvInteger"
        self.x_dtype = step.inputs[0].dtype
        b = self.b
        self.plane = b.udiv(unit, irutil.i64(bands))
        self.index = b.urem(unit, irutil.i64(bands))
        self.first = b.mul(self.index, irutil.i64(band))           # first output row
        self.vector = irutil.vector_of(irutil.compute_type(self.dtype), shape.lanes)
        self.zero = irutil.const(self.vector, 0)
        self.x_zero = self.recipe = None
        self.scalars = []           # a ConvInteger's recipe's one-element inputs, splatted
        if self.integer:
            x_zero = irutil.load(b, ctx.pointer(step.inputs[2]), self.x_dtype)
            self.x_zero = self._float(x_zero, self.x_dtype)
            self.recipe = requantization(step)
            if self.recipe is not None:
                self.scalars = [irutil.splat(b, irutil.load(b, ctx.pointer(v), v.dtype),
                                             shape.lanes)
                                for v in quantized_ops.recipe_inputs(step)]

    def _float(self, value, dtype):
        """Integers ``value`` of ``dtype`` as the compute type."""
        typ = irutil.compute_type(self.dtype)
        if isinstance(value.type, ir.VectorType):
            typ = ir.VectorType(typ, value.type.count)
        convert = self.b.uitofp if dtype in irutil.UNSIGNED else self.b.sitofp
        return convert(value, typ)

    def _converted(self, value):
        """A loaded vector of x as the buffer holds it: a ConvInteger's bytes less the zero
        point, in the compute type."""
        if not self.integer:
            return value
        return self.b.fsub(self._float(value, self.x_dtype),
                           irutil.splat(self.b, self.x_zero, irutil.width_of(value)))

    def emit(self):
        b, s, g = self.b, self.s, self.s.g
        self.copy()
        multiplier = g.out_channels // g.in_channels
        channel = b.urem(self.plane, irutil.i64(g.in_channels))
        rows_left = b.sub(irutil.i64(s.oh), self.first)
        rows = b.select(b.icmp_signed("<", rows_left, irutil.i64(self.band)), rows_left,
                        irutil.i64(self.band))
        with irutil.for_range(b, 0, multiplier, name="j") as j:
            out_channel = b.add(b.mul(channel, irutil.i64(multiplier)), j)
            self.weights = self.load_weights(out_channel)
            self.scale, self.bias = self.load_scale_and_bias(out_channel)
            out_plane = b.add(b.mul(self.plane, irutil.i64(multiplier)), j)
            self.y_base = b.mul(out_plane, irutil.i64(s.oh * s.ow))
            groups = b.udiv(rows, irutil.i64(s.rows))
            with irutil.for_range(b, 0, groups, name="rg") as group:
                self.row_group(b.mul(group, irutil.i64(s.rows)), s.rows)
            partial = s.oh % s.rows
            if partial:
                last = b.icmp_signed("==", self.index, irutil.i64(self.bands - 1))
                with b.if_then(last):
                    self.row_group(b.mul(groups, irutil.i64(s.rows)), partial)

    def copy(self):
        """Copy the input rows of this band into the buffer, padded with zeros, each row as
        ``sw`` phases."""
        b, s, g, dtype, x_dtype = self.b, self.s, self.s.g, self.dtype, self.x_dtype
        (height, width), lanes, stride = g.input, s.lanes, s.sw
        x = self.ctx.pointer(self.step.inputs[0])
        x_plane = irutil.element_ptr(b, x, x_dtype,
                                     b.mul(self.plane, irutil.i64(height * width)))
        top = b.sub(b.mul(self.first, irutil.i64(s.sh)), irutil.i64(g.pads_begin[0]))
        storage = irutil.vector_of(irutil.storage_type(x_dtype), lanes)
        wide = stride * lanes
        chunks = s.phase // lanes
        pad = g.pads_begin[1]
        # Chunk k reads input columns k * wide - pad + [0, wide): whole ones run in a loop.
        inner = [k for k in range(chunks) if 0 <= k * wide - pad <= width - wide]
        with irutil.for_range(b, 0, s.span(self.band), name="copy") as i:
            source_row = b.add(top, i)
            target = irutil.element_ptr(b, self.buffer, dtype, b.mul(i, irutil.i64(s.row)))
            inside = b.icmp_unsigned("<", source_row, irutil.i64(height))
            source = irutil.element_ptr(b, x_plane, x_dtype,
                                        b.mul(source_row, irutil.i64(width)))

            def store_chunk(k, value):
                for p in range(stride):
                    part = value if stride == 1 else b.shuffle_vector(
                        value, ir.Constant(value.type, ir.Undefined),
                        ir.Constant(ir.VectorType(irutil.I32, lanes),
                                    [p + stride * lane for lane in range(lanes)]))
                    at = b.add(b.mul(ival(k), irutil.i64(lanes)), irutil.i64(p * s.phase))
                    irutil.store(b, part, irutil.element_ptr(b, target, dtype, at), dtype)

            with b.if_else(inside) as (copy, zero):
                with copy:
                    if inner:
                        with irutil.for_range(b, inner[0], inner[-1] + 1, name="chunk") as k:
                            at = b.sub(b.mul(k, irutil.i64(wide)), irutil.i64(pad))
                            store_chunk(k, self._converted(irutil.load(
                                b, irutil.element_ptr(b, source, x_dtype, at), x_dtype, wide)))
                    for k in range(chunks):
                        if k in inner:
                            continue
                        columns = [k * wide - pad + t for t in range(wide)]
                        mask = [0 <= c < width for c in columns]
                        value = irutil.const(irutil.vector_of(storage.element, wide), 0)
                        if any(mask):
                            read = ir.Constant(ir.VectorType(irutil.I1, wide), mask)
                            value = irutil.masked_load(
                                b, irutil.element_ptr(b, source, x_dtype, columns[0]), x_dtype,
                                read, value)
                            if self.integer:        # (the padding is 0 after the shift)
                                value = b.select(read, self._converted(value), irutil.const(
                                    irutil.vector_of(irutil.compute_type(dtype), wide), 0))
                        else:
                            value = irutil.const(irutil.vector_of(
                                irutil.compute_type(dtype), wide), 0)
                        store_chunk(k, value)
                with zero:
                    for k in range(s.row // lanes):
                        irutil.store(b, self.zero, irutil.element_ptr(b, target, dtype, k * lanes),
                                     dtype)

    def load_weights(self, out_channel):
        """The kernel's weights of ``out_channel`` splatted over the lanes, row by row."""
        b, s = self.b, self.s
        w = self.step.inputs[1]
        base = b.mul(out_channel, irutil.i64(s.kh * s.kw))
        weights = []
        for t in range(s.kh * s.kw):
            value = irutil.load(b, irutil.element_ptr(b, self.ctx.pointer(w), w.dtype,
                                                      b.add(base, irutil.i64(t))), w.dtype)
            if self.integer:
                value = self._float(value, w.dtype)
            weights.append(irutil.splat(b, value, s.lanes))
        return weights

    def load_scale_and_bias(self, out_channel):
        """(the dequantizing scale of a ConvInteger's ``out_channel``, else None; its bias,
        None if none), splatted."""
        if self.integer:
            return tuple(self._channel(v, out_channel) for v in self.step.inputs[3:5])
        if fused_ops.conv_inputs(self.step) <= 2:
            return None, None
        return None, self._channel(self.step.inputs[2], out_channel)

    def _channel(self, tensor, out_channel):
        """Element ``out_channel`` of ``tensor`` (of the compute type) splatted."""
        b = self.b
        at = irutil.element_ptr(b, self.ctx.pointer(tensor), self.dtype, out_channel)
        return irutil.splat(b, irutil.load(b, at, self.dtype), self.s.lanes)

    def row_group(self, row, rows):
        """Output rows ``row`` .. ``row + rows`` of the band (``row`` an i64 value), every
        column."""
        b, s = self.b, self.s
        full, tail = divmod(s.ow, s.lanes)
        base = irutil.element_ptr(b, self.buffer, self.dtype,
                                  b.mul(row, irutil.i64(s.sh * s.row)))
        y_row = b.add(self.y_base, b.mul(b.add(self.first, row), irutil.i64(s.ow)))
        if full:
            with irutil.for_range(b, 0, full, name="v") as v:
                column = b.mul(v, irutil.i64(s.lanes))
                self.columns(base, y_row, column, rows, None)
        if tail:
            self.columns(base, y_row, irutil.i64(full * s.lanes), rows, tail)

    def columns(self, base, y_row, column, rows, count=None):
        """One vector of output columns from ``column`` in ``rows`` rows (only its first
        ``count`` lanes, if given)."""
        b, s, dtype = self.b, self.s, self.dtype
        sums = [self.zero] * rows
        for r in range(s.span(rows)):
            uses = [(i, ky) for i in range(rows) for ky in range(s.kh)
                    if i * s.sh + ky * s.dh == r]
            if not uses:
                continue
            for kx in range(s.kw):
                shift, phase = divmod(kx * s.dw, s.sw)
                at = b.add(column, irutil.i64(r * s.row + phase * s.phase + shift))
                value = irutil.load(b, irutil.element_ptr(b, base, dtype, at), dtype, s.lanes)
                for i, ky in uses:
                    sums[i] = mathlib.fmuladd(b, self.weights[ky * s.kw + kx], value, sums[i])
        epilogue = fused.epilogue(self.step) if self.step.type == "FusedConv" else None
        y = self.step.outputs[0]
        extras = self.step.inputs[fused_ops.first_extra(self.step):] if epilogue else []
        mask = None if count is None else ir.Constant(ir.VectorType(irutil.I1, s.lanes),
                                                      [lane < count for lane in range(s.lanes)])
        for i in range(rows):
            if self.integer:
                value = dequantize(b, sums[i], self.scale, self.bias, self.step)
            else:
                value = sums[i] if self.bias is None else b.fadd(sums[i], self.bias)
            at = b.add(b.add(y_row, irutil.i64(i * s.ow)), column)
            if epilogue is not None:
                values = [self.load(e, at, mask) if e.shape == y.shape
                          else irutil.splat(b, irutil.load(b, self.ctx.pointer(e), dtype),
                                            s.lanes)
                          for e in extras]
                value = epilogue.apply(b, [value] + values)
            if self.recipe is not None:
                value = self.recipe.apply(b, [value] + self.scalars)
            if y.dtype != dtype:
                value = elementwise.emit(b, "Cast", [value], [dtype], y.dtype,
                                         {"dtype": y.dtype})
            target = irutil.element_ptr(b, self.ctx.pointer(y), y.dtype, at)
            if count is None:
                irutil.store(b, value, target, y.dtype)
            else:
                irutil.store_lanes(b, value, target, y.dtype, count)

    def load(self, tensor, at, mask):
        """A vector of ``tensor`` (of the output's shape) at element ``at``."""
        b, dtype = self.b, self.dtype
        pointer = irutil.element_ptr(b, self.ctx.pointer(tensor), dtype, at)
        if mask is None:
            return irutil.load(b, pointer, dtype, self.s.lanes)
        return irutil.masked_load(b, pointer, dtype, mask, self.zero)
