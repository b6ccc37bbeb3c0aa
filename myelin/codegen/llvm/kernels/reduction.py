"""Reductions over all or some axes: Sum, Product, Max, Min, All, Any, Count and Mean.

The output is first set to the reduction's identity. Then one pass over the input combines
every element into its output element: rows along a kept innermost axis are combined as
vectors; rows along a reduced innermost axis are folded into a vector accumulator, reduced
horizontally and combined once per row. Mean divides by the count at the end.
"""

import math

import llvmlite.ir as ir

from myelin.codegen.llvm import elementwise, irutil, loops
from myelin.codegen.llvm.kernels.base import Kernel
from myelin.flow.attributes import Attributes
from myelin.ops.reduction import FOLDS, identity, mean_scale, reduced_axes


# Each reduction folds values with an op of the element-wise lowering table, so Max and Min
# propagate NaN like NumPy and compare unsigned integers as unsigned.
def combiner(op_type, dtype):
    """``combine(builder, x, y)`` folding two partial results of reduction ``op_type``."""
    def combine(builder, x, y):
        return elementwise.emit(builder, FOLDS[op_type], [x, y], [dtype, dtype], dtype,
                                Attributes())
    return combine


def horizontal(builder, vector, combine):
    """Reduce a vector to a scalar with a tree of ``combine`` over halves."""
    width = irutil.width_of(vector)
    while width > 1:
        half = width // 2
        mask = ir.VectorType(irutil.I32, half)
        low = builder.shuffle_vector(vector, vector, ir.Constant(mask, list(range(half))))
        high = builder.shuffle_vector(vector, vector, ir.Constant(mask, list(range(half, width))))
        vector = combine(builder, low, high)
        width = half
    return builder.extract_element(vector, ir.Constant(irutil.I32, 0)) \
        if isinstance(vector.type, ir.VectorType) else vector


class ReductionKernel(Kernel):
    """Sum/Product/Max/Min/All/Any/Count/Mean over all axes or the ``axis`` attribute."""

    TYPES = ("Sum", "Product", "Max", "Min", "All", "Any", "Count", "Mean")
    shares_code = True

    def supports(self, step, target):
        return (step.type in self.TYPES and len(step.inputs) == 1
                and step.outputs[0].elements * self._count(step) == step.inputs[0].elements)

    def kernel_name(self, step):
        return f"{step.type}Reduce"

    def flops(self, step):
        return step.inputs[0].elements

    @staticmethod
    def _count(step):
        """How many input elements make one output element (0 over an empty axis)."""
        shape = step.inputs[0].shape
        return math.prod(shape[axis] for axis in reduced_axes(step, len(step.inputs[0].shape)))

    def emit(self, ctx, step):
        b, target = ctx.builder, ctx.target
        source, out = step.inputs[0], step.outputs[0]
        axes = reduced_axes(step, len(step.inputs[0].shape))
        kept_shape = tuple(1 if a in axes else d for a, d in enumerate(source.shape))
        out_strides = tuple(0 if a in axes else s
                            for a, s in enumerate(loops.contiguous_strides(kept_shape)))
        combine = combiner(step.type, out.dtype)
        start = identity(step.type, out.dtype)
        acc_type = irutil.compute_type(out.dtype)

        # 1. Output := identity.
        loops.elementwise(b, target, out.shape, [], [ctx.operand(out)],
                          lambda bb, values, lanes: [
                              irutil.const(irutil.vector_of(acc_type, lanes), start)])

        # 2. Combine every input element into its output element (an empty input has none).
        if source.elements:
            self._combine_input(ctx, source, out, out_strides, combine, start, acc_type)

        # 3. Mean: divide by the number of reduced elements.
        if step.type == "Mean":
            count = self._count(step)

            def scale(bb, values, lanes):
                (x,) = values
                if irutil.is_float(x.type):
                    return [bb.fmul(x, irutil.const(x.type, mean_scale(count)))]
                return [bb.sdiv(x, irutil.const(x.type, count))]

            operand = ctx.operand(out)
            loops.elementwise(b, target, out.shape, [operand], [operand], scale)

    def _combine_input(self, ctx, source, out, out_strides, combine, start, acc_type):
        src = ctx.operand(source)
        dst = ctx.operand(out, out_strides)
        shape, (src_strides, dst_strides) = loops.collapse(source.shape,
                                                           [src.strides, dst.strides])
        if not shape:
            shape, src_strides, dst_strides = (1,), (1,), (0,)
        if dst_strides[-1] != 0:
            src_op = loops.Operand(src.ptr, src.dtype, src_strides, src.align)
            acc_op = loops.Operand(dst.ptr, dst.dtype, dst_strides, dst.align)

            def accumulate(bb, values, lanes):
                x, acc = values
                return [combine(bb, acc, irutil.convert(bb, x, source.dtype, out.dtype))]

            loops.elementwise(ctx.builder, ctx.target, shape, [src_op, acc_op], [acc_op],
                              accumulate)
        else:
            self._emit_inner_reduction(ctx, shape, src, src_strides, dst, dst_strides,
                                       combine, start, acc_type, source.dtype, out.dtype)

    def _emit_inner_reduction(self, ctx, shape, src, src_strides, dst, dst_strides, combine,
                              initial, acc_type, in_dtype, out_dtype):
        b, target = ctx.builder, ctx.target
        inner = shape[-1]
        operands = [loops.Operand(src.ptr, src.dtype, src_strides, src.align),
                    loops.Operand(dst.ptr, dst.dtype, dst_strides, dst.align)]
        width = loops.vector_width(target, operands)
        if inner < width or src_strides[-1] != 1:
            width = 1

        def row(pointers):
            src_ptr, dst_ptr = pointers
            vector_end = inner - inner % width if width > 1 else 0
            total = None
            if vector_end:
                acc0 = irutil.const(irutil.vector_of(acc_type, width), initial)
                with irutil.accumulating_loop(b, 0, vector_end, [acc0], width, name="r") as loop:
                    at = irutil.element_ptr(b, src_ptr, in_dtype, loop.index)
                    x = irutil.load(b, at, in_dtype, width, src.itemsize)
                    loop.set_next([combine(b, loop.values[0],
                                           irutil.convert(b, x, in_dtype, out_dtype))])
                total = horizontal(b, loop.results[0], combine)
            if vector_end < inner:
                start = total if total is not None else irutil.const(acc_type, initial)
                with irutil.accumulating_loop(b, vector_end, inner, [start], name="t") as loop:
                    at = irutil.element_ptr(b, src_ptr, in_dtype,
                                            b.mul(loop.index, irutil.i64(src_strides[-1])))
                    x = irutil.load(b, at, in_dtype, 1, src.itemsize)
                    loop.set_next([combine(b, loop.values[0],
                                           irutil.convert(b, x, in_dtype, out_dtype))])
                total = loop.results[0]
            current = irutil.load(b, dst_ptr, out_dtype, 1, dst.itemsize)
            irutil.store(b, combine(b, current, total), dst_ptr, out_dtype, dst.itemsize)

        loops.outer_loops(b, shape[:-1], operands, [s[:-1] for s in (src_strides, dst_strides)],
                          row)
