"""Fused recipes as the planner and every back end see them: typed, checked against a back
end's element-wise lowering, and planned as a ``Calculate`` loop or a product's epilogue.

A ``Calculate`` step and a fused product's (``FusedMatMul``, ``FusedConv``) epilogue carry a
recipe (:mod:`myelin.ops.recipe`). :class:`TypedRecipe` gives every value of it a type;
:func:`epilogue` and :func:`calculate_plan` decide whether a back end, whose element-wise
table answers ``supported(op_type)``, can compute the step, and how (the domain of its loop
and the reductions ending it). Each back end emits the recipe in its own code (the CPU's LLVM
IR, the GPU's CUDA C).
"""

import numpy as np

from myelin.errors import FlowError, MyelinError
from myelin.ops import recipe as recipes
from myelin.ops import registry
from myelin.ops.fused import TRAILING_REDUCTIONS, RecipePart, ValueType, first_extra
from myelin.ops.reduction import reduced_axes
from myelin.plan.strides import contiguous_strides

# The types a Calculate loop computes in (all its inputs and outputs of one of them).
CALCULATE_DTYPES = ("float32", "float64", "int8", "int16", "int32", "int64",
                    "uint8", "uint16", "uint32", "uint64")


def once(cache, step, make):
    """``make(step)``, computed once per step (``cache``: a back end's WeakKeyDictionary, as
    each back end plans with its own element-wise table)."""
    if step not in cache:
        cache[step] = make(step)
    return cache[step]


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

    def elementwise_only(self, expr, supported):
        """True if every call in ``expr`` is an element-wise op (no reduction) that
        ``supported(op_type)`` says the back end lowers."""
        return all(not isinstance(node, recipes.Call)
                   or (supported(node.op) and not is_reduction(node))
                   for node in recipes.walk(expr))


def epilogue(step, supported, typed=TypedRecipe):
    """The epilogue of a ``FusedMatMul`` or ``FusedConv`` step typed by ``typed`` (a
    :class:`TypedRecipe` class), or None if a back end whose element-wise table answers
    ``supported`` cannot compute it.

    It needs one element-wise output of the product's type, and extra inputs of that dtype
    that broadcast to the product's shape.
    """
    product = step.outputs[0]
    extras = step.inputs[first_extra(step):]
    if any(x.dtype != product.dtype for x in extras):
        return None
    try:
        if np.broadcast_shapes(product.shape, *(x.shape for x in extras)) != product.shape:
            return None
        recipe = typed(step, [product] + list(extras))
    except (MyelinError, ValueError):
        return None
    if len(recipe.outputs()) != 1:
        return None
    result = recipe.types[recipes.Ref("@", 0)]
    if (result.dtype, result.shape) != (product.dtype, product.shape):
        return None
    if not all(recipe.elementwise_only(expr, supported)
               for _, expr in recipe.recipe.assignments):
        return None
    return recipe


class CalculatePlan:
    """How a ``Calculate`` step runs: its recipe ``typed``, the loop's shape ``domain``,
    ``reductions`` (output index -> reduction op type, over the domain's last axis) and each
    output's element ``strides`` over the domain."""

    def __init__(self, typed, domain, reductions):
        self.typed, self.domain, self.reductions = typed, domain, reductions
        row_strides = contiguous_strides(domain[:-1]) + (0,)
        full_strides = contiguous_strides(domain)
        self.strides = [row_strides if k in reductions else full_strides
                        for k in range(typed.recipe.outputs)]


def calculate_plan(step, supported, typed=TypedRecipe):
    """The :class:`CalculatePlan` of a Calculate step (its recipe typed by ``typed``), or
    None if a back end whose element-wise table answers ``supported`` cannot compute it in one
    loop nest: every value of one type of :data:`CALCULATE_DTYPES`, element-wise parts over
    the broadcast of the inputs, and reductions only as outputs that reduce its last axis."""
    dtype = step.outputs[0].dtype if step.outputs else None
    if dtype not in CALCULATE_DTYPES or any(t.dtype != dtype for t in step.inputs + step.outputs):
        return None
    try:
        domain = tuple(np.broadcast_shapes(*(t.shape for t in step.inputs)))
        recipe = typed(step, step.inputs)
    except (MyelinError, ValueError):
        return None
    outputs = recipe.outputs()
    if len(outputs) != len(step.outputs):
        return None
    read = {node for _, expr in recipe.recipe.assignments for node in recipes.walk(expr)}
    reductions = {}
    for target, expr in recipe.recipe.assignments:
        if is_reduction(expr):
            argument = expr.args[0]
            part = recipe.parts[expr]
            if (target.kind != "@" or target in read or expr.op not in TRAILING_REDUCTIONS
                    or not recipe.elementwise_only(argument, supported)
                    or recipe.types[argument].shape != domain or not domain
                    or reduced_axes(part, len(domain)) != (len(domain) - 1,)
                    or expr.op == "Mean" and not dtype.startswith("float")):
                return None
            reductions[target.index] = expr.op
        elif not recipe.elementwise_only(expr, supported):
            return None
        elif target.kind == "@" and recipe.types[target].shape != domain:
            return None
    for (index, _), tensor in zip(outputs, step.outputs):
        value = recipe.types[recipes.Ref("@", index)]
        if (value.dtype, tuple(value.shape)) != (tensor.dtype, tuple(tensor.shape)):
            return None
    return CalculatePlan(recipe, domain, reductions)
