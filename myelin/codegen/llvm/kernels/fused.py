"""Fused kernels: ``Calculate`` and the recipe evaluation that fused products' epilogues share.

A :class:`TypedRecipe` is a parsed recipe with the type of every value
(:mod:`myelin.plan.recipe` types, checks and plans it); it emits the recipe on vectors (or
scalars) of input values with the element-wise lowering table, so intermediates stay in
registers. :class:`CalculateKernel` runs it in one loop nest over the op's domain (the
broadcast of its inputs). Reductions may only be trailing parts that reduce the domain's last
axis: each row is then computed in a vector loop that also folds every reduction into a vector
accumulator, a scalar loop for the remainder, a horizontal reduction and one store per row.
A step without reductions whose inputs are each a run of its elements or one value reads
its element count as it runs (:class:`~.runs.RunKernel`), so steps of other sizes share
its code.
"""

import weakref

import llvmlite.ir as ir
import numpy as np

from myelin.codegen.llvm import elementwise, irutil, loops
from myelin.codegen.llvm.kernels.base import parallel_elementwise
from myelin.codegen.llvm.kernels.runs import RunKernel
from myelin.codegen.llvm.kernels.reduction import combiner, horizontal
from myelin.flow import dtypes
from myelin.ops import recipe as recipes
from myelin.ops.reduction import identity, mean_scale
from myelin.plan import recipe as plan_recipes

INLINE_MOST = 48      # instructions of an epilogue inlined at each store; more are called


class TypedRecipe(plan_recipes.TypedRecipe):
    """A typed recipe (:class:`myelin.plan.recipe.TypedRecipe`) emitted in LLVM IR."""

    def evaluate(self, builder, inputs):
        """Emit the recipe on ``inputs`` (compute-type values, all of one width).

        Returns one value per output ``@k``; for a reduction output, the value of its argument
        (what the caller accumulates).
        """
        values = {recipes.Ref("%", i): value for i, value in enumerate(inputs)}

        def value(expr):
            if expr not in values:
                part = self.parts[expr]
                values[expr] = elementwise.emit(
                    builder, expr.op, [value(arg) for arg in expr.args],
                    [arg.dtype for arg in part.inputs], self.types[expr].dtype, part.attrs)
            return values[expr]

        outputs = {}
        for target, expr in self.recipe.assignments:
            values[target] = value(expr.args[0] if plan_recipes.is_reduction(expr) else expr)
            if target.kind == "@":
                outputs[target.index] = values[target]
        return [outputs[k] for k in range(len(outputs))]

    def apply(self, builder, inputs, inline=False):
        """The one output of an epilogue on ``inputs`` (compute-type values of one width):
        emitted here if ``inline``, else by a call of a function of the module that evaluates
        it, emitted once for these types (:meth:`function`)."""
        if inline:
            return self.evaluate(builder, inputs)[0]
        return builder.call(self.function(builder.module, tuple(v.type for v in inputs)), inputs)

    def costly(self, module, types):
        """True if the epilogue on values of ``types`` is too costly to inline at each store
        (see :meth:`function`)."""
        return "noinline" in self.function(module, types).attributes

    def function(self, module, types):
        """The function of ``module`` evaluating the epilogue on values of ``types``.

        A product's or convolution's kernel stores each of a tile's vectors through its
        epilogue, in several variants of the tile: inline, a GELU's erf or a quantization's
        rounding was emitted, optimized and compiled a hundred times in one kernel. A cheap
        epilogue (a bias and ReLU: at most ``INLINE_MOST`` instructions) is still inlined at
        every store; a costly one is compiled once and called, or inlined once where a kernel
        stores a whole tile in a loop (:class:`myelin.codegen.llvm.kernels.matmul.Task`:
        its constants are then made once per tile, not once per vector)."""
        functions = module.__dict__.setdefault("myelin_epilogues", {})
        function = functions.get((id(self), types))
        if function is None:
            function = ir.Function(module, ir.FunctionType(types[0], types),
                                   module.get_unique_name("epilogue"))
            function.linkage = "internal"
            function.attributes.add("nounwind")
            body = ir.IRBuilder(function.append_basic_block("entry"))
            (result,) = self.evaluate(body, list(function.args))
            body.ret(result)
            costly = sum(len(block.instructions) for block in function.blocks) > INLINE_MOST
            function.attributes.add("noinline" if costly else "alwaysinline")
            functions[(id(self), types)] = function
        return function


_EPILOGUES = weakref.WeakKeyDictionary()   # FusedMatMul/FusedConv step: TypedRecipe or None
_PLANS = weakref.WeakKeyDictionary()       # Calculate step: CalculatePlan or None


def epilogue(step):
    """The typed epilogue of a ``FusedMatMul`` or ``FusedConv`` step, or None if it cannot be
    compiled (:func:`myelin.plan.recipe.epilogue`)."""
    return plan_recipes.once(_EPILOGUES, step,
                             lambda s: plan_recipes.epilogue(s, elementwise.supported, TypedRecipe))


class CalculateKernel(RunKernel):
    """A ``Calculate`` recipe in one vectorized loop nest (see the module docstring)."""

    name = "Calculate"
    shares_code = True

    @staticmethod
    def plan(step):
        """The step's :class:`~myelin.plan.recipe.CalculatePlan` (computed once per step), or
        None."""
        return plan_recipes.once(_PLANS, step, lambda s: plan_recipes.calculate_plan(
            s, elementwise.supported, TypedRecipe))

    def supports(self, step, target):
        return step.type == "Calculate" and self.plan(step) is not None

    def variant(self, step, target):
        plan = self.plan(step)
        lanes = loops.lanes(target, step.outputs[0].dtype)
        extent = plan.domain[-1] if plan.reductions else int(np.prod(plan.domain))
        return f"{target.isa()}x{lanes if extent >= lanes else 1}"

    def inplace(self, step):
        plan, out = self.plan(step), step.outputs[0]
        return [i for i, t in enumerate(step.inputs)
                if t.shape == out.shape and t.itemsize == out.itemsize
                and loops.broadcast_strides(t.shape, plan.domain) == plan.strides[0]]

    def flops(self, step):
        plan = self.plan(step)
        return int(np.prod(plan.domain)) * len(plan.typed.parts)

    def run_domain(self, step):
        plan = self.plan(step)
        return None if plan.reductions else plan.domain

    def run_flops(self, step):
        return len(self.plan(step).typed.parts)

    def emit(self, ctx, step):
        plan = self.plan(step)

        def body(b, values, lanes):
            return plan.typed.evaluate(b, values)
        if self.count(step) is not None:
            self.emit_run(ctx, step, body)
            return

        def operands(sub):
            return ([sub.operand(t, loops.broadcast_strides(t.shape, plan.domain))
                     for t in step.inputs],
                    [sub.operand(t, strides) for t, strides in zip(step.outputs, plan.strides)])
        if plan.reductions:
            self._emit_rows(ctx, plan, *operands(ctx))
        else:
            parallel_elementwise(ctx, f"Calculate.{step.name}", step.inputs + step.outputs,
                                 plan.domain, operands, body, flops=len(plan.typed.parts))

    @staticmethod
    def _emit_rows(ctx, plan, inputs, outputs):
        """Loops over the kept dimensions; each row is computed and reduced (last axis)."""
        b = ctx.builder
        n = plan.domain[-1]
        dtype = outputs[0].dtype
        itemsize = dtypes.itemsize(dtype)
        acc_type = irutil.compute_type(dtype)
        operands = inputs + outputs
        width = loops.vector_width(ctx.target, operands)
        if n < width:
            width = max(1, 1 << n.bit_length() >> 1)   # a narrower vector still helps
        vector_end = n - n % width if width > 1 else 0
        reductions = sorted(plan.reductions.items())
        combines = [combiner(op, dtype) for _, op in reductions]
        identities = [identity(op, dtype) for _, op in reductions]

        def row(pointers):
            in_ptrs, out_ptrs = pointers[:len(inputs)], pointers[len(inputs):]
            # Inputs broadcast along the row are loaded once per row.
            fixed = {i: irutil.load(b, ptr, dtype, 1, itemsize)
                     for i, (op, ptr) in enumerate(zip(inputs, in_ptrs)) if op.strides[-1] == 0}
            splats = {i: irutil.splat(b, value, width) for i, value in fixed.items()}

            def accumulate(index, lanes, accumulators):
                """Evaluate the recipe at ``index``, store element-wise outputs, fold the rest."""
                values = [(splats if lanes > 1 else fixed)[i] if i in fixed else
                          irutil.load(b, irutil.element_ptr(b, ptr, dtype, index), dtype, lanes,
                                      itemsize)
                          for i, ptr in enumerate(in_ptrs)]
                results = plan.typed.evaluate(b, values)
                for k, value in enumerate(results):
                    if k not in plan.reductions:
                        irutil.store(b, value, irutil.element_ptr(b, out_ptrs[k], dtype, index),
                                     dtype, itemsize)
                return [combine(b, acc, results[k]) for (k, _), combine, acc
                        in zip(reductions, combines, accumulators)]

            totals = [irutil.const(acc_type, identity) for identity in identities]
            if vector_end:
                start = [irutil.const(irutil.vector_of(acc_type, width), identity)
                         for identity in identities]
                with irutil.accumulating_loop(b, 0, vector_end, start, width, name="c") as loop:
                    loop.set_next(accumulate(loop.index, width, loop.values))
                totals = [horizontal(b, acc, combine)
                          for acc, combine in zip(loop.results, combines)]
            if vector_end < n:
                with irutil.accumulating_loop(b, vector_end, n, totals, name="t") as loop:
                    loop.set_next(accumulate(loop.index, 1, loop.values))
                totals = loop.results
            for (k, op), total in zip(reductions, totals):
                if op == "Mean":
                    total = b.fmul(total, irutil.const(acc_type, mean_scale(n)))
                irutil.store(b, total, out_ptrs[k], dtype, itemsize)

        shape, strides = loops.collapse(plan.domain[:-1], [op.strides[:-1] for op in operands])
        loops.outer_loops(b, shape, operands, strides, row)
