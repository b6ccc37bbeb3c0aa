"""The kernel of GridSample (myelin.ops.sampling); CumProd runs on the indexing scan kernel.

``GridSample`` loops over the batch and the output positions. At each position it reads the r
grid values, turns each into the source coordinate of its axis (the arithmetic of
:func:`myelin.ops.sampling.grid_taps`, in the compute type: float64 when x or the grid is
float64, else float32) and into 1, 2 or 4 taps (index, weight, validity); the tap
combinations (up to 4^r) become straight-line offsets and weights, applied to every channel.
Indices are clamped into the input after padding, and invalid taps (zeros padding) are
selected away, so no grid value reads outside x.
"""

import itertools
import math

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil, mathlib
from myelin.codegen.llvm.kernels.base import Kernel
from myelin.errors import MyelinError
from myelin.ops import sampling

_FLOATS = ("float16", "float32", "float64")


def _prod(values):
    return int(math.prod(values))


class GridSampleKernel(Kernel):
    """``GridSample`` with linear, nearest or cubic taps and any padding, r >= 1 axes."""

    name = "GridSample"
    TYPE = "GridSample"

    def supports(self, step, target):
        if step.type != self.TYPE or len(step.inputs) != 2:
            return False
        x, grid = step.inputs
        try:
            mode, _, _ = sampling.grid_params(step)
        except MyelinError:
            return False
        if grid.dtype not in _FLOATS:
            return False
        if mode == "nearest":
            return x.dtype in irutil._STORAGE and x.dtype != "bool"
        return x.dtype in _FLOATS

    def kernel_name(self, step):
        return f"GridSample[{step.attrs.get_str('mode', 'linear')}]"

    def flops(self, step):
        mode = sampling.grid_params(step)[0]
        taps = {"nearest": 1, "linear": 2, "cubic": 4}[mode] ** (step.inputs[0].rank - 2)
        return 2 * taps * step.outputs[0].elements

    def emit(self, ctx, step):
        if step.outputs[0].elements == 0:
            return
        _GridEmitter(ctx, step).emit()


class _GridEmitter:
    def __init__(self, ctx, step):
        self.ctx, self.b = ctx, ctx.builder
        self.x, self.grid = step.inputs
        self.out = step.outputs[0]
        self.mode, self.padding, self.align = sampling.grid_params(step)
        wide = "float64" in (self.x.dtype, self.grid.dtype)
        self.fdtype = "float64" if wide else "float32"
        self.ftype = irutil.F64 if wide else irutil.F32

    def f(self, value):
        return ir.Constant(self.ftype, float(value))

    def minmax(self, x, low, high):
        """x clamped to [low, high] (NaN becomes low)."""
        x = mathlib.intrinsic(self.b, "maxnum", [x, self.f(low)])
        return mathlib.intrinsic(self.b, "minnum", [x, self.f(high)])

    def reflect(self, x, low, high):
        b = self.b
        span = high - low
        if span <= 0:
            return self.f(low)
        below = b.fcmp_ordered("<", x, self.f(low))
        above = b.fcmp_ordered(">", x, self.f(high))
        dx = b.select(below, b.fsub(self.f(low), x), b.fsub(x, self.f(high)))
        turns = mathlib.intrinsic(b, "floor", [b.fdiv(dx, self.f(span))])
        rest = b.fsub(dx, b.fmul(turns, self.f(span)))
        half = mathlib.intrinsic(b, "floor", [b.fmul(turns, self.f(0.5))])
        even = b.fcmp_ordered("==", b.fsub(turns, b.fmul(half, self.f(2.0))), self.f(0.0))
        from_low, from_high = b.fadd(self.f(low), rest), b.fsub(self.f(high), rest)
        mirrored = b.select(below, b.select(even, from_low, from_high),
                            b.select(even, from_high, from_low))
        return b.select(b.or_(below, above), mirrored, x)

    def clamp_index(self, index, size):
        b = self.b
        index = b.select(b.icmp_signed("<", index, irutil.i64(0)), irutil.i64(0), index)
        last = irutil.i64(size - 1)
        return b.select(b.icmp_signed(">", index, last), last, index)

    def taps(self, g, size):
        """[(index i64, weight or None, valid i1 or None)] of grid value ``g`` on an axis."""
        b = self.b
        one = self.f(1.0)
        if self.align:
            x = b.fmul(b.fmul(b.fadd(g, one), self.f(0.5)), self.f(size - 1))
        else:
            x = b.fmul(b.fsub(b.fmul(b.fadd(g, one), self.f(size)), one), self.f(0.5))
        if self.mode == "nearest":
            x = mathlib.intrinsic(b, "rint", [x])
        low, high = sampling.borders(size, self.align)
        if self.padding == "reflection" or (self.padding == "border" and self.mode != "cubic"):
            outside = b.or_(b.fcmp_ordered("<", x, self.f(low)),
                            b.fcmp_ordered(">", x, self.f(high)))
            moved = self.minmax(x, 0, size - 1) if self.padding == "border" \
                else self.reflect(x, low, high)
            x = b.select(outside, moved, x)
        x = self.minmax(x, -sampling.GUARD, size + sampling.GUARD)
        base = mathlib.intrinsic(b, "floor", [x])
        start = b.fptosi(base, irutil.I64)
        if self.mode == "nearest":
            offsets, weights = [0], [None]
        elif self.mode == "linear":
            t = b.fsub(x, base)
            offsets, weights = [0, 1], [b.fsub(one, t), t]
        else:
            offsets, weights = [-1, 0, 1, 2], self.cubic_weights(b.fsub(x, base))
        taps = []
        for offset, weight in zip(offsets, weights):
            index = b.add(start, irutil.i64(offset)) if offset else start
            valid = None
            if self.padding == "zeros":
                valid = b.and_(b.icmp_signed(">=", index, irutil.i64(0)),
                               b.icmp_signed("<", index, irutil.i64(size)))
            elif self.padding == "reflection":
                mirrored = self.reflect(b.sitofp(index, self.ftype), low, high)
                index = b.fptosi(mathlib.intrinsic(b, "trunc", [mirrored]), irutil.I64)
            taps.append((self.clamp_index(index, size), weight, valid))
        return taps

    def cubic_weights(self, t):
        b, f, a = self.b, self.f, sampling.CUBIC_A

        def outer(u):       # ((a u - 5a) u + 8a) u - 4a
            inner = b.fsub(b.fmul(f(a), u), f(5 * a))
            return b.fsub(b.fmul(b.fadd(b.fmul(inner, u), f(8 * a)), u), f(4 * a))

        def middle(u):      # ((a + 2) u - (a + 3)) u u + 1
            inner = b.fsub(b.fmul(f(a + 2), u), f(a + 3))
            return b.fadd(b.fmul(b.fmul(inner, u), u), f(1.0))

        return [outer(b.fadd(t, f(1.0))), middle(t), middle(b.fsub(f(1.0), t)),
                outer(b.fsub(f(2.0), t))]

    def emit(self):
        b, x, grid, out = self.b, self.x, self.grid, self.out
        batch, channels = x.shape[:2]
        spatial = x.shape[2:]
        rank = len(spatial)
        positions = _prod(grid.shape[1:-1])
        area = _prod(spatial)
        strides = [_prod(spatial[a + 1:]) for a in range(rank)]
        src, grid_ptr, dst = (self.ctx.pointer(x), self.ctx.pointer(grid),
                              self.ctx.pointer(out))
        weighted = self.mode != "nearest"
        value_type = self.ftype if weighted else irutil.compute_type(x.dtype)
        zero = irutil.const(value_type, 0)
        with irutil.for_range(b, 0, batch, name="gn") as n:
            with irutil.for_range(b, 0, positions, name="go") as o:
                at = b.mul(b.add(b.mul(n, irutil.i64(positions)), o), irutil.i64(rank))
                per_axis = []
                for axis in range(rank):
                    where = b.add(at, irutil.i64(rank - 1 - axis))
                    g = irutil.load(b, irutil.element_ptr(b, grid_ptr, grid.dtype, where),
                                    grid.dtype)
                    per_axis.append(self.taps(irutil.convert(b, g, grid.dtype, self.fdtype),
                                              spatial[axis]))
                combinations = []
                for combination in itertools.product(*per_axis):
                    offset, weight, valid = irutil.i64(0), None, None
                    for axis, (index, w, ok) in enumerate(combination):
                        offset = b.add(offset, b.mul(index, irutil.i64(strides[axis])))
                        if w is not None:
                            weight = w if weight is None else b.fmul(weight, w)
                        if ok is not None:
                            valid = ok if valid is None else b.and_(valid, ok)
                    combinations.append((offset, weight, valid))
                with irutil.for_range(b, 0, channels, name="gc") as c:
                    plane = b.add(b.mul(n, irutil.i64(channels)), c)
                    base = b.mul(plane, irutil.i64(area))
                    total = None
                    for offset, weight, valid in combinations:
                        ptr = irutil.element_ptr(b, src, x.dtype, b.add(base, offset))
                        value = irutil.load(b, ptr, x.dtype)
                        if weighted:
                            value = irutil.convert(b, value, x.dtype, self.fdtype)
                        if valid is not None:
                            value = b.select(valid, value, zero)
                        if weight is not None:
                            value = b.fmul(weight, value)
                        total = value if total is None else b.fadd(total, value)
                    if weighted:
                        total = irutil.convert(b, total, self.fdtype, x.dtype)
                    target = b.add(b.mul(plane, irutil.i64(positions)), o)
                    irutil.store(b, total, irutil.element_ptr(b, dst, out.dtype, target),
                                 out.dtype)


KERNELS = [GridSampleKernel()]
