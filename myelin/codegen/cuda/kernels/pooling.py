"""Pooling: MaxPool (with its Indices output), AveragePool and LpPool over windows, and the
global pools.

A windowed pool computes one output element per thread, neighbouring threads on neighbouring
output positions (coalesced stores): the window's taps inside the input are found by loop
bounds per axis (:mod:`~.window`, so padding and ceil_mode windows cost nothing), folded into
a register and finished (divided by the count, or raised to 1/p). The semantics are the CPU's
(:mod:`myelin.codegen.llvm.kernels.pool`): MaxPool keeps the first maximum (a NaN above any
number, as NumPy's argmax) and its flat input index, row-major or, with ``storage_order`` 1,
column-major over the spatial axes; AveragePool divides by the taps inside the input, or with
``count_include_pad`` by those inside the padded extent. A global pool reduces each plane with 1, 32 or a block of
threads (chosen by the plane's size as reductions are, :mod:`~.reduction`), combining their
partial results as a reduction does.
"""

import math

from myelin.codegen.cuda import cudatypes, expressions
from myelin.codegen.cuda.kernels.base import (CudaKernel, Launch, Signature, grid_stride, kernel,
                                              unit_loop)
from myelin.codegen.cuda.kernels.reduction import (block_of, combine, finish, fold,
                                                   shared_declarations, start, unit_threads)
from myelin.codegen.cuda.kernels.window import (Axis, split, tap_range, window_axes, window_loops,
                                                window_start)
from myelin.plan.strides import contiguous_strides
from myelin.flow.attributes import Attributes
from myelin.ops import conv as conv_ops
from myelin.ops.registry import attribute

WINDOWED = ("MaxPool", "AveragePool", "LpPool")
# A MaxPool tap ``xv`` replaces the maximum so far ``acc``: greater, or the first NaN.
_GREATER = "xv > acc || (xv != xv && acc == acc)"
GLOBAL = ("GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool")


def _math(op_type, args, dtype):
    return expressions.expression(op_type, args, [dtype] * len(args), dtype, Attributes())


class _Kind:
    """The C of one pool kind on values of ``dtype``: its term per input element, the
    reduction that folds the terms, and the finishing of the folded value."""

    def __init__(self, step, dtype):
        self.kind = step.type.replace("Global", "")
        self.dtype = dtype
        self.p = attribute(step, "p") if self.kind == "LpPool" else None
        self.reduction = "Max" if self.kind == "MaxPool" else "Sum"

    def term(self, x):
        if self.kind != "LpPool":
            return x
        magnitude = _math("Abs", [x], self.dtype)
        if self.p == 1:
            return magnitude
        if self.p == 2:
            return f"({x} * {x})"
        return _math("Pow", [magnitude, cudatypes.literal(self.p, self.dtype)], self.dtype)

    def finish(self, value, count):
        """The pool's value from the fold ``value`` of ``count`` (a C expression) terms."""
        if self.kind == "AveragePool":
            return f"({value} / ({cudatypes.compute(self.dtype)})({count}))"
        if self.kind == "LpPool" and self.p == 2:
            return _math("Sqrt", [value], self.dtype)
        if self.kind == "LpPool" and self.p != 1:
            return _math("Pow", [value, cudatypes.literal(1.0 / self.p, self.dtype)], self.dtype)
        return value


class PoolKernel(CudaKernel):
    """MaxPool, AveragePool, LpPool, GlobalMaxPool, GlobalAveragePool and GlobalLpPool."""

    TYPES = WINDOWED + GLOBAL
    name = "Pool"

    def supports(self, step, target):
        x, y = step.inputs[0], step.outputs[0]
        if step.type not in self.TYPES or len(x.shape) < 3 or x.dtype != y.dtype:
            return False
        if len(step.outputs) == 2 and not (step.type == "MaxPool"
                                           and step.outputs[1].dtype == "int64"):
            return False
        return x.dtype in cudatypes.FLOATS

    def kernel_name(self, step):
        return step.type

    def variant(self, step, target):
        if step.type in GLOBAL:
            return f"{target.isa()}t{unit_threads(math.prod(step.inputs[0].shape[2:]))}"
        return target.isa()

    def generate(self, step, names):
        name = names.unique(f"{step.type}_{step.name}")
        if step.type in GLOBAL:
            return [self._global(name, step)]
        return [self._windowed(name, step)]

    @staticmethod
    def _windowed(name, step):
        g = conv_ops.geometry(step)
        x, y = step.inputs[0], step.outputs[0]
        indices = step.outputs[1] if len(step.outputs) == 2 else None
        pool = _Kind(step, y.dtype)
        ctype = cudatypes.compute(y.dtype)
        plane, in_plane = math.prod(g.output), math.prod(g.input)
        in_strides = contiguous_strides(g.input)
        column_major = step.type == "MaxPool" and step.attrs.get_int("storage_order", 0) == 1
        index_strides = (contiguous_strides(g.input[::-1])[::-1] if column_major
                         else in_strides)
        signature = Signature()
        xp = signature.pointer(x)
        position_lines, positions = split("pix", g.output, "o")
        axes = window_axes(g, positions)
        before, heads, offset, _ = window_loops(axes, in_strides)
        inner = [f"const int64_t pix = u % {plane}LL;", f"const int64_t nc = u / {plane}LL;"]
        inner += position_lines + before
        inner.append(f"const int64_t xb = nc * {in_plane}LL + {window_start(axes, in_strides)};")
        if step.type == "MaxPool":
            inner.append(f"{ctype} acc = {start('Max', y.dtype)};")
        else:
            inner.append(f"{ctype} acc = {cudatypes.literal(0, y.dtype)};")
        load = cudatypes.load(x.dtype, f"{xp}[xb + {offset}]")
        taps = [f"const {ctype} xv = {load};"]
        if step.type == "MaxPool":
            if indices is None:
                taps.append(f"if ({_GREATER}) acc = xv;")
            else:
                # The tap's offset in the Indices' order, over the same loop variables.
                _, _, index_offset, _ = window_loops(axes, index_strides)
                inner.append("int64_t best = -1;     // no tap yet")
                taps += [f"if ({_GREATER} || best < 0) {{", "  acc = xv;",
                         f"  best = nc * {in_plane}LL + "
                         f"{window_start(axes, index_strides)} + {index_offset};", "}"]
        else:
            taps.append(f"acc += {pool.term('xv')};")
        depth = len(heads)
        inner += ["  " * i + head for i, head in enumerate(heads)]
        inner += ["  " * depth + line for line in taps]
        inner += ["  " * i + "}" for i in range(depth - 1, -1, -1)]
        count = "1"
        if step.type == "AveragePool":
            include_pad = step.attrs.get_int("count_include_pad", 0)
            factors = []
            for a, axis in enumerate(axes):
                if include_pad:
                    axis = Axis(axis.position, axis.stride, 0, axis.dilation, axis.taps,
                                g.input[a] + g.pads_begin[a] + g.pads_end[a], axis.outputs)
                lines, lo, hi = tap_range(axis, f"n{a}")
                inner += lines
                factors.append(f"({hi} - {lo})")
            count = " * ".join(factors)
        yp = signature.pointer(y, write=True)
        inner.append(f"{yp}[u] = {cudatypes.store(y.dtype, pool.finish('acc', count))};")
        if indices is not None:
            inner.append(f"{signature.pointer(indices, write=True)}[u] = best;")
        units = g.batch * g.in_channels * plane
        body = [grid_stride("u", units)] + ["  " + line for line in inner] + ["}"]
        return kernel(name, step, signature, body, Launch(units))

    @staticmethod
    def _global(name, step):
        x, y = step.inputs[0], step.outputs[0]
        pool = _Kind(step, y.dtype)
        plane = math.prod(x.shape[2:])
        threads = unit_threads(plane)
        ctype = cudatypes.compute(y.dtype)
        accumulator = [("acc", pool.reduction, y.dtype)]
        signature = Signature()
        xp, yp = signature.pointer(x), signature.pointer(y, write=True)
        load = cudatypes.load(x.dtype, f"{xp}[u * {plane}LL + j]")
        body = shared_declarations(accumulator, threads)
        body += unit_loop("u", y.elements, threads, block_of(threads))
        body += [f"  {ctype} acc = {start(pool.reduction, y.dtype)};",
                 f"  for (int64_t j = lane; j < {plane}LL; j += {threads}) {{",
                 f"    const {ctype} xv = {load};", f"    acc = {fold(pool.reduction, y.dtype, 'acc', pool.term('xv'))};", "  }"]
        body += ["  " + line for line in combine(accumulator, threads)]
        value = pool.finish(finish(pool.reduction, y.dtype, "acc", plane), plane)
        body += [f"  if (lane == 0) {yp}[u] = {cudatypes.store(y.dtype, value)};", "}"]
        return kernel(name, step, signature, body, Launch(y.elements, threads, block_of(threads)))
