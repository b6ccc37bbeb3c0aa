"""Fused kernels: ``Calculate`` and the recipe evaluation that fused products' epilogues share.

A :class:`TypedRecipe` is a parsed recipe with the type of every value; it emits the recipe on
vectors (or scalars) of input values with the element-wise lowering table, so intermediates stay
in registers. :class:`CalculateKernel` runs it in one loop nest over the op's domain (the
broadcast of its inputs). Reductions may only be trailing parts that reduce the domain's last
axis: each row is then computed in a vector loop that also folds every reduction into a vector
accumulator, a scalar loop for the remainder, a horizontal reduction and one store per row.
"""

import weakref

import llvmlite.ir as ir
import numpy as np

from myelin.codegen.llvm import elementwise, irutil, loops
from myelin.codegen.llvm.kernels.base import Kernel, parallel_elementwise
from myelin.codegen.llvm.kernels.reduction import combiner, horizontal
from myelin.errors import FlowError, MyelinError
from myelin.flow import dtypes
from myelin.ops import recipe as recipes
from myelin.ops import registry
from myelin.ops.fused import TRAILING_REDUCTIONS, RecipePart, ValueType, first_extra
from myelin.ops.reduction import identity, mean_scale, reduced_axes

INLINE_MOST = 48      # instructions of an epilogue inlined at each store; more are called
DTYPES = ("float32", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64")


def is_reduction(expr):
    """True if ``expr`` is a call of a reduction op."""
    return (isinstance(expr, recipes.Call)
            and registry.lookup(expr.op).kind == registry.Kind.REDUCTION)


class TypedRecipe:
    """The recipe of ``step`` (attribute ``expr``) typed for ``inputs`` (tensors or values).

    ``types`` maps every Ref and Call to a value with ``dtype`` and ``shape``; ``parts`` maps
    each distinct Call to its registry part. Raises a MyelinError if the recipe does not parse
    or type-check.
    """

    def __init__(self, step, inputs):
        if "expr" not in step.attrs:
            raise FlowError(f"op {step.name} has no expr attribute")
        self.recipe = recipes.parse(step.attrs["expr"])
        if self.recipe.input_count() > len(inputs):
            raise FlowError(f"op {step.name}: recipe reads more than {len(inputs)} inputs")
        self.types = {recipes.Ref("%", i): ValueType(f"%{i}", t.dtype, t.shape)
                      for i, t in enumerate(inputs)}
        self.parts = {}
        for target, expr in self.recipe.assignments:
            self.types[target] = self._infer(step, expr)

    def _infer(self, step, expr):
        if expr not in self.types:
            part = RecipePart(step, expr.op, [self._infer(step, arg) for arg in expr.args])
            (result,) = registry.infer(part)
            self.parts[expr] = part
            self.types[expr] = ValueType(part.name, result.dtype, result.shape)
        return self.types[expr]

    def outputs(self):
        """``(index, expression)`` of each output ``@k``, in index order."""
        return sorted((t.index, e) for t, e in self.recipe.assignments if t.kind == "@")

    def elementwise_only(self, expr):
        """True if every call in ``expr`` has an element-wise lowering (no reduction)."""
        return all(not isinstance(node, recipes.Call)
                   or (elementwise.supported(node.op) and not is_reduction(node))
                   for node in recipes.walk(expr))

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
            values[target] = value(expr.args[0] if is_reduction(expr) else expr)
            if target.kind == "@":
                outputs[target.index] = values[target]
        return [outputs[k] for k in range(len(outputs))]

    def apply(self, builder, inputs):
        """The one output of an epilogue on ``inputs`` (compute-type values of one width), by
        a call of a function of the module that evaluates it, emitted once for these types.

        A product's or convolution's kernel stores each of a tile's vectors through its
        epilogue, in several variants of the tile: inline, a GELU's erf or a quantization's
        rounding was emitted, optimized and compiled a hundred times in one kernel. A cheap
        epilogue (a bias and ReLU: at most ``INLINE_MOST`` instructions) is still inlined at
        every store; a costly one is compiled once and called."""
        functions = builder.module.__dict__.setdefault("myelin_epilogues", {})
        types = tuple(value.type for value in inputs)
        function = functions.get((id(self), types))
        if function is None:
            module = builder.module
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
        return builder.call(function, inputs)


_EPILOGUES = weakref.WeakKeyDictionary()   # FusedMatMul/FusedConv step: TypedRecipe or None
_PLANS = weakref.WeakKeyDictionary()       # Calculate step: _Plan or None


def _once(cache, step, make):
    """``make(step)``, computed once per step."""
    if step not in cache:
        cache[step] = make(step)
    return cache[step]


def epilogue(step):
    """The typed epilogue of a ``FusedMatMul`` or ``FusedConv`` step, or None if it cannot be
    compiled.

    It needs one element-wise output of the product's type, and extra inputs of that dtype
    that broadcast to the product's shape.
    """
    return _once(_EPILOGUES, step, _typed_epilogue)


def _typed_epilogue(step):
    product = step.outputs[0]
    extras = step.inputs[first_extra(step):]
    if any(x.dtype != product.dtype for x in extras):
        return None
    try:
        if np.broadcast_shapes(product.shape, *(x.shape for x in extras)) != product.shape:
            return None
        typed = TypedRecipe(step, [product] + list(extras))
    except (MyelinError, ValueError):
        return None
    outputs = typed.outputs()
    if len(outputs) != 1:
        return None
    result = typed.types[recipes.Ref("@", 0)]
    if (result.dtype, result.shape) != (product.dtype, product.shape):
        return None
    if not all(typed.elementwise_only(expr) for _, expr in typed.recipe.assignments):
        return None
    return typed


class _Plan:
    """What CalculateKernel needs about one step.

    ``domain`` is the loop shape; ``reductions`` maps output index to reduction op type;
    ``strides`` holds each output's element strides over the domain.
    """

    def __init__(self, typed, domain, reductions):
        self.typed, self.domain, self.reductions = typed, domain, reductions
        row_strides = loops.contiguous_strides(domain[:-1]) + (0,)
        full_strides = loops.contiguous_strides(domain)
        self.strides = [row_strides if k in reductions else full_strides
                        for k in range(typed.recipe.outputs)]


def _plan(step):
    """The plan of a Calculate step, or None if the kernel does not support it."""
    dtype = step.outputs[0].dtype if step.outputs else None
    if dtype not in DTYPES or any(t.dtype != dtype for t in step.inputs + step.outputs):
        return None
    try:
        domain = tuple(np.broadcast_shapes(*(t.shape for t in step.inputs)))
        typed = TypedRecipe(step, step.inputs)
    except (MyelinError, ValueError):
        return None
    outputs = typed.outputs()
    if len(outputs) != len(step.outputs):
        return None
    read = {node for _, expr in typed.recipe.assignments for node in recipes.walk(expr)}
    reductions = {}
    for target, expr in typed.recipe.assignments:
        if is_reduction(expr):
            argument = expr.args[0]
            part = typed.parts[expr]
            if (target.kind != "@" or target in read or expr.op not in TRAILING_REDUCTIONS
                    or not typed.elementwise_only(argument)
                    or typed.types[argument].shape != domain or not domain
                    or reduced_axes(part, len(domain)) != (len(domain) - 1,)
                    or expr.op == "Mean" and not dtype.startswith("float")):
                return None
            reductions[target.index] = expr.op
        elif not typed.elementwise_only(expr):
            return None
        elif target.kind == "@" and typed.types[target].shape != domain:
            return None
    for (index, _), tensor in zip(outputs, step.outputs):
        value = typed.types[recipes.Ref("@", index)]
        if (value.dtype, tuple(value.shape)) != (tensor.dtype, tuple(tensor.shape)):
            return None
    return _Plan(typed, domain, reductions)


class CalculateKernel(Kernel):
    """A ``Calculate`` recipe in one vectorized loop nest (see the module docstring)."""

    name = "Calculate"
    shares_code = True

    @staticmethod
    def plan(step):
        """The step's parsed and checked recipe (computed once per step), or None."""
        return _once(_PLANS, step, _plan)

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

    def emit(self, ctx, step):
        plan = self.plan(step)

        def operands(sub):
            return ([sub.operand(t, loops.broadcast_strides(t.shape, plan.domain))
                     for t in step.inputs],
                    [sub.operand(t, strides) for t, strides in zip(step.outputs, plan.strides)])
        if plan.reductions:
            self._emit_rows(ctx, plan, *operands(ctx))
        else:
            parallel_elementwise(ctx, f"Calculate.{step.name}", step.inputs + step.outputs,
                                 plan.domain, operands,
                                 lambda b, values, lanes: plan.typed.evaluate(b, values),
                                 flops=len(plan.typed.parts))

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
