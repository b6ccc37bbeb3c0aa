"""Control-flow ops: calls of other functions of the flow, function values, tuples and
two-way branches.

A function with a signature (``Function.params`` and ``Function.results``, set by the
Builder's control-flow methods, :mod:`myelin.builder.control`) can be called:

- ``Call`` (attribute ``function``): runs that function on its inputs, one per parameter; its
  outputs are the function's results. Without the attribute, input 0 is a function value
  and the others its arguments.
- ``Function`` (attribute ``function``): the function as a value, of type ``function``.
- ``Partial``: input 0 a function value, the others values for its first parameters; the
  output is the function of the remaining parameters (a closure).
- ``Tuple``: its inputs (tensors, function values or tuples) as one value of type ``tuple``;
  ``TupleGet`` (attribute ``index``): element ``index`` of the tuple of input 0.
- ``If`` (attributes ``then_branch``, ``else_branch``): input 0 is a scalar condition (bool, or
  a number: nonzero is true); the other inputs are the values the branch functions read from
  the function around them (their free variables, the closure), in the order of the branches'
  ``params``. Its outputs are the results of the branch taken; both branches give results of
  the same types.

Function values and tuples are not tensors: a variable holding one has the dtype ``function``
or ``tuple``, no shape, and its full type as text in an attribute (:data:`TYPE_ATTRIBUTES`).

These ops have no kernel: :mod:`myelin.control` compiles the straight-line parts of such a flow
into cells and runs the calls, branches and tuples on its VM. Their reference runs the function
with the reference interpreter (:mod:`myelin.reference`).
"""

import json

from myelin.errors import FlowError, ShapeError
from myelin.ops.registry import Kind, OpDef, TensorType, register

CONTROL_OPS = ("Call", "If", "Function", "Partial", "Tuple", "TupleGet")
FUNCTION = "function"          # the dtype of function values
TUPLE = "tuple"                # the dtype of tuples
TYPE_ATTRIBUTE = "function_type"
TYPE_ATTRIBUTES = {FUNCTION: TYPE_ATTRIBUTE, TUPLE: "tuple_type"}   # dtype -> type attribute


def is_control(op):
    return op.type in CONTROL_OPS


def is_value(var):
    """True if ``var`` holds a function value or a tuple, not a tensor."""
    return var.dtype in TYPE_ATTRIBUTES


def value_type(var):
    """The type of a value as text: ``float32[3]`` for a tensor; for a function value, the
    JSON list [parameter types, result types] of its attribute ``function_type``; for a
    tuple, the JSON object {"tuple": [element types]} of its attribute ``tuple_type``."""
    if is_value(var):
        return var.attrs.get(TYPE_ATTRIBUTES[var.dtype], "[]" if var.dtype == FUNCTION else "")
    return var.type_string().lstrip("&")


def set_value_type(var, text):
    """Give ``var`` the value type ``text`` (an attribute for a function value or tuple; a
    tensor's type is its dtype and shape)."""
    if is_value(var):
        var.attrs[TYPE_ATTRIBUTES[var.dtype]] = text


def is_function_type(text):
    """True if the value type ``text`` is a function type (a JSON list)."""
    return text.startswith("[")


def is_tuple_type(text):
    """True if the value type ``text`` is a tuple type (a JSON object)."""
    return text.startswith("{")


def tuple_type(elements):
    """The type of a tuple of values of the types ``elements``."""
    return json.dumps({"tuple": list(elements)})


def tuple_elements(text):
    """The element types of the tuple type ``text`` (ValueError if it is not one)."""
    elements = json.loads(text)["tuple"] if is_tuple_type(text) else None
    if not isinstance(elements, list) or not all(isinstance(t, str) for t in elements):
        raise ValueError(f"{text!r} is not a tuple type")
    return elements


def holds_function(text):
    """True if the value type ``text`` is a function type or a tuple type holding one."""
    if is_tuple_type(text):
        return any(holds_function(t) for t in tuple_elements(text))
    return is_function_type(text)


def element_types(op, var):
    """The types of the elements of tuple ``var``; ShapeError if it is not a tuple."""
    if var.dtype != TUPLE:
        raise ShapeError(f"op {op.name} ({op.type}): {var.name} is {var.type_string()}, not a "
                         f"tuple")
    try:
        return tuple_elements(value_type(var))
    except (ValueError, TypeError, KeyError):
        raise ShapeError(f"op {op.name} ({op.type}): tuple {var.name} has no valid "
                         f"{TYPE_ATTRIBUTES[TUPLE]} attribute") from None


def function_type(params, results):
    """The type of a function value taking values of the types ``params`` and giving
    ``results`` (lists of value types)."""
    return json.dumps([list(params), list(results)])


def signature_type(func):
    return function_type(map(value_type, func.params), map(value_type, func.results))


def split_type(op, var):
    """(parameter types, result types) of the function value ``var``."""
    if var.dtype != FUNCTION:
        raise ShapeError(f"op {op.name} ({op.type}): {var.name} is {var.type_string()}, not a "
                         f"function value")
    try:
        params, results = json.loads(value_type(var))
        return list(params), list(results)
    except (ValueError, TypeError):
        raise ShapeError(f"op {op.name} ({op.type}): function value {var.name} has no valid "
                         f"{TYPE_ATTRIBUTE} attribute") from None


def tensor_type(text):
    """The TensorType of a value type (``function`` for a function value, ``tuple`` for a
    tuple)."""
    if is_function_type(text):
        return TensorType(FUNCTION, ())
    if is_tuple_type(text):
        return TensorType(TUPLE, ())
    dtype, _, dims = text.partition("[")
    try:      # (a dynamic dimension is written "?")
        shape = tuple(-1 if d == "?" else int(d) for d in dims.rstrip("]").split("x")) \
            if dims else ()
    except ValueError:
        raise ShapeError(f"{text!r} is not a value type") from None
    return TensorType(dtype, shape)


def output_types(op):
    """The value types of ``op``'s outputs (the Builder sets ``function_type`` from them)."""
    if op.type in ("Function", "Partial"):
        return [_function_value_type(op)]
    if op.type == "Tuple":
        return [tuple_type(value_type(v) for v in op.inputs)]
    if op.type == "TupleGet":
        return [_element_type(op)]
    if op.type == "Call" and "function" not in op.attrs:
        return split_type(op, op.inputs[0])[1]
    func = signature(op, "function" if op.type == "Call" else "then_branch")
    return [value_type(v) for v in func.results]


def signature(op, attribute):
    """The function named by ``op``'s ``attribute``; FlowError if the flow has none with a
    signature."""
    name = op.attrs.get(attribute)
    func = op.flow.funcs.get(name) if name is not None else None
    if func is None or func.results is None:
        raise FlowError(f"op {op.name} ({op.type}): {attribute} {name!r} is not a function "
                        f"with a signature in this flow")
    return func


def check_arguments(op, name, params, arguments, names=None):
    """ShapeError unless ``arguments`` (variables) fit the parameter types ``params`` (named
    ``names``, when known) of the function ``name`` in number and type."""
    if len(arguments) != len(params):
        raise ShapeError(f"op {op.name} ({op.type}): {name} takes {len(params)} arguments, got "
                         f"{len(arguments)}")
    for position, (argument, param) in enumerate(zip(arguments, params)):
        if value_type(argument) != param:
            which = names[position] if names else position
            raise ShapeError(f"op {op.name} ({op.type}): argument {argument.name} is "
                             f"{value_type(argument)}, parameter {which} of {name} is {param}")


def _check_call(op, func, arguments):
    check_arguments(op, func.name, [value_type(p) for p in func.params], arguments,
                    [p.name for p in func.params])


def _call_infer(op):
    if "function" in op.attrs:
        _check_call(op, signature(op, "function"), op.inputs)
    else:
        if not op.inputs:
            raise ShapeError(f"op {op.name} (Call): without a function attribute, input 0 "
                             f"must be a function value")
        params, _ = split_type(op, op.inputs[0])
        check_arguments(op, op.inputs[0].name, params, op.inputs[1:])
    return [tensor_type(t) for t in output_types(op)]


def _function_value_type(op):
    if op.type == "Function":
        return signature_type(signature(op, "function"))
    params, results = split_type(op, op.inputs[0])
    bound = op.inputs[1:]
    check_arguments(op, op.inputs[0].name, params[:len(bound)], bound)
    return function_type(params[len(bound):], results)


def _value_infer(op):
    _function_value_type(op)          # checks the types
    return [TensorType(FUNCTION, ())]


def _element_type(op):
    elements = element_types(op, op.inputs[0])
    index = op.attrs.get_int("index")
    if index is None:
        raise FlowError(f"op {op.name} (TupleGet): attribute index is missing")
    if not -len(elements) <= index < len(elements):
        raise ShapeError(f"op {op.name} (TupleGet): index {index} is out of range for a tuple "
                         f"of {len(elements)} elements")
    return elements[index]


def _tuple_infer(op):
    return [tensor_type(t) for t in output_types(op)]


def _if_infer(op):
    condition = op.inputs[0]
    if tuple(condition.shape) not in ((), (1,)) or is_value(condition):
        raise ShapeError(f"op {op.name} (If): the condition {condition.name} must be a scalar, "
                         f"not {condition.type_string()}")
    branches = [signature(op, "then_branch"), signature(op, "else_branch")]
    for branch in branches:
        _check_call(op, branch, op.inputs[1:])
    then_types, else_types = ([value_type(v) for v in branch.results] for branch in branches)
    if then_types != else_types:
        raise ShapeError(f"op {op.name} (If): the branches give different types: then "
                         f"({', '.join(then_types)}), else ({', '.join(else_types)})")
    return [tensor_type(t) for t in then_types]


def _reference(op, inputs):
    from myelin.reference import Interpreter
    return Interpreter(op.flow)._control(op, inputs)


register(OpDef("Call", Kind.OPAQUE, _call_infer, _reference, attrs={"function": None},
               inputs=(0, None), outputs=None,
               doc="Call the function named by `function` (or the function value of input "
                   "0) on the inputs."))
register(OpDef("Function", Kind.OPAQUE, _value_infer, _reference, attrs={"function": None},
               inputs=(0, 0), doc="The function named by `function`, as a value."))
register(OpDef("Partial", Kind.OPAQUE, _value_infer, _reference, inputs=(1, None),
               doc="The function value of input 0 with its first parameters bound to the "
                   "other inputs."))
register(OpDef("Tuple", Kind.OPAQUE, _tuple_infer, _reference, inputs=(0, None),
               doc="The inputs as one tuple value."))
register(OpDef("TupleGet", Kind.OPAQUE, _tuple_infer, _reference, attrs={"index": None},
               inputs=(1, 1), doc="Element `index` of the tuple of input 0."))
register(OpDef("If", Kind.OPAQUE, _if_infer, _reference,
               attrs={"then_branch": None, "else_branch": None}, inputs=(1, None),
               outputs=None,
               doc="Run `then_branch` or `else_branch` on inputs 1.. as input 0 is true or not."))
