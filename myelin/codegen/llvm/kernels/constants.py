"""Which small constants kernels take as arguments rather than compile in.

A constant of at most ``INLINE_CONSTANT_BYTES`` is compiled into the code
(:func:`~.base.inlined`), so LLVM folds it into the instructions, and its value is part of
the kernel's text and signature: steps that differ in such a value alone each have a kernel
of their own. An int8 network's requantizing convolutions and Calculate steps are such
steps by the dozen, their scales and zero points each layer's own. :func:`pass_constants`
marks the constants that kernels read at run time instead (``TensorSpec.passed``).
"""

import math

import numpy as np

from myelin.codegen.llvm.kernels.base import Kernel
from myelin.flow import dtypes
from myelin.ops import recipe as recipes
from myelin.ops import registry
from myelin.plan.cell import CONSTANT

# The element-wise ops of which a one-element float constant may be an operand and still be
# passed at run time (a Div's divisor only without an exact reciprocal).
_TERMS = frozenset({"Add", "Sub", "Mul"})
# Values that stay compiled in wherever they are: LLVM folds x - 0, x * 1, x * -1 and a zero
# point of 0's correction (a symmetric int8 layer's) into less code.
_FOLDED = frozenset({0.0, 1.0, -1.0})


def pass_constants(steps):
    """Mark the constants that the kernels of ``steps`` (every step of a network) take as
    arguments rather than compile in (``TensorSpec.passed``), so that steps differing in
    them alone share code: an int8 network's requantizing convolutions and Calculate steps
    of one shape, whose scales and zero points are each layer's own.

    Passed are the one-element constants whose value differs between steps that are the
    same but for such constants, and that each step reading them uses as a term or factor of
    an element-wise op (``Add``, ``Sub`` or ``Mul``, a single op's or in a recipe, or the
    divisor of a ``Div`` whose reciprocal is not exact) or only loads
    (:meth:`Kernel.loaded_inputs`): LLVM folds such a value into nothing (but a division by
    a power of two into a product), save 0, 1 and -1, which stay compiled in. Elsewhere a
    constant stays compiled in: it gains nothing passed, and an operand read from the code
    takes no register."""
    allowed, wanted, roots = {}, set(), {}
    groups = {}         # the steps alike but for their candidates: (values of candidates)
    for step in steps:
        ours = isinstance(step.kernel, Kernel)
        loaded = step.kernel.loaded_inputs(step) if ours else ()
        shapes = step.kernel.code_shapes(step) if ours else \
            [tuple(t.shape) for t in step.inputs + step.outputs]
        key, values = [type(step.kernel), step.type, step.variant,
                       repr(sorted(step.attrs.items())), shapes[len(step.inputs):]], []
        for position, (tensor, uses) in enumerate(zip(step.inputs, _operand_uses(step))):
            root = tensor.root()
            key.append((tensor.dtype, shapes[position]))
            if root.kind != CONSTANT or root.elements != 1:
                continue
            value = float(np.asarray(root.var.data, np.float64).reshape(()))
            if value in _FOLDED or not (position in loaded or _term_or_factor(root, value, uses)):
                allowed[id(root)] = False
                key.append(value)
                continue
            allowed.setdefault(id(root), True)
            roots[id(root)] = root
            values.append((id(root), value))
        key += [t.dtype for t in step.outputs]
        groups.setdefault(repr(key), []).append(values)
    for members in groups.values():
        for column in zip(*members):       # (the candidates at one place in each step)
            if len({value for _, value in column}) > 1:
                wanted.update(root for root, _ in column)
    for identity, root in roots.items():
        root.passed = allowed[identity] and identity in wanted


def _term_or_factor(root, value, uses):
    """True if the float constant ``root`` of ``value`` has ``uses`` (see
    :func:`_operand_uses`), all as a term or factor."""
    if not uses or not dtypes.is_float(root.dtype):
        return False
    return all(op in _TERMS or (op == "Div" and argument == 1 and
                                abs(math.frexp(value)[0]) != 0.5)
               for op, argument in uses)


def _operand_uses(step):
    """For each input of ``step``, its uses as (op type, argument index) of an element-wise
    op: the step's own (a binary op), or of its recipe; None where the step reads it
    otherwise or returns it as it is."""
    opdef = registry.lookup(step.type)
    if opdef.recipe_operands is None or not step.attrs.get_str("expr"):
        if step.type in _TERMS | {"Div"} and len(step.inputs) == 2:
            return [[(step.type, 0)], [(step.type, 1)]]
        return [None] * len(step.inputs)
    recipe = recipes.parse(step.attrs.get_str("expr"))
    arguments = [(node.op, index, argument) for _, expr in recipe.assignments
                 for node in recipes.walk(expr) if isinstance(node, recipes.Call)
                 for index, argument in enumerate(node.args)]
    returned = {expr for _, expr in recipe.assignments}
    uses = [None] * len(step.inputs)
    for k, position in enumerate(opdef.recipe_operands(step)):
        ref = recipes.Ref("%", k)
        if position is not None and ref not in returned:
            uses[position] = [(op, index) for op, index, argument in arguments
                              if argument == ref]
    return uses
