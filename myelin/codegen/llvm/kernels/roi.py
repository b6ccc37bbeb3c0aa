"""The kernel of RoiAlign (myelin.ops.roi): ONNX Runtime's arithmetic, in its order.

First every batch index is checked (InputError outside [0, N)). Then the ROIs are split among
tasks. For each ROI the kernel works out the scaled corners, the bin sizes and the samples per
bin (the sampling ratio, or the adaptive count capped by :func:`myelin.ops.roi.adaptive_limit`);
then, for a block of up to ``CHANNEL_BLOCK`` channels at a time and each output bin, it
computes each sample's four corner positions and weights once (an empty sample: weights 0 at
position 0) and applies them to every channel of the block, accumulating in a buffer on the
stack (the sum for ``avg``, std::max of the weighted corners for ``max``). Coordinates and
weights are in the compute type: float64 for float64 inputs, else float32.
"""

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil, mathlib
from myelin.codegen.llvm.kernels.base import Kernel, task_range
from myelin.errors import MyelinError
from myelin.ops import roi

CHANNEL_BLOCK = 256     # channels whose sums sit in the stack buffer at once
_FLOATS = ("float16", "float32", "float64")


class RoiAlignKernel(Kernel):
    """``RoiAlign`` in avg or max mode, any sampling ratio and coordinate mode."""

    name = "RoiAlign"
    TYPE = "RoiAlign"

    def supports(self, step, target):
        if step.type != self.TYPE or len(step.inputs) != 3:
            return False
        try:
            roi.params(step)
        except MyelinError:
            return False
        x, rois, batch = step.inputs
        return x.dtype in _FLOATS and rois.dtype == x.dtype and batch.dtype in ("int32",
                                                                                 "int64")

    def kernel_name(self, step):
        return f"RoiAlign[{roi.params(step)[0]}]"

    def flops(self, step):
        ratio = roi.params(step)[3] or 2
        return 8 * ratio * ratio * step.outputs[0].elements

    def emit(self, ctx, step):
        out = step.outputs[0]
        if out.elements == 0:
            return
        x, _, batch = step.inputs
        b = ctx.builder
        indices = ctx.pointer(batch)
        with irutil.for_range(b, 0, batch.elements, name="roi.check") as r:
            n = irutil.convert(b, irutil.load(b, irutil.element_ptr(b, indices, batch.dtype, r),
                                              batch.dtype), batch.dtype, "int64")
            ctx.fail_if(b.or_(b.icmp_signed("<", n, irutil.i64(0)),
                              b.icmp_signed(">=", n, irutil.i64(x.shape[0]))))
        count = out.shape[0]
        tasks, size = ctx.chunks(count, self.flops(step))
        ctx.parallel(f"RoiAlign.{step.name}", step.inputs + step.outputs, tasks,
                     lambda sub, index: _Emitter(sub, step).emit_rois(index, size))


class _Emitter:
    def __init__(self, ctx, step):
        self.ctx, self.b = ctx, ctx.builder
        self.x, self.rois, self.batch = step.inputs
        self.out = step.outputs[0]
        (self.mode, self.height, self.width, self.ratio, self.scale,
         self.half_pixel) = roi.params(step)
        self.fdtype = "float64" if self.x.dtype == "float64" else "float32"
        self.ftype = irutil.compute_type(self.fdtype)

    def f(self, value):
        return ir.Constant(self.ftype, float(value))

    def larger(self, a, c):
        """std::max(a, c): c where a < c, else a."""
        return self.b.select(self.b.fcmp_ordered("<", a, c), c, a)

    def emit_rois(self, index, size):
        """The ROIs [index * size, (index + 1) * size) (the last task's range cut short)."""
        b = self.b
        start, stop = task_range(b, index, size, self.out.shape[0])
        self.acc = irutil.stack_array(b, self.ftype, min(CHANNEL_BLOCK, self.x.shape[1]))
        with irutil.for_range(b, start, stop, name="roi") as r:
            self.emit_roi(r)

    def grid(self, extent, bins, size):
        """Samples per bin (i64): the ratio, or ceil(extent / bins) clamped to
        [0, adaptive_limit(size)] (NaN: 0)."""
        if self.ratio > 0:
            return irutil.i64(self.ratio)
        b = self.b
        per_bin = mathlib.intrinsic(b, "ceil", [b.fdiv(extent, self.f(bins))])
        per_bin = mathlib.intrinsic(b, "maxnum", [per_bin, self.f(0)])
        per_bin = mathlib.intrinsic(b, "minnum", [per_bin, self.f(roi.adaptive_limit(size))])
        return b.fptosi(per_bin, irutil.I64)

    def emit_roi(self, r):
        b, f = self.b, self.f
        coords = []
        rois = self.ctx.pointer(self.rois)
        offset = f(0.5 if self.half_pixel else 0.0)
        for k in range(4):
            where = b.add(b.mul(r, irutil.i64(4)), irutil.i64(k))
            value = irutil.load(b, irutil.element_ptr(b, rois, self.rois.dtype, where),
                                self.rois.dtype)
            value = irutil.convert(b, value, self.rois.dtype, self.fdtype)
            coords.append(b.fsub(b.fmul(value, f(self.scale)), offset))
        x1, y1, x2, y2 = coords
        extent_w, extent_h = b.fsub(x2, x1), b.fsub(y2, y1)
        if not self.half_pixel:
            extent_w, extent_h = self.larger(extent_w, f(1)), self.larger(extent_h, f(1))
        channels, rows, cols = self.x.shape[1:]
        axes = {"y": (y1, b.fdiv(extent_h, f(self.height)),
                      self.grid(extent_h, self.height, rows), rows),
                "x": (x1, b.fdiv(extent_w, f(self.width)),
                      self.grid(extent_w, self.width, cols), cols)}
        samples = b.mul(axes["y"][2], axes["x"][2])
        count = b.sitofp(b.select(b.icmp_signed("<", samples, irutil.i64(1)), irutil.i64(1),
                                  samples), self.ftype)
        n = irutil.convert(b, irutil.load(b, irutil.element_ptr(
            b, self.ctx.pointer(self.batch), self.batch.dtype, r), self.batch.dtype),
            self.batch.dtype, "int64")
        block = min(CHANNEL_BLOCK, channels)
        blocks = -(-channels // block)
        with irutil.for_range(b, 0, blocks, name="roi.cb") as cb:
            first = b.mul(cb, irutil.i64(block))
            width = b.sub(irutil.i64(channels), first)
            width = b.select(b.icmp_signed("<", width, irutil.i64(block)), width,
                             irutil.i64(block))
            plane0 = b.add(b.mul(n, irutil.i64(channels)), first)
            with irutil.for_range(b, 0, self.height, name="roi.ph") as ph:
                with irutil.for_range(b, 0, self.width, name="roi.pw") as pw:
                    self.bin(r, ph, pw, axes, plane0, first, width, count)

    def coordinate(self, start, bin_size, grid, p, i):
        """start + p * bin + ((i + 0.5) * bin) / grid, in ONNX Runtime's order."""
        b, f = self.b, self.f
        base = b.fadd(start, b.fmul(b.sitofp(p, self.ftype), bin_size))
        step = b.fmul(b.fadd(b.sitofp(i, self.ftype), f(0.5)), bin_size)
        return b.fadd(base, b.fdiv(step, b.sitofp(grid, self.ftype)))

    def taps(self, v, size):
        """(low i64, high i64, weight of high, valid i1) of coordinate ``v`` on an axis."""
        b, f = self.b, self.f
        valid = b.and_(b.fcmp_ordered(">=", v, f(-1)), b.fcmp_ordered("<=", v, f(size)))
        v = b.select(b.and_(valid, b.fcmp_ordered(">", v, f(0))), v, f(0))
        low = b.fptosi(v, irutil.I64)
        last = irutil.i64(size - 1)
        edge = b.icmp_signed(">=", low, last)
        low = b.select(edge, last, low)
        high = b.select(edge, last, b.add(low, irutil.i64(1)))
        v = b.select(edge, b.sitofp(last, self.ftype), v)
        return low, high, b.fsub(v, b.sitofp(low, self.ftype)), valid

    def bin(self, r, ph, pw, axes, plane0, first, width, count):
        b, f = self.b, self.f
        acc = self.acc
        with irutil.for_range(b, 0, width, name="roi.zero") as c:
            irutil.store(b, f(0), irutil.element_ptr(b, acc, self.fdtype, c), self.fdtype)
        y_start, y_bin, y_grid, rows = axes["y"]
        x_start, x_bin, x_grid, cols = axes["x"]
        area = rows * cols
        src = self.ctx.pointer(self.x)
        one = f(1)
        with irutil.for_range(b, 0, y_grid, name="roi.iy") as iy:
            ylo, yhi, ly, yok = self.taps(self.coordinate(y_start, y_bin, y_grid, ph, iy), rows)
            hy = b.fsub(one, ly)
            with irutil.for_range(b, 0, x_grid, name="roi.ix") as ix:
                xlo, xhi, lx, xok = self.taps(self.coordinate(x_start, x_bin, x_grid, pw, ix),
                                              cols)
                hx = b.fsub(one, lx)
                valid = b.and_(yok, xok)
                corners = []
                for w, ys, xs in ((b.fmul(hy, hx), ylo, xlo), (b.fmul(hy, lx), ylo, xhi),
                                  (b.fmul(ly, hx), yhi, xlo), (b.fmul(ly, lx), yhi, xhi)):
                    pos = b.add(b.mul(ys, irutil.i64(cols)), xs)
                    corners.append((b.select(valid, w, f(0)),
                                    b.select(valid, pos, irutil.i64(0))))
                first_sample = b.and_(b.icmp_signed("==", iy, irutil.i64(0)),
                                      b.icmp_signed("==", ix, irutil.i64(0)))
                with irutil.for_range(b, 0, width, name="roi.c") as c:
                    base = b.mul(b.add(plane0, c), irutil.i64(area))
                    terms = []
                    for w, pos in corners:
                        ptr = irutil.element_ptr(b, src, self.x.dtype, b.add(base, pos))
                        value = irutil.convert(b, irutil.load(b, ptr, self.x.dtype),
                                               self.x.dtype, self.fdtype)
                        terms.append(b.fmul(w, value))
                    slot = irutil.element_ptr(b, acc, self.fdtype, c)
                    total = irutil.load(b, slot, self.fdtype)
                    if self.mode == "avg":
                        value = b.fadd(b.fadd(b.fadd(terms[0], terms[1]), terms[2]), terms[3])
                        total = b.fadd(total, value)
                    else:
                        value = self.larger(self.larger(self.larger(terms[0], terms[1]),
                                                        terms[2]), terms[3])
                        total = b.select(first_sample, value, self.larger(total, value))
                    irutil.store(b, total, slot, self.fdtype)
        dst = self.ctx.pointer(self.out)
        bins = self.height * self.width
        channels = self.x.shape[1]
        with irutil.for_range(b, 0, width, name="roi.store") as c:
            total = irutil.load(b, irutil.element_ptr(b, acc, self.fdtype, c), self.fdtype)
            if self.mode == "avg":
                total = b.fdiv(total, count)
            plane = b.add(b.mul(r, irutil.i64(channels)), b.add(first, c))
            target = b.add(b.mul(plane, irutil.i64(bins)),
                           b.add(b.mul(ph, irutil.i64(self.width)), pw))
            total = irutil.convert(b, total, self.fdtype, self.out.dtype)
            irutil.store(b, total, irutil.element_ptr(b, dst, self.out.dtype, target),
                         self.out.dtype)


KERNELS = [RoiAlignKernel()]
