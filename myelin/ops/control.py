"""Control-flow ops: calls of other functions of the flow and two-way branches.

A function with a signature (``Function.params`` and ``Function.results``, set by
:mod:`myelin.control`) can be called:

- ``Call`` (attribute ``function``): runs that function on its inputs, one per parameter; its
  outputs are the function's results.
- ``If`` (attributes ``then_branch``, ``else_branch``): input 0 is a scalar condition (bool, or
  a number: nonzero is true); the other inputs are the values the branch functions read from
  the function around them (their free variables, the closure), in the order of the branches'
  ``params``. Its outputs are the results of the branch taken; both branches give results of
  the same types.

These ops have no kernel: :mod:`myelin.control` compiles the straight-line parts of such a flow
into cells and runs the calls and branches on its VM. Their reference runs the function with
the reference interpreter (:mod:`myelin.reference`).
"""

from myelin.errors import FlowError, ShapeError
from myelin.ops.registry import Kind, OpDef, TensorType, register

CONTROL_OPS = ("Call", "If")


def is_control(op):
    return op.type in CONTROL_OPS


def signature(op, attribute):
    """The function named by ``op``'s ``attribute``; FlowError if the flow has none with a
    signature."""
    name = op.attrs.get(attribute)
    func = op.flow.funcs.get(name) if name is not None else None
    if func is None or func.results is None:
        raise FlowError(f"op {op.name} ({op.type}): {attribute} {name!r} is not a function "
                        f"with a signature in this flow")
    return func


def types_of(variables):
    return [TensorType(v.dtype, v.shape) for v in variables]


def check_arguments(op, func, arguments):
    """ShapeError unless ``arguments`` fit ``func``'s parameters in number, type and shape."""
    if len(arguments) != len(func.params):
        raise ShapeError(f"op {op.name} ({op.type}): {func.name} takes {len(func.params)} "
                         f"arguments, got {len(arguments)}")
    for argument, param in zip(arguments, func.params):
        if argument.dtype != param.dtype or tuple(argument.shape) != tuple(param.shape):
            raise ShapeError(f"op {op.name} ({op.type}): argument {argument.name} is "
                             f"{argument.type_string()}, parameter {param.name} of {func.name} "
                             f"is {param.type_string()}")


def _call_infer(op):
    func = signature(op, "function")
    check_arguments(op, func, op.inputs)
    return types_of(func.results)


def _if_infer(op):
    condition = op.inputs[0]
    if tuple(condition.shape) not in ((), (1,)):
        raise ShapeError(f"op {op.name} (If): the condition {condition.name} must be a scalar, "
                         f"not {condition.type_string()}")
    branches = [signature(op, "then_branch"), signature(op, "else_branch")]
    for branch in branches:
        check_arguments(op, branch, op.inputs[1:])
    then_types, else_types = (types_of(branch.results) for branch in branches)
    if then_types != else_types:
        described = [", ".join(f"{t.dtype}{list(t.shape)}" for t in types)
                     for types in (then_types, else_types)]
        raise ShapeError(f"op {op.name} (If): the branches give different types: then "
                         f"({described[0]}), else ({described[1]})")
    return then_types


def _reference(op, inputs):
    from myelin.reference import Interpreter
    return Interpreter(op.flow)._control(op, inputs)


register(OpDef("Call", Kind.OPAQUE, _call_infer, _reference, attrs={"function": None},
               inputs=(0, None), outputs=None,
               doc="Call the function named by `function` on the inputs."))
register(OpDef("If", Kind.OPAQUE, _if_infer, _reference,
               attrs={"then_branch": None, "else_branch": None}, inputs=(1, None),
               outputs=None,
               doc="Run `then_branch` or `else_branch` on inputs 1.. as input 0 is true or not."))
