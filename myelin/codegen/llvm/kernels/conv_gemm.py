"""1-D, 2-D and 3-D convolution as a matrix product over gathered panels (an implicit im2col).

For each image and group, Y_g[Cout/G, pixels] = W_g[Cout/G, Cin/G*K] x X'_g, where row
(c, kz, ky, kx) of X'_g (one per channel of the group and kernel position) holds, for every
output pixel, the input element that tap meets (zero in the padding). The product's batch is
(image, group): a group's input and output channels are consecutive, so batch entry e's X
and Y start e groups of channels in. X' is never built whole: the matrix product's tasks
(:mod:`matmul`) pack a group of panels of X' at a time into a buffer on the stack, straight
from the image, and run the register-tile kernel over them with the group's weights as A, so
every gathered element feeds all the group's output channels (grouped convolutions with too
few of them stay with the direct kernel: :func:`_pays`). Tasks split the output pixels; only
where there are fewer panels than threads do they split the output channels too, each such
task gathering its panels again (as few as pay for themselves: :meth:`matmul.Plan._row_blocks`).
The bias is added to each tile before it is stored.

Packing a panel row takes whole vectors of an input row (along the last axis) where the
pixels are consecutive in one output row and the taps inside the input row (every other
element of two vectors for stride 2); elsewhere it gathers, the out-of-image lanes masked off
and zero. Where each vector of a tap comes from is the same in every channel, so it is worked
out once per tap and each channel's row is then one load or gather per vector. A 1x1
convolution with unit strides and no padding reads X as the matrix [Cin, pixels] it already
is.
"""

import math
from typing import NamedTuple

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil
from myelin.codegen.llvm.kernels import fused
from myelin.codegen.llvm.kernels.base import Kernel
from myelin.codegen.llvm.kernels.conv import nested_loops, supported_floats
from myelin.codegen.llvm.kernels.matmul import Plan, Task, choices
from myelin.ops import conv as conv_ops
from myelin.ops import fused as fused_ops

I32 = irutil.I32
CONTIGUOUS_STRIDES = 2    # strides whose panel rows are loaded whole (with every other lane)
GROUP_ROWS = 8            # the fewest output channels per group worth a product
GROUP_WORK = 512          # the fewest products per output pixel of a group worth a product


class _Line(NamedTuple):
    """The pixels of one vector of a panel: which exist (``valid``), their first input
    position along each spatial axis (``origin``: vectors, and ``origin0``: the first lane's),
    and whether they lie in one output row (``one_row``)."""

    valid: object
    origin: list
    one_row: object
    origin0: list


def _constant(lanes, value):
    """``value`` in every lane of an i32 vector."""
    return ir.Constant(ir.VectorType(I32, lanes), [value] * lanes)


class ConvGemmKernel(Kernel):
    """``Conv`` (and ``FusedConv``) on NCW, NCHW and NCDHW images, as a matrix product per
    image and group: every convolution with one group, grouped ones with enough channels per
    group (see :func:`_pays`) and depthwise ones never (:mod:`conv_depthwise`)."""

    name = "ConvGemm"
    shares_code = True

    def supports(self, step, target):
        if (step.type not in ("Conv", "FusedConv") or not 3 <= len(step.inputs[0].shape) <= 5
                or not supported_floats(step)):
            return False
        if step.type == "FusedConv" and fused.epilogue(step) is None:
            return False
        g = conv_ops.geometry(fused_ops.conv_part(step))
        return _pays(g) and math.prod(g.input) * g.in_channels < 2 ** 31

    def choices(self, step, target):
        g = conv_ops.geometry(fused_ops.conv_part(step))
        return choices(target, g.out_channels // g.group, math.prod(g.output),
                       step.outputs[0].dtype)

    def flops(self, step):
        return 2 * step.outputs[0].elements * math.prod(step.inputs[1].shape[1:])

    def emit(self, ctx, step):
        g = conv_ops.geometry(fused_ops.conv_part(step))
        rows, taps = g.out_channels // g.group, g.in_channels // g.group * math.prod(g.kernel)
        epilogue = fused.epilogue(step) if step.type == "FusedConv" else None
        plan = Plan(ctx, rows, math.prod(g.output), taps, (g.batch, g.group),
                    step.outputs[0].dtype, "run", epilogue=epilogue, split_rows=False,
                    choice=step.choice)
        ctx.parallel(f"Conv.{step.name}", step.inputs + step.outputs, plan.tasks,
                     lambda sub, index: _ConvTask(sub, step, plan, g, index).emit(),
                     outline=plan.large)


class _ConvTask(Task):
    """A task of a convolution: its image's and group's pointers, and panels gathered from
    the group's channels of the image."""

    def __init__(self, ctx, step, plan, geometry, index):
        super().__init__(ctx, plan, index)
        self.step, self.g = step, geometry
        g = geometry
        self.pointwise = (all(k == 1 for k in g.kernel) and all(s == 1 for s in g.strides)
                          and not any(g.pads_begin + g.pads_end))

    def pointers(self, batch):
        b, g, dtype = self.b, self.g, self.plan.dtype
        x, w, y = self.step.inputs[0], self.step.inputs[1], self.step.outputs[0]
        # Batch entry = image * groups + group: its channels follow the previous entry's.
        image = g.in_channels // g.group * math.prod(g.input)
        self.bp = irutil.element_ptr(b, self.ctx.pointer(x), dtype,
                                     b.mul(batch, irutil.i64(image)))
        image_out = b.mul(batch, irutil.i64(self.plan.m * self.plan.n))
        self.c = irutil.element_ptr(b, self.ctx.pointer(y), dtype, image_out)
        group = b.urem(batch, irutil.i64(g.group)) if g.group > 1 else None

        def of_group(pointer, size):
            """``pointer`` advanced to the group's ``size`` elements."""
            if group is None:
                return pointer
            return irutil.element_ptr(b, pointer, dtype, b.mul(group, irutil.i64(size)))

        self.a = of_group(self.ctx.pointer(w), self.plan.m * self.plan.k)
        if fused_ops.conv_inputs(self.step) > 2:
            self.bias = of_group(self.ctx.pointer(self.step.inputs[2]), self.plan.m)
        # Epilogue inputs have the output's shape (row = channel, column = pixel) or one element.
        for x in self.step.inputs[fused_ops.first_extra(self.step):]:
            if x.shape == y.shape:
                self.extras.append((irutil.element_ptr(b, self.ctx.pointer(x), dtype, image_out),
                                    (self.plan.n, 1)))
            else:
                self.extras.append((self.ctx.pointer(x), (0, 0)))

    def pack_panel(self, panels, panel, columns):
        if self.pointwise:
            super().pack_panel(panels, panel, columns)
            return
        b, plan, g = self.b, self.plan, self.g
        first = b.trunc(b.mul(panel, irutil.i64(plan.width)), I32)
        lines = [self._line(first, v) for v in range(plan.vectors)]
        plane = math.prod(g.input)

        def tap(kernel):
            # Where each vector of this tap's rows comes from is the same in every channel.
            sources = [self._source(line, [b.trunc(k, I32) for k in kernel]) for line in lines]
            with irutil.for_range(b, 0, g.in_channels // g.group, name="gc") as channel:
                row = channel
                for k, size in zip(kernel, g.kernel):
                    row = b.add(b.mul(row, irutil.i64(size)), k)
                target_row = self.packed_row(panels, panel, row)
                image = irutil.element_ptr(b, self.bp, plan.dtype,
                                           b.mul(channel, irutil.i64(plane)))
                for v, source in enumerate(sources):
                    target = irutil.element_ptr(b, target_row, plan.dtype,
                                                irutil.i64(v * plan.lanes))
                    self._pack_vector(image, source, target)

        nested_loops(b, list(g.kernel), tap, name="g")

    def _line(self, first, v):
        """The :class:`_Line` of vector ``v`` of the panel whose first pixel is ``first``."""
        b, plan, g = self.b, self.plan, self.g
        lanes = plan.lanes
        pixel = b.add(irutil.splat(b, first, lanes),
                      ir.Constant(ir.VectorType(I32, lanes),
                                  [v * lanes + i for i in range(lanes)]))
        valid = b.icmp_signed("<", pixel, _constant(lanes, plan.n))
        # Output coordinates, last axis first: the column, then the row's coordinates.
        row = b.udiv(pixel, _constant(lanes, g.output[-1]))
        coordinates = [b.urem(pixel, _constant(lanes, g.output[-1]))]
        rest = row
        for size in g.output[-2:0:-1]:
            coordinates.append(b.urem(rest, _constant(lanes, size)))
            rest = b.udiv(rest, _constant(lanes, size))
        if g.rank > 1:
            coordinates.append(rest)
        origin = [b.sub(b.mul(c, _constant(lanes, s)), _constant(lanes, p))
                  for c, s, p in zip(coordinates[::-1], g.strides, g.pads_begin)]
        # The whole vector lies in one output row when its first and last pixel do.
        first_row = b.extract_element(row, ir.Constant(I32, 0))
        last_row = b.extract_element(row, ir.Constant(I32, lanes - 1))
        last_valid = b.extract_element(valid, ir.Constant(I32, lanes - 1))
        one_row = b.and_(b.icmp_signed("==", first_row, last_row), last_valid)
        return _Line(valid, origin, one_row,
                     [b.extract_element(o, ir.Constant(I32, 0)) for o in origin])

    def _source(self, line, kernel):
        """Where the vector ``line`` of the panel row of the tap at kernel position ``kernel``
        (i32 per axis) comes from, in any channel: (contiguous, the offset of its first
        element in the channel's image and whether its row is inside the image (None where
        the image is one row), for one load; the offsets of its elements and which lie
        inside, to gather). A vector loads whole (every other element of two vectors for
        stride 2) when its pixels lie in one output row and their taps inside the input
        row."""
        b, plan, g = self.b, self.plan, self.g
        lanes = plan.lanes
        width, stride = g.input[-1], g.strides[-1]
        steps = [b.mul(k, ir.Constant(I32, d)) for k, d in zip(kernel, g.dilations)]
        at = [b.add(o, s) for o, s in zip(line.origin0, steps)]
        inside_rows = None
        for position, size in zip(at[:-1], g.input):
            inside = b.icmp_unsigned("<", position, ir.Constant(I32, size))
            inside_rows = inside if inside_rows is None else b.and_(inside_rows, inside)
        if stride <= CONTIGUOUS_STRIDES and stride * lanes <= width:
            fits = b.and_(b.icmp_signed(">=", at[-1], ir.Constant(I32, 0)),
                          b.icmp_signed("<=", at[-1], ir.Constant(I32, width - stride * lanes)))
            contiguous = b.and_(line.one_row, fits)
        else:
            contiguous = ir.Constant(irutil.I1, 0)
        start = self._offset(at, lambda size: ir.Constant(I32, size))
        if inside_rows is not None:
            start = b.select(inside_rows, start, ir.Constant(I32, 0))
        positions = [b.add(o, irutil.splat(b, s, lanes)) for o, s in zip(line.origin, steps)]
        inside = line.valid
        for position, size in zip(positions, g.input):
            inside = b.and_(inside, b.icmp_unsigned("<", position, _constant(lanes, size)))
        offsets = self._offset(positions, lambda size: _constant(lanes, size))
        return contiguous, start, inside_rows, offsets, inside

    def _offset(self, positions, constant):
        """The offset in a channel's image of the element at ``positions`` (one per axis)."""
        b = self.b
        offset = positions[0]
        for position, size in zip(positions[1:], self.g.input[1:]):
            offset = b.add(b.mul(offset, constant(size)), position)
        return offset

    def _pack_vector(self, image, source, target):
        """Store at ``target`` one vector of a panel row from the channel plane at ``image``."""
        b, plan = self.b, self.plan
        lanes, dtype, stride = plan.lanes, plan.dtype, self.g.strides[-1]
        contiguous, start, inside_rows, offsets, inside = source
        zero = irutil.const(irutil.vector_of(irutil.storage_type(dtype), lanes), 0)
        with b.if_else(contiguous) as (fast, slow):
            with fast:
                at = irutil.element_ptr(b, image, dtype, b.sext(start, irutil.I64))
                value = irutil.load(b, at, dtype, stride * lanes, plan.itemsize)
                if stride > 1:
                    value = irutil.every_nth(b, value, stride, lanes)
                if inside_rows is not None:
                    value = b.select(inside_rows, value, zero)
                irutil.store(b, value, target, dtype, plan.itemsize)
            with slow:
                value = irutil.gather(b, image, dtype, offsets, mask=inside, fill=zero)
                irutil.store(b, value, target, dtype, plan.itemsize)


def _pays(g):
    """Whether the matrix product beats the direct kernels on geometry ``g``: with one group
    always; with several (not depthwise) where each gathered element feeds ``GROUP_ROWS``
    output channels and an output pixel of a group sums ``GROUP_WORK`` products. Measured on
    Zen 3: 8 to 256 channels per group and 3x3 taps (ResNeXt, RegNet, ResNeSt, NFNet), 1.0-4x
    the direct kernel; 4 output channels per group, or a 1x1 or 1-D 3-tap kernel, 0.4-0.9x."""
    if g.group == 1:
        return True
    rows, taps = g.out_channels // g.group, g.in_channels // g.group * math.prod(g.kernel)
    return g.group < g.in_channels and rows >= GROUP_ROWS and rows * taps >= GROUP_WORK
