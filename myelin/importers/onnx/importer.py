"""ONNX graph to flow: initializers become constants, graph inputs become input variables of
concrete shape, and each node becomes the myelin ops its converter emits.

The imported flow is specialized: every dimension is concrete (taken from the caller's shapes
or the actual inputs), and graph inputs whose *values* a converter needs (a Reshape's shape,
Slice's starts, ... given as graph inputs) become constants. :func:`import_graph` finds those
inputs by importing, and re-importing with their values when a converter asks for them.

Subgraphs (If branches, Loop and Scan bodies) are imported by the converters of those ops
through :meth:`_GraphImporter.subgraph`, into functions of their own, each with a scope of its
own names; a name a subgraph does not define is looked up in the scopes around it.
"""

import logging

import numpy as np

from myelin import limits
from myelin.builder import Builder
from myelin.errors import (InputError, LimitError, ShapeError, UnsupportedOpError,
                           UnsupportedTypeError)
from myelin.flow import Flow, dtypes
from myelin.importers.graph import ImportedGraph, Signature
from myelin.importers.onnx import converters, proto
from myelin.importers.onnx.context import NeedsInputValues, NodeContext, Sequence

log = logging.getLogger("myelin.onnx")


MAX_DEPTH = 16     # subgraphs (If branches, Loop and Scan bodies) nest at most this deep


def check_supported(model):
    """Check the model before importing it: UnsupportedTypeError for a graph input or output
    of a type myelin lacks; UnsupportedOpError for an ai.onnx opset myelin does not import,
    then one listing every node (type, opset, name) without a converter or that ONNX does
    not define at that opset, those of subgraphs (If branches, Loop and Scan bodies)
    included; LimitError for subgraphs nested more than MAX_DEPTH deep; ShapeError listing
    every node that does not fit its op's ONNX schema (numbers of inputs and outputs,
    attribute names and types, required attributes)."""
    for info in list(model.graph.input) + list(model.graph.output):
        proto.value_type(info)
    proto.check_opset(model)
    version = proto.opset(model)
    missing, problems = [], []
    for node in _nodes(model.graph):
        schema = proto.schema(node, version) or converters.contrib_schema(node.op_type,
                                                                          node.domain)
        domain = node.domain or "ai.onnx"
        if converters.find(node.op_type, node.domain) is None:
            missing.append((f"{node.op_type} (opset {version}, domain {domain})",
                            proto.node_name(node)))
        elif schema is None:
            missing.append((f"{node.op_type} (not an op of opset {version}, domain {domain})",
                            proto.node_name(node)))
        else:
            problems.extend(proto.schema_problems(node, schema))
    if missing:
        by_type = {}
        for op_type, name in missing:
            by_type.setdefault(op_type, []).append(name)
        listed = "; ".join(f"{t}: {', '.join(names)}" for t, names in by_type.items())
        raise UnsupportedOpError(f"the model uses ops myelin does not support: {listed}",
                                 [name for _, name in missing])
    if problems:
        raise ShapeError("the model's nodes do not fit their ops' ONNX schemas: "
                         + "; ".join(problems))


def _nodes(graph):
    """The nodes of ``graph`` and of its subgraphs (graph attributes), each graph's in
    order; LimitError for subgraphs nested more than MAX_DEPTH deep."""
    pending = [(graph, 0)]
    while pending:
        graph, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise LimitError(f"the model nests subgraphs (If branches, Loop and Scan bodies) "
                             f"more than {MAX_DEPTH} deep")
        for node in graph.node:
            yield node
            pending.extend((subgraph, depth + 1) for subgraph in proto.subgraphs(node))


def import_graph(model, shapes=None, values=None, specialize=(), func="main"):
    """Import ``model`` (a ModelProto) into a new flow.

    ``shapes`` maps input names to concrete shapes; ``values`` maps input names to arrays
    (their shapes count as given). ``specialize`` names inputs to import as constants of their
    values from the start. Returns an :class:`ImportedGraph`.
    """
    check_supported(model)
    shapes = dict(shapes or {})
    values = dict(values or {})
    for name, value in values.items():
        shapes.setdefault(name, np.shape(value))
    specialize = set(specialize)
    while True:
        try:
            return _GraphImporter(model, shapes, values, specialize, func).run()
        except NeedsInputValues as needed:
            missing = sorted(needed.names - values.keys())
            if missing:
                raise InputError(f"the model uses the values of inputs {missing} as shapes or "
                                 f"parameters: pass their values to compile it") from None
            if needed.names <= specialize:
                raise InputError(f"the model uses values computed from inputs "
                                 f"{sorted(needed.names)} as shapes or parameters, and they "
                                 f"stay unknown after specializing on them") from None
            log.info("specializing on the values of inputs %s", sorted(needed.names))
            specialize |= needed.names


class _GraphImporter:
    def __init__(self, model, shapes, values, specialize, func):
        self.model = model
        self.graph = model.graph
        self.opset = proto.opset(model)
        self.shapes = shapes
        self.values = values
        self.specialize = specialize
        self.flow = Flow()
        self.builder = Builder(self.flow, func)
        self.vars = {}              # ONNX value name -> Variable
        self.bound = set()          # ids of the variables in vars
        self.graph_inputs = {}      # Variable id -> ONNX input name
        self.parent = None          # the importer of the graph around a subgraph

    def run(self):
        initializers = {t.name: t for t in self.graph.initializer}
        for tensor in self.graph.initializer:
            self._define(tensor.name, self.builder.const(proto.to_array(tensor), copy=False))
        inputs, specialized = [], {}
        for info in self.graph.input:
            if info.name in initializers:
                continue
            if info.name in self.specialize:
                value = self._input_value(info)
                specialized[info.name] = value
                self._define(info.name, self.builder.const(value))
                continue
            dtype, shape = self._input_type(info)
            var = self.builder.var(info.name, dtype, shape)
            var.is_input = True
            self.graph_inputs[id(var)] = info.name
            self._define(info.name, var)
            inputs.append(Signature(info.name, var.name, dtype, shape))
        for node in self.graph.node:
            self._convert(node)
        outputs = [self._output(info) for info in self.graph.output]
        return ImportedGraph(self.flow, self.builder.func.name, inputs, outputs, specialized)

    def subgraph(self, graph, builder, inputs, where):
        """Import ``graph`` (a GraphProto: an If branch, a Loop or Scan body) into the function
        of ``builder``, its inputs bound to the variables ``inputs`` in order. Names the
        subgraph does not define resolve in this graph and the graphs around it, so values of
        outer scopes become free variables of the function. Returns the variables (or
        Sequences) of its outputs. ``where`` names the node for messages."""
        scope = _Scope(self, builder)
        if len(graph.input) != len(inputs):
            raise ShapeError(f"{where}: subgraph {graph.name!r} takes {len(graph.input)} inputs, "
                             f"the node gives it {len(inputs)}")
        for tensor in graph.initializer:
            scope._define(tensor.name, builder.const(proto.to_array(tensor)))
        for info, var in zip(graph.input, inputs):
            declared = info.type.tensor_type.elem_type if info.type.HasField("tensor_type") \
                else 0
            if declared and not isinstance(var, Sequence) and \
                    proto.dtype_of(declared, f"subgraph input {info.name!r}") != var.dtype:
                raise ShapeError(f"{where}: subgraph input {info.name!r} is declared "
                                 f"{proto.dtype_of(declared, info.name)}, the node gives it "
                                 f"{var.dtype}")
            scope._define(info.name, var)
        for node in graph.node:
            scope._convert(node)
        outputs = []
        for info in graph.output:
            var = scope.lookup(info.name)
            if var is None:
                raise ShapeError(f"{where}: subgraph output {info.name!r} is not computed by "
                                 f"any node")
            outputs.append(var)
        return outputs

    def lookup(self, name):
        """The variable (or Sequence) of ONNX value ``name`` in this scope or one around it;
        None if none defines it."""
        scope = self
        while scope is not None:
            if name in scope.vars:
                return scope.vars[name]
            scope = scope.parent
        return None

    # Values.
    def _define(self, name, var):
        """Bind ONNX value ``name`` to ``var``; the variable is renamed after it, or gets it
        as an alias when it already stands for another value. A Sequence is bound as it is."""
        if name in self.vars:
            raise ShapeError(f"ONNX value {name!r} is defined twice")
        if isinstance(var, Sequence):
            self.vars[name] = var
            return
        shared = id(var) in self.bound
        self.vars[name] = var
        self.bound.add(id(var))
        wanted = self.builder._name(name)
        if var.name == wanted or self.flow.var_named(wanted) is not None:
            return
        if shared or var.is_input:
            self.flow.add_alias(var, wanted)
        else:
            self.flow.rename_var(var, wanted)

    def _input_type(self, info):
        dtype, declared = proto.value_type(info)
        given = self.shapes.get(info.name)
        if info.name in self.values:
            actual = dtypes.from_numpy(np.asarray(self.values[info.name]).dtype)
            if actual != dtype:
                raise InputError(f"input {info.name} is {dtype}, got an array of {actual}")
        if given is not None:
            given = tuple(int(d) for d in given)
            if declared is not None and (len(given) != len(declared) or any(
                    isinstance(d, int) and d != g for d, g in zip(declared, given))):
                raise InputError(f"input {info.name} has shape {list(given)}, the model "
                                 f"declares {_shape_text(declared)}")
            return dtype, _checked_shape(info.name, dtype, given)
        if declared is None or any(not isinstance(d, int) for d in declared):
            raise InputError(f"input {info.name} has dynamic shape {_shape_text(declared)}: "
                             f"give its shape or a value")
        return dtype, _checked_shape(info.name, dtype, declared)

    def _input_value(self, info):
        dtype, _ = proto.value_type(info)
        value = np.asarray(self.values[info.name])
        if dtypes.from_numpy(value.dtype) != dtype:
            raise InputError(f"input {info.name} is {dtype}, got an array of {value.dtype}")
        return value

    def graph_inputs_feeding(self, var):
        """The graph inputs that ``var`` is computed from: their variables by name."""
        found, seen, stack = {}, set(), [var]
        while stack:
            current = stack.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            if id(current) in self.graph_inputs:
                found[self.graph_inputs[id(current)]] = current
            elif current.producer is not None:
                stack.extend(current.producer.inputs)
        return found

    # Nodes.
    def _convert(self, node):
        inputs = []
        for name in node.input:
            if not name:
                inputs.append(None)
            elif self.lookup(name) is not None:
                inputs.append(self.lookup(name))
            else:
                raise ShapeError(f"node {node.name or node.output[0]} ({node.op_type}) reads "
                                 f"{name!r}, which no earlier node or input defines")
        ctx = NodeContext(self, node, proto.attributes(node), inputs)
        ctx.legacy_broadcast()
        convert = converters.find(node.op_type, node.domain)
        results = convert(ctx)
        if isinstance(results, Sequence) or not isinstance(results, (list, tuple)):
            results = [results]
        for name, var in zip(node.output, results):
            if name:
                self._define(name, var)
        wanted = [name for name in node.output if name]
        if len(results) < len(node.output) and any(node.output[len(results):]):
            raise ShapeError(f"node {ctx.name} ({node.op_type}): {len(wanted)} outputs are "
                             f"used, the converter gives {len(results)}")

    def _output(self, info):
        if info.name not in self.vars:
            raise ShapeError(f"graph output {info.name!r} is not computed by any node")
        var = self.vars[info.name]
        if isinstance(var, Sequence):
            raise UnsupportedTypeError(f"graph output {info.name!r} is a sequence: myelin "
                                       f"supports sequences only inside a graph")
        dtype, _ = proto.value_type(info)
        if 0 in var.shape:
            # Empty outputs need no code: the model returns an empty array of their shape.
            return Signature(info.name, None, dtype, var.shape)
        if var.producer is None or var.is_input:
            # A graph output must be an instance tensor of its own: copy inputs and constants.
            var = self.builder.op("Identity", [var])
            self.flow.add_alias(var, self.builder._name(info.name) + ":output")
        var.is_output = True
        if dtype != var.dtype:
            raise ShapeError(f"graph output {info.name} is {var.dtype}, the model declares "
                             f"{dtype}")
        return Signature(info.name, var.name, var.dtype, var.shape)


class _Scope(_GraphImporter):
    """The importer of a subgraph: its own names, bound in the function of its own builder;
    the model, flow and graph inputs are those of the importer around it."""

    def __init__(self, parent, builder):
        self.parent = parent
        self.model = parent.model
        self.graph = None
        self.opset = parent.opset
        self.shapes, self.values, self.specialize = parent.shapes, parent.values, \
            parent.specialize
        self.flow = parent.flow
        self.builder = builder
        self.vars = {}
        self.graph_inputs = parent.graph_inputs

    def _define(self, name, var):
        """Bind ``name`` in this scope; the variable gets it as an alias (``<func>/<name>``),
        never a new name: it may be a parameter, a constant or a value of an outer scope, and
        the converters of If, Loop and Scan may undo what a scope added."""
        if name in self.vars:
            raise ShapeError(f"ONNX value {name!r} is defined twice")
        self.vars[name] = var
        if not isinstance(var, Sequence) and self.flow.var_named(self.builder._name(name)) is None:
            self.flow.add_alias(var, self.builder._name(name))


def _checked_shape(name, dtype, shape):
    """``shape`` of graph input ``name``; InputError for a negative dimension, LimitError
    for an input over the size limit."""
    if any(d < 0 for d in shape):
        raise InputError(f"input {name} has shape {list(shape)}: dimensions are sizes, not "
                         f"negative")
    limits.check_tensor(shape, dtypes.itemsize(dtype), f"input {name} ({dtype}{list(shape)})")
    return shape


def _shape_text(shape):
    if shape is None:
        return "of unknown rank"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
