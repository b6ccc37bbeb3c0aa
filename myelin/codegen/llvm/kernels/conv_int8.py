"""Integer convolutions on bytes: ``ConvInteger`` (:mod:`myelin.ops.quantized`), the
convolution of ``x - x_zero`` (uint8 or int8 images) by constant int8 or int16 weights, in
int32.

It is :mod:`.conv_gemm`'s implicit im2col product with :mod:`.matmul_int8`'s multiply-adds:
per image and group, Y_g[M/G, pixels] = W_g[M/G, taps x channels of the group] x X'_g, the
weights A (packed when the model compiles) and X'_g packed at run time, a group of panels
at a time, from the group's channels of the image. Each int32 element holds a set of
values of k, and k runs over (kernel tap, set of channels), so the values of an element
are channels at the same tap: where the panel's vector of a tap comes from is the same for
all, worked out once per tap (:class:`~.conv_gemm._ConvTask`), and each set is a byte
load per channel (or a gather at the image's borders), converted and interleaved:

* ``vpdpbusd`` (VNNI, int8 weights): four channels per element, the image's bytes as they
  are (int8 ones with the sign bit flipped: x + 128) and the padding the zero point's byte,
  so the zero point is a correction per output channel, ``-(x_zero [+ 128]) * sum w[m]``,
  whose sums are computed when the weights are packed. The multiply-add's unsigned operand
  is the image's vector and its signed one the weight;
* ``pmaddwd`` elsewhere: two channels per element, widened to int16 less the zero point
  (the padding zero after the shift).

A channel count that is not a multiple of two (four) pads the last element with channels of
zero weights.

A dequantizing ConvInteger (scale and bias inputs) converts each tile's sums to float where
it stores them, scales them and adds the bias of their channel, applies its recipe (the
ReLU and the next quantization, emitted by the element-wise lowering as a ``Calculate``
would) and converts to its output type: a requantized layer writes its bytes, and nothing
but the convolution reads or writes memory.
"""

import math
import weakref

import numpy as np
from llvmlite import ir

from myelin.codegen.llvm import elementwise, irutil
from myelin.codegen.llvm.kernels.base import Kernel
from myelin.codegen.llvm.kernels.conv import nested_loops
from myelin.codegen.llvm.kernels.conv_gemm import _ConvTask
from myelin.codegen.llvm.kernels.fused import TypedRecipe
from myelin.codegen.llvm.kernels.matmul import Plan, choices
from myelin.codegen.llvm.kernels.matmul_int8 import PMADDWD, VPDPBUSD, Product, product
from myelin.ops import conv as conv_ops
from myelin.ops.fused import ValueType
from myelin.ops.quantized import conv_part, recipe_inputs
from myelin.plan import recipe as plan_recipes

I16 = ir.IntType(16)
I32 = irutil.I32
_RECIPES = weakref.WeakKeyDictionary()      # ConvInteger step: TypedRecipe or None
# vpdpbusd with the image's vector (unsigned bytes) first and the weight (signed) second.
VPDPBUSD_IMAGE = Product("vpdpbusd.image", VPDPBUSD.per_lane, "uint8", "int8",
                         lambda b, weight, image, acc: VPDPBUSD.madd(b, image, weight, acc))


def requantization(step):
    """The typed recipe a dequantizing ConvInteger ``step`` applies to its dequantized sums
    (``%0``, of the scale's type and the output's shape) and its one-element inputs, or None
    (also used by the depthwise kernel)."""
    def make(step):
        if not step.attrs.get_str("expr"):
            return None
        dequantized = ValueType("%0", step.inputs[3].dtype, step.outputs[0].shape)
        return TypedRecipe(step, [dequantized] + recipe_inputs(step))
    return plan_recipes.once(_RECIPES, step, make)


def dequantize(builder, sums, scale, bias, step):
    """``sums * scale + bias`` (floats) of a dequantizing ConvInteger ``step``: flagged never
    NaN (``nnan``) where its scales and biases are finite constants, as the sums of bytes
    are finite, so that its recipe's NaN-propagating clamps compile to plain min and max."""
    flags = ("nnan",) if _finite(step) else ()
    return builder.fadd(builder.fmul(sums, scale, flags=flags), bias, flags=flags)


def _finite(step):
    return all(v.constant_data() is not None and np.isfinite(v.constant_data()).all()
               for v in step.inputs[3:5])


def _product(step, target):
    """The multiply-add of ``step``'s convolution on ``target``."""
    return VPDPBUSD_IMAGE if product(target, step.inputs[1].dtype) is VPDPBUSD else PMADDWD


class _Plan(Plan):
    """The product per image and group of the group's weights [M / G, taps x channel sets]
    by its packed channels of the image, in int32 elements of ``per_lane`` narrow values."""

    def __init__(self, ctx, step, g):
        self.found = _product(step, ctx.target)
        self.product, self.madd = self.found.name, self.found.madd
        self.channels = g.in_channels // g.group          # per group
        self.per_tap = -(-self.channels // self.found.per_lane)     # elements of k
        self.taps = math.prod(g.kernel)
        super().__init__(ctx, g.out_channels // g.group, math.prod(g.output),
                         self.taps * self.per_tap, (g.batch, g.group), "int32", "run",
                         split_rows=False, choice=step.choice)


def _packed(step, plan):
    """(the weights [M, C / G, kernel...] as [M, taps, channel sets] of narrow values in
    int32, a group's rows one after the other; for vpdpbusd the sum of each output channel's
    weights, else None)."""
    w = step.inputs[1]
    data = np.asarray(w.constant_data()).reshape(w.shape)
    m, channels = data.shape[:2]
    per_lane = plan.found.per_lane
    taps = data.reshape(m, channels, plan.taps).transpose(0, 2, 1)
    padded = np.zeros((m, plan.taps, per_lane * plan.per_tap),
                      np.int16 if per_lane == 2 else np.int8)
    padded[:, :, :channels] = taps
    packed = np.ascontiguousarray(padded).view(np.int32).reshape(m, plan.k)
    if plan.found is PMADDWD:
        return packed, None
    return packed, data.reshape(m, -1).sum(axis=1, dtype=np.int64).astype(np.int32)


def _geometry(step):
    return conv_ops.geometry(conv_part(step))


class ConvInt8Kernel(Kernel):
    """``ConvInteger`` with constant weights, on NCW, NCHW and NCDHW images."""

    name = "ConvInteger"
    shares_code = True

    def supports(self, step, target):
        if step.type != "ConvInteger" or not 3 <= len(step.inputs[0].shape) <= 5:
            return False
        if step.inputs[1].constant_data() is None:
            return False
        g = _geometry(step)
        return math.prod(g.input) * g.in_channels < 2 ** 31

    def variant(self, step, target):
        return f"{target.isa()}{_product(step, target).name}"

    def loaded_inputs(self, step):
        return (2,)     # the zero point, loaded as the fill byte and the correction's factor

    def choices(self, step, target):
        g = _geometry(step)
        return choices(target, g.out_channels // g.group, math.prod(g.output), "int32")

    def flops(self, step):
        return 2 * step.outputs[0].elements * math.prod(step.inputs[1].shape[1:])

    def emit(self, ctx, step):
        g = _geometry(step)
        plan = _Plan(ctx, step, g)
        weights, sums = _packed(step, plan)
        recipe = requantization(step)
        ctx.parallel(f"ConvInteger.{step.name}", step.inputs + step.outputs, plan.tasks,
                     lambda sub, index: _Task(sub, step, plan, g, weights, sums, recipe,
                                              index).emit(),
                     outline=plan.large)

    def kept(self, ctx, step):
        weights, sums = _packed(step, _Plan(ctx, step, _geometry(step)))
        return [weights] if sums is None else [weights, sums]

    def packed_inputs(self, step):
        return (1,)          # (the weights: constant, see supports)


class _Task(_ConvTask):
    """A task of a ConvInteger: an image and group, a block of its output channels and a
    block of panels of its pixels, packed as sets of channels."""

    def __init__(self, ctx, step, plan, geometry, weights, sums, recipe, index):
        super().__init__(ctx, step, plan, geometry, index)
        self.weights, self.sums, self.recipe = weights, sums, recipe
        self.zero = None        # x's zero point, a raw byte
        self.fill = None        # a packed vector's padding value, as the multiply-add reads it
        self.correction = None  # vpdpbusd: the unsigned zero point c (sums less c * sum w[m])
        self.scalars = []       # the recipe's one-element inputs, loaded
        self.first_channel = irutil.i64(0)     # the group's first output channel

    def pointers(self, batch):
        b, g, plan, ctx = self.b, self.g, self.plan, self.ctx
        x, _, zero = self.step.inputs[:3]
        y = self.step.outputs[0]
        # Batch entry = image * groups + group: its channels follow the previous entry's.
        image = plan.channels * math.prod(g.input)
        self.bp = irutil.element_ptr(b, ctx.pointer(x), x.dtype, b.mul(batch, irutil.i64(image)))
        self.c = irutil.element_ptr(b, ctx.pointer(y), y.dtype,
                                    b.mul(batch, irutil.i64(plan.m * plan.n)))
        self.a = ctx.keep(self.weights)
        if g.group > 1:
            self.first_channel = b.mul(b.urem(batch, irutil.i64(g.group)), irutil.i64(plan.m))
            self.a = irutil.element_ptr(b, self.a, "int32",
                                        b.mul(self.first_channel, irutil.i64(plan.k)))
        self.zero = irutil.load(b, ctx.pointer(zero), x.dtype)
        self.fill = self._converted(irutil.splat(b, self.zero, plan.lanes))
        if self.sums is not None:
            unsigned = b.extract_element(self.fill, ir.Constant(I32, 0))
            self.correction = b.zext(unsigned, I32)
            self.sums = ctx.keep(self.sums)
        self.scalars = [irutil.load(b, ctx.pointer(s), s.dtype)
                        for s in recipe_inputs(self.step)]

    def store_loop(self, vector):
        # A dequantized store (a scale, a bias and the recipe) in a loop over the tile's rows:
        # with each vector's store inlined, ResNet-50's took 1.5 times the LLVM time.
        return "rows" if len(self.step.inputs) > 3 else None

    def store(self, value, row, column, valid, inline=False):
        """Store the int32 sums, or, for a dequantizing op, their float value times the scale
        plus the bias of channel ``row``, through the recipe (inlined if ``inline``), in the
        output's type."""
        step = self.step
        b, lanes = self.b, irutil.width_of(value)
        channel = b.add(self.first_channel, row)
        if self.correction is not None:
            total = irutil.load(b, irutil.element_ptr(b, self.sums, "int32", channel), "int32")
            value = b.sub(value, irutil.splat(b, b.mul(self.correction, total), lanes))
        if len(step.inputs) == 3:
            super().store(value, row, column, valid)
            return
        dtype, out = step.inputs[3].dtype, step.outputs[0].dtype
        scale, bias = (irutil.splat(b, irutil.load(b, irutil.element_ptr(
            b, self.ctx.pointer(p), dtype, channel), dtype), lanes) for p in step.inputs[3:5])
        value = dequantize(b, b.sitofp(value, irutil.vector_of(irutil.compute_type(dtype),
                                                               lanes)), scale, bias, step)
        if self.recipe is not None:
            value = self.recipe.apply(b, [value] + [irutil.splat(b, s, lanes)
                                                    for s in self.scalars], inline)
        if out != dtype:
            value = elementwise.emit(b, "Cast", [value], [dtype], out, {"dtype": out})
        at = irutil.element_ptr(b, self.c, out, b.add(b.mul(row, irutil.i64(self.plan.n)),
                                                      column))
        if valid < lanes:
            irutil.store_lanes(b, value, at, out, valid)
        else:
            irutil.store(b, value, at, out)

    def _converted(self, value):
        """Bytes of x as the multiply-add reads them: unsigned bytes (an int8's sign bit
        flipped) for vpdpbusd, int16 less the zero point for pmaddwd."""
        b = self.b
        signed = self.step.inputs[0].dtype == "int8"
        if self.plan.found is not PMADDWD:
            return b.xor(value, irutil.const(value.type, -128)) if signed else value
        typ = irutil.vector_of(I16, irutil.width_of(value))
        extend = b.sext if signed else b.zext
        return b.sub(extend(value, typ), irutil.splat(b, extend(self.zero, I16),
                                                      irutil.width_of(value)))

    def pack_panel(self, panels, panel, columns):
        b, plan, g = self.b, self.plan, self.g
        first = b.trunc(b.mul(panel, irutil.i64(plan.width)), I32)
        lines = [self._line(first, v) for v in range(plan.vectors)]
        plane = math.prod(g.input)
        per_lane = plan.found.per_lane
        full = plan.channels // per_lane

        def tap(kernel):
            sources = [self._source(line, [b.trunc(k, I32) for k in kernel]) for line in lines]
            index = irutil.i64(0)
            for k, size in zip(kernel, g.kernel):
                index = b.add(b.mul(index, irutil.i64(size)), k)
            base = b.mul(index, irutil.i64(plan.per_tap))

            def element(number, channels):
                row = self.packed_row(panels, panel, b.add(base, number))
                images = [irutil.element_ptr(b, self.bp, self.step.inputs[0].dtype,
                                             b.mul(c, irutil.i64(plane))) for c in channels]
                for v, source in enumerate(sources):
                    target = irutil.element_ptr(b, row, "int32", irutil.i64(v * plan.lanes))
                    self._pack_element(images, source, target)

            with irutil.for_range(b, 0, full, name="gc") as number:
                channel = b.mul(number, irutil.i64(per_lane))
                element(number, [b.add(channel, irutil.i64(c)) for c in range(per_lane)])
            if plan.channels % per_lane:
                element(irutil.i64(full), [irutil.i64(c) for c in
                                           range(full * per_lane, plan.channels)])

        nested_loops(b, list(g.kernel), tap, name="g")

    def _pack_element(self, images, source, target):
        """Store at ``target`` one vector of a packed row: the elements of the channel planes
        ``images`` at ``source`` as the multiply-add reads them (the padding, and the
        channels missing from a last set, ``fill``), interleaved."""
        b, plan = self.b, self.plan
        lanes, dtype, stride = plan.lanes, self.step.inputs[0].dtype, self.g.strides[-1]
        contiguous, start, inside_rows, offsets, inside = source
        per_lane = plan.found.per_lane

        def interleaved(values):
            values = values + [self.fill] * (per_lane - len(values))
            while len(values) > 1:          # concatenated: channel c's lanes at c * lanes
                width = 2 * irutil.width_of(values[0])
                concatenate = ir.Constant(ir.VectorType(I32, width), list(range(width)))
                values = [b.shuffle_vector(values[i], values[i + 1], concatenate)
                          for i in range(0, len(values), 2)]
            mask = [(lane % per_lane) * lanes + lane // per_lane
                    for lane in range(per_lane * lanes)]
            whole = b.shuffle_vector(values[0], irutil.const(values[0].type, 0),
                                     ir.Constant(ir.VectorType(I32, len(mask)), mask))
            irutil.store(b, b.bitcast(whole, ir.VectorType(I32, lanes)), target, "int32")

        with b.if_else(contiguous) as (fast, slow):
            with fast:
                values = []
                for image in images:
                    at = irutil.element_ptr(b, image, dtype, b.sext(start, irutil.I64))
                    value = irutil.load(b, at, dtype, stride * lanes, 1)
                    if stride > 1:
                        value = irutil.every_nth(b, value, stride, lanes)
                    value = self._converted(value)
                    if inside_rows is not None:
                        value = b.select(inside_rows, value, self.fill)
                    values.append(value)
                interleaved(values)
            with slow:
                # Lanes outside the image read its first element (whose value the select
                # drops): a gather of bytes is scalar loads, which without a mask need no
                # branch per lane.
                safe = b.select(inside, offsets, irutil.const(offsets.type, 0))
                values = []
                for image in images:
                    value = irutil.gather(b, image, dtype, safe)
                    values.append(b.select(inside, self._converted(value), self.fill))
                interleaved(values)
