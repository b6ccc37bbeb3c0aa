"""Fused kernels: a ``Calculate`` recipe as one CUDA kernel.

The recipe becomes straight-line C: one ``const`` temporary per distinct operation, written by
the op's expression generator (:mod:`~myelin.codegen.cuda.expressions`), so intermediates stay
in registers. Which recipes are supported, their domain and reductions are decided by the
planner's rules (:func:`myelin.plan.recipe.calculate_plan`, with this back end's element-wise
table): a recipe without
reductions is one grid-stride loop over its domain (:func:`~.elementwise.pointwise`); one whose
outputs end in reductions over the domain's last axis computes each row with 1, 32 or a block
of threads (as :mod:`~.reduction` chooses by the row's length): each thread evaluates the
recipe at its elements of the row, stores the element-wise outputs and folds the reductions'
arguments, then the unit's threads combine their accumulators and the first stores them.
"""

import weakref

from myelin.codegen.cuda import cudatypes, expressions
from myelin.codegen.cuda.kernels.base import (CudaKernel, Launch, Signature, coordinates,
                                              kernel, literal_constant, unit_loop)
from myelin.codegen.cuda.kernels.elementwise import pointwise, same_layout_inputs
from myelin.codegen.cuda.kernels.reduction import (block_of, combine, finish, fold,
                                                   shared_declarations, start, unit_threads)
from myelin.ops import recipe as recipes
from myelin.plan import recipe as plan_recipes
from myelin.plan.strides import broadcast_strides, collapse

_PLANS = weakref.WeakKeyDictionary()       # Calculate step: CalculatePlan or None
_EPILOGUES = weakref.WeakKeyDictionary()   # FusedMatMul/FusedConv step: TypedRecipe or None


def epilogue(step):
    """The typed epilogue of a ``FusedMatMul`` or ``FusedConv`` step that the CUDA expressions
    compute, or None (:func:`myelin.plan.recipe.epilogue`; computed once per step)."""
    return plan_recipes.once(_EPILOGUES, step,
                             lambda s: plan_recipes.epilogue(s, expressions.supported))


def recipe_code(typed, values, prefix="t"):
    """(C statements, one value per output ``@k``) evaluating the typed recipe ``typed`` on
    input values ``values`` (identifiers or literals); a reduction output's value is its
    argument's, which the caller folds."""
    names = {recipes.Ref("%", i): value for i, value in enumerate(values)}
    lines = []

    def value(expr):
        if expr not in names:
            args = [value(arg) for arg in expr.args]
            part = typed.parts[expr]
            dtype = typed.types[expr].dtype
            text = expressions.expression(expr.op, args, [a.dtype for a in part.inputs], dtype,
                                          part.attrs)
            name = f"{prefix}{len(lines)}"
            lines.append(f"const {cudatypes.compute(dtype)} {name} = {text};")
            names[expr] = name
        return names[expr]

    outputs = {}
    for target, expr in typed.recipe.assignments:
        names[target] = value(expr.args[0] if plan_recipes.is_reduction(expr) else expr)
        if target.kind == "@":
            outputs[target.index] = names[target]
    return lines, [outputs[k] for k in range(len(outputs))]


class CalculateKernel(CudaKernel):
    """A ``Calculate`` recipe in one kernel (see the module docstring)."""

    name = "Calculate"

    @staticmethod
    def plan(step):
        """The step's :class:`~myelin.plan.recipe.CalculatePlan` for the CUDA expressions
        (computed once per step), or None."""
        return plan_recipes.once(_PLANS, step,
                                 lambda s: plan_recipes.calculate_plan(s, expressions.supported))

    def supports(self, step, target):
        return step.type == "Calculate" and self.plan(step) is not None

    def variant(self, step, target):
        plan = self.plan(step)
        if not plan.reductions:
            return target.isa()
        return f"{target.isa()}t{unit_threads(plan.domain[-1])}"

    def inplace(self, step):
        plan = self.plan(step)
        return [] if 0 in plan.reductions else same_layout_inputs(step, plan.domain)

    def generate(self, step, names):
        plan = self.plan(step)
        name = names.unique(f"Calculate_{step.name}")
        if not plan.reductions:
            return [pointwise(name, step, plan.domain, step.inputs, step.outputs,
                              lambda values: recipe_code(plan.typed, values))]
        return [self._rows(name, step, plan)]

    @staticmethod
    def _rows(name, step, plan):
        domain = plan.domain
        length, rows = domain[-1], 1
        for d in domain[:-1]:
            rows *= d
        threads = unit_threads(length)
        dtype = step.outputs[0].dtype
        ctype = cudatypes.compute(dtype)
        in_strides = [broadcast_strides(t.shape, domain) for t in step.inputs]
        strides = in_strides + list(plan.strides)
        outer_shape, outer_strides = collapse(domain[:-1], [s[:-1] for s in strides])
        lines, bases = coordinates("row", outer_shape, outer_strides, "o")
        signature = Signature()
        reductions = sorted(plan.reductions.items())
        accumulators = [(f"acc{k}", op_type, dtype) for k, op_type in reductions]

        body = shared_declarations(accumulators, threads)
        body += unit_loop("row", rows, threads, block_of(threads))
        body += ["  " + line for line in lines]
        body += [f"  {ctype} {name_} = {start(op_type, dtype)};"
                 for name_, op_type, _ in accumulators]
        loop = []
        values = []
        for i, (tensor, base, own) in enumerate(zip(step.inputs, bases, in_strides)):
            constant = literal_constant(tensor)
            if constant is not None:
                values.append(constant)
                continue
            pointer = signature.pointer(tensor)
            at = base if own[-1] == 0 else f"{base} + j * {own[-1]}LL"
            load = (f"const {cudatypes.compute(tensor.dtype)} x{i} = "
                    f"{cudatypes.load(tensor.dtype, f'{pointer}[{at}]')};")
            (body if own[-1] == 0 else loop).append(("  " if own[-1] == 0 else "") + load)
            values.append(f"x{i}")
        statements, results = recipe_code(plan.typed, values)
        loop += statements
        n_inputs = len(step.inputs)
        for k, (tensor, result) in enumerate(zip(step.outputs, results)):
            if k in plan.reductions:
                acc = f"acc{k}"
                loop.append(f"{acc} = {fold(plan.reductions[k], dtype, acc, result)};")
                continue
            pointer = signature.pointer(tensor, write=True)
            at = f"{bases[n_inputs + k]} + j * {strides[n_inputs + k][-1]}LL"
            loop.append(f"{pointer}[{at}] = {cudatypes.store(tensor.dtype, result)};")
        body.append(f"  for (int64_t j = lane; j < {length}LL; j += {threads}) {{")
        body += ["    " + line for line in loop] + ["  }"]
        body += ["  " + line for line in combine(accumulators, threads)]
        body.append("  if (lane == 0) {")
        for k, op_type in reductions:
            pointer = signature.pointer(step.outputs[k], write=True)
            value = finish(op_type, dtype, f"acc{k}", length)
            body.append(f"    {pointer}[{bases[n_inputs + k]}] = "
                        f"{cudatypes.store(dtype, value)};")
        body += ["  }", "}"]
        return kernel(name, step, signature, body, Launch(rows, threads, block_of(threads)))
