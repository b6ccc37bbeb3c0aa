"""Consistency checks of a flow graph; every problem found is reported, not just the first.

Besides the links between variables, ops, functions and connectors, each op of a registered
type must have the numbers of inputs and outputs its definition allows (the registry says),
and each control-flow op (``Call``, ``If``, function values, tuples) must name functions that
exist with signatures its inputs fit, and give values of the types its outputs declare:
:mod:`myelin.control` runs such ops without any other check of their attributes.
"""

from myelin.errors import FlowError, MyelinError
from myelin.flow import dtypes
from myelin.ops import control, registry


def problems(flow):
    """A list of strings, one per inconsistency in ``flow`` (empty when it is consistent)."""
    found = []
    var_ids = {id(v) for v in flow.vars.values()}
    op_ids = {id(op) for op in flow.ops.values()}

    for name, var in flow.vars.items():
        if var.name != name:
            found.append(f"variable {var.name} is registered under name {name}")
        if var.dtype and not dtypes.known(var.dtype):
            found.append(f"variable {name} has unknown type {var.dtype!r}")
        if var.producer is not None:
            if id(var.producer) not in op_ids:
                found.append(f"variable {name} is produced by {var.producer.name}, "
                             f"which is not in the flow")
            elif var not in var.producer.outputs:
                found.append(f"variable {name} names producer {var.producer.name}, "
                             f"which does not list it as an output")
        for consumer in var.consumers:
            if id(consumer) not in op_ids:
                found.append(f"variable {name} is consumed by {consumer.name}, "
                             f"which is not in the flow")
            elif not any(v is var for v in consumer.inputs):
                found.append(f"variable {name} names consumer {consumer.name}, "
                             f"which does not list it as an input")
        if var.data is not None:
            expected = var.elements
            if var.data.size != expected:
                found.append(f"constant {name} has {var.data.size} elements but shape "
                             f"{list(var.shape)} needs {expected}")
            if var.producer is not None:
                found.append(f"constant {name} also has producer {var.producer.name}")

    for name, op in flow.ops.items():
        if op.name != name:
            found.append(f"operation {op.name} is registered under name {name}")
        for var in op.inputs:
            if id(var) not in var_ids:
                found.append(f"op {name} reads {var.name}, which is not in the flow")
            elif sum(1 for c in var.consumers if c is op) != sum(1 for v in op.inputs if v is var):
                found.append(f"op {name} reads {var.name}, but the consumer list of {var.name} "
                             f"does not match")
        for var in op.outputs:
            if id(var) not in var_ids:
                found.append(f"op {name} writes {var.name}, which is not in the flow")
            elif var.producer is not op:
                found.append(f"op {name} writes {var.name}, but its producer is "
                             f"{var.producer.name if var.producer else 'none'}")
        if op.func is not None and (op.func.name not in flow.funcs or op not in op.func.ops):
            found.append(f"op {name} belongs to function {op.func.name}, which does not list it")
        found.extend(_definition_problems(op))

    for fname, func in flow.funcs.items():
        seen = set()
        for op in func.ops:
            if id(op) not in op_ids:
                found.append(f"function {fname} lists op {op.name}, which is not in the flow")
            if op.func is not func:
                found.append(f"function {fname} lists op {op.name}, which belongs to "
                             f"{op.func.name if op.func else 'no function'}")
            if id(op) in seen:
                found.append(f"function {fname} lists op {op.name} twice")
            seen.add(id(op))
        try:
            flow.order(func)
        except FlowError as error:
            found.append(str(error))
        if (func.params is None) != (func.results is None):
            found.append(f"function {fname} has half a signature (params or results only)")
        for var in (func.params or []) + (func.results or []):
            if id(var) not in var_ids:
                found.append(f"the signature of function {fname} names {var.name}, which is "
                             f"not in the flow")

    for cname, cnx in flow.cnxs.items():
        for var in cnx.links:
            if id(var) not in var_ids:
                found.append(f"connector {cname} links {var.name}, which is not in the flow")
    return found


def _definition_problems(op):
    """What is wrong with ``op`` by its registry definition (none for an unknown type, which
    the compiler reports): its numbers of inputs and outputs; for a control-flow op, what
    its type rule finds (the functions it names, the types of what it passes them)."""
    opdef = registry.find(op.type)
    if opdef is None:
        return []
    problem = registry.arity_problem(op, opdef)
    if problem is None and control.is_control(op):
        try:
            registry.check_outputs(op, registry.infer(op))
            for var, text in zip(op.outputs, control.output_types(op)):
                if control.value_type(var) != text:
                    problem = (f"op {op.name} ({op.type}) gives {text} as {var.name}, which is "
                               f"declared {control.value_type(var)}")
        except MyelinError as error:
            problem = str(error)
    return [problem] if problem else []


def check(flow):
    """Raise FlowError listing every inconsistency in ``flow``."""
    found = problems(flow)
    if found:
        raise FlowError(f"flow is inconsistent ({len(found)} problems):\n  " + "\n  ".join(found))
