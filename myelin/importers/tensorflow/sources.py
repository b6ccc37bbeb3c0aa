"""Live TensorFlow objects as a GraphDef plus the values of their variables.

A :class:`Source` is what the importer needs from a TF1 session (its graph; variables are read
by running the session), a ``tf.Graph`` (frozen: no variables), a TF2 concrete function (its
graph; variables are the resources it captures, constants it captures are read too) or a
``tf.function`` with an input signature. Anything else is read by
:func:`~myelin.importers.tensorflow.graphdef.load`. TensorFlow is only imported for a function
that calls other functions (to inline them), so a GraphDef file never imports it.
"""

import dataclasses

from myelin.errors import InputError
from myelin.importers.tensorflow import graphdef
from myelin.importers.tensorflow.importer import VariableValue

_CALLS = ("PartitionedCall", "StatefulPartitionedCall")


@dataclasses.dataclass
class Source:
    """A GraphDef (ours), the values of its variables by node name (an object with ``in``
    and ``[]``), and for a function its inputs and named outputs (tensor names)."""

    graph: object
    variables: object
    inputs: list = None
    outputs: dict = None


def source(obj):
    """The :class:`Source` of a session, tf.Graph, concrete function, tf.function with an
    input signature, or anything :func:`graphdef.load` reads."""
    if hasattr(obj, "get_concrete_function"):              # a tf.function
        try:
            obj = obj.get_concrete_function()
        except (TypeError, ValueError) as exc:
            raise InputError(f"the tf.function has no input signature to trace it with: "
                             f"pass a concrete function ({exc})") from None
    if hasattr(obj, "graph") and hasattr(obj.graph, "captures"):    # a ConcreteFunction
        return _function(obj)
    if hasattr(obj, "graph") and hasattr(obj, "run"):               # a TF1 Session
        return Source(_graph_def(obj.graph), _SessionVariables(obj))
    if hasattr(obj, "as_graph_def"):                                # a tf.Graph
        return Source(_graph_def(obj), {})
    return Source(graphdef.load(obj), {})


def tensor_names(tensors):
    """Names of ``tensors`` (tf.Tensors, tf.Operations or names)."""
    return [t if isinstance(t, str) else t.name for t in tensors]


def _graph_def(graph):
    return graphdef.load(graph.as_graph_def())


def _function(function):
    """A concrete function: inputs are its placeholders less the captured ones, which take
    the values of the variables (or tensors) they capture."""
    graph = function.graph
    by_handle = {id(v.handle): v for v in graph.variables}
    variables, captured = {}, set()
    for external, internal in graph.captures:
        captured.add(internal.name)
        variable = by_handle.get(id(external))
        if variable is not None:
            variables[internal.op.name] = VariableValue(variable.name, variable.numpy())
        elif external.dtype.name != "resource":
            variables[internal.op.name] = VariableValue(internal.op.name, external.numpy())
    inputs = [t.op.name for t in function.inputs if t.name not in captured]
    structured = function.structured_outputs
    if isinstance(structured, dict):
        names = sorted(key for key, value in structured.items() if value is not None)
    else:
        names = [f"output_{i}" for i in range(len(function.outputs))]
    outputs = dict(zip(names, (t.name for t in function.outputs)))
    return Source(_inlined(function), variables, inputs, outputs)


def _inlined(function):
    """The GraphDef of ``function`` with the functions it calls (a SavedModel signature calls
    the model's function) inlined by TensorFlow's graph optimizer, as TensorFlow's own
    freezing does; the placeholders of captured values keep their names."""
    graph = function.graph.as_graph_def()
    if any(node.op in _CALLS for node in graph.node):
        from tensorflow.python.framework import convert_to_constants

        graph = convert_to_constants._run_inline_graph_optimization(
            function, lower_control_flow=False, aggressive_inlining=False)
    return graphdef.load(graph)


class _SessionVariables:
    """The variables of a TF1 session's graph by node name, read when asked for."""

    def __init__(self, session):
        self.session = session
        graph = session.graph
        self.by_node = {v.op.name: v for v in graph.get_collection("variables")}
        for op in graph.get_operations():         # TF1 variables outside the collection
            if op.type in ("VariableV2", "Variable"):
                self.by_node.setdefault(op.name, op.outputs[0])

    def __contains__(self, name):
        return name in self.by_node

    def __getitem__(self, name):
        variable = self.by_node[name]
        return VariableValue(variable.name, self.session.run(variable))
