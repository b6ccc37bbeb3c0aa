"""``MaxPool`` and ``AveragePool`` of channel-blocked 2-D images (:mod:`myelin.ops.layout`).

Row by row as a depthwise convolution (:class:`~.blocked.RowWalker`): each tap of a tile is one
vector load per pixel folded into its accumulator, a maximum (NaN if any input is, as Maximum
lowers) or a sum. A tap outside the image reads minus infinity for a maximum and zero for a
sum. An average divides by its window's count: the kernel rows inside the image (from the
row's tap bounds) times the taps along the row that are, per pixel (all of them in a tile that
needs no checks); with ``count_include_pad`` the padding counts too, but not the part of a
``ceil_mode`` window beyond it.
"""

import math

from myelin.codegen.llvm import elementwise, irutil
from myelin.codegen.llvm.kernels.blocked import RowWalker, filled
from myelin.codegen.llvm.kernels.conv import OutlinedKernel, tap_range
from myelin.flow.attributes import Attributes
from myelin.ops import conv as conv_ops


class BlockedPoolKernel(OutlinedKernel):
    """``MaxPool`` (without indices) and ``AveragePool`` on float32 2-D images in blocks of
    channels (the op's ``channel_block``)."""

    TYPES = ("MaxPool", "AveragePool")
    name = "BlockedPool"
    shares_code = True

    def supports(self, step, target):
        return (step.type in self.TYPES and conv_ops.channel_block(step) > 0
                and len(step.inputs[0].shape) == 5 and len(step.outputs) == 1
                and step.inputs[0].dtype == step.outputs[0].dtype == "float32")

    def kernel_name(self, step):
        return f"Blocked{step.type}"

    def flops(self, step):
        return step.outputs[0].elements * math.prod(conv_ops.geometry(step).kernel)

    def emit_body(self, ctx, step):
        _PoolRows(ctx, step, step, self.flops(step)).emit()


class _PoolRows(RowWalker):
    """A pool, row by row."""

    def __init__(self, ctx, step, conv, work):
        super().__init__(ctx, step, conv, work)
        self.maximum = step.type == "MaxPool"
        self.include_pad = (not self.maximum
                            and step.attrs.get_int("count_include_pad", 0) != 0)

    def tile(self, ctx, image, block, row, taps, column, width, checked):
        b, size = ctx.builder, self.size
        vector = irutil.vector_of(irutil.compute_type("float32"), size)
        start = float("-inf") if self.maximum else 0.0
        fill = filled(ctx, size, start) if checked else None
        lo, hi = taps
        with irutil.accumulating_loop(b, lo, hi, [irutil.const(vector, start)] * width,
                                      name="kh") as rows:
            x_row = self.input_row(ctx, image, block, row, rows.index)
            with irutil.accumulating_loop(b, 0, self.kernel[1], rows.values,
                                          name="kw") as loop:
                pointers = self.tap_pointers(ctx, x_row, column, width, loop.index, fill)
                loop.set_next([self._fold(b, acc, irutil.load(b, at, "float32", size))
                               for at, acc in zip(pointers, loop.values)])
            rows.set_next(loop.results)
        values = rows.results
        if not self.maximum:
            values = self._averages(b, row, taps, column, width, checked, values)
        offset = self.output_offset(ctx, image, block, row, column)
        y = ctx.pointer(self.step.outputs[0])
        for p, value in enumerate(values):
            at = b.add(offset, irutil.i64(p * size))
            irutil.store(b, value, irutil.element_ptr(b, y, "float32", at), "float32")

    def _fold(self, b, acc, value):
        if not self.maximum:
            return b.fadd(acc, value)
        return elementwise.emit(b, "Maximum", [acc, value], ["float32", "float32"], "float32",
                                Attributes())

    def _averages(self, b, row, taps, column, width, checked, sums):
        """``sums`` over their windows' counts."""
        kw, (sw, dw, pw) = self.kernel[1], (self.strides[1], self.dilations[1], self.pads[1])
        g = self.g
        if self.include_pad:        # kernel rows inside the padded image
            lo, hi = tap_range(b, row, self.strides[0], 0, self.dilations[0], self.kernel[0],
                               self.height + self.pads[0] + g.pads_end[0])
        else:
            lo, hi = taps
        rows = b.sitofp(b.sub(hi, lo), irutil.compute_type("float32"))
        extent = self.width + (pw + g.pads_end[1] if self.include_pad else 0)
        shift = pw if self.include_pad else 0
        results = []
        for p, total in enumerate(sums):
            columns = kw
            if checked:             # the column is known: count its taps inside
                start = (column + p) * sw - pw + shift
                columns = sum(0 <= start + k * dw < extent for k in range(kw))
            count = b.fmul(rows, irutil.const(irutil.compute_type("float32"), float(columns)))
            results.append(b.fdiv(total, irutil.splat(b, count, self.size)))
        return results
