"""GraphDef to flow: the part of a TensorFlow graph that computes given outputs from given
inputs becomes ops of one flow function.

The importer walks back from the outputs along data inputs (control inputs are ignored), stops
at the given inputs, and converts the nodes it found in dependency order. Inputs become input
variables of concrete shape (unknown dimensions take the caller's shapes, else
``batch_size``); Const nodes become constants; TensorFlow variables (TF1 ``VariableV2``,
resource variables read by ``ReadVariableOp``) become constants of the values the caller
gives, or learnable variables holding them. Every tensor keeps its TensorFlow name: output 0
of node ``n`` is the flow variable ``<func>/n``, output k is ``<func>/n:k``.
"""

import dataclasses

from myelin.builder import Builder
from myelin.errors import InputError, ShapeError, UnsupportedOpError
from myelin.flow import Flow
from myelin.flow.graph import Variable
from myelin.importers.tensorflow import converters, graphdef
from myelin.importers.tensorflow.context import NodeContext

# Node types whose output is a graph input: they need a value when the walk reaches them.
_PLACEHOLDERS = ("Placeholder", "PlaceholderV2")


@dataclasses.dataclass
class VariableValue:
    """The value of a TensorFlow variable: ``name`` is the variable's own name (the flow
    variable is named after it), ``value`` its array."""

    name: str
    value: object


@dataclasses.dataclass
class ImportedGraph:
    """A flow function computing TensorFlow tensors: ``inputs`` and ``outputs`` map the
    names asked for (tensor names, or a function's output names) to their flow variables."""

    flow: Flow
    func: str
    inputs: dict
    outputs: dict


def check_supported(nodes):
    """Raise UnsupportedOpError listing every node of ``nodes`` (NodeDefs) whose op type has
    no converter, grouped by type."""
    by_type = {}
    for node in nodes:
        if converters.find(node.op) is None:
            by_type.setdefault(node.op, []).append(node.name)
    if by_type:
        listed = "; ".join(f"{op}: {', '.join(names)}" for op, names in sorted(by_type.items()))
        raise UnsupportedOpError(f"the graph uses TensorFlow ops myelin does not support: "
                                 f"{listed}", [n for names in by_type.values() for n in names])


def import_graph(graph, inputs, outputs, flow=None, func="main", shapes=None, batch_size=1,
                 variables=None, learnable=False):
    """Import the part of GraphDef ``graph`` computing tensors ``outputs`` from tensors
    ``inputs`` (names ``node`` or ``node:k``) into function ``func`` (a name or a Function) of
    ``flow`` (a new Flow if None). ``shapes`` maps input names to shapes for their unknown
    dimensions, which are otherwise ``batch_size``; ``variables`` maps the node names of
    variables and variable handles to :class:`VariableValue`; ``learnable`` keeps variables
    learnable instead of constant. Returns an :class:`ImportedGraph`."""
    flow = Flow() if flow is None else flow
    importer = _Importer(graph, Builder(flow, func), variables or {}, learnable)
    return importer.run(list(inputs), list(outputs), dict(shapes or {}), batch_size)


class _Importer:
    def __init__(self, graph, builder, variables, learnable):
        self.nodes = {}
        for node in graph.node:
            if node.name in self.nodes:
                raise ShapeError(f"the graph has two nodes named {node.name!r}")
            self.nodes[node.name] = node
        self.builder = builder
        self.flow = builder.flow
        self.variables = variables
        self.learnable = learnable
        self.values = {}            # tensor name -> Variable (or Resource)
        self._named = set()         # ids of variables that already stand for a tensor
        self._globals = {}          # variable or handle node name -> flow Variable (TF
                                    # variables may share a name: "Variable:0" unless named)

    def run(self, inputs, outputs, shapes, batch_size):
        inputs = {name: self._tensor(name, "input") for name in inputs}
        outputs = {name: self._tensor(name, "output") for name in outputs}
        shapes = {self._tensor(name, "input"): shape for name, shape in shapes.items()}
        unknown = [_display(tensor) for tensor in shapes if tensor not in inputs.values()]
        if unknown:
            raise InputError(f"shapes given for {unknown}, which are not inputs")
        order = self._order(set(inputs.values()), list(outputs.values()))
        check_supported([self.nodes[name] for name in order])
        imported_inputs = {name: self._input(tensor, shapes.get(tensor), batch_size)
                           for name, tensor in inputs.items()}
        for name in order:
            self._convert(self.nodes[name])
        imported_outputs = {name: self._output(tensor) for name, tensor in outputs.items()}
        return ImportedGraph(self.flow, self.builder.func.name, imported_inputs,
                             imported_outputs)

    # The walk.
    def _tensor(self, name, what):
        """(node, index) of tensor ``name``; InputError if the graph has no such node."""
        node, index = graphdef.tensor_name(name)
        if node not in self.nodes:
            raise InputError(f"the graph has no node {node!r} (asked for as an {what})")
        return node, index

    def _order(self, inputs, outputs):
        """The names of the nodes computing ``outputs`` from ``inputs``, each after the nodes
        it reads (an iterative depth-first walk: graphs can be deep)."""
        order, done, active = [], set(), set()
        for output in outputs:
            if output in inputs:
                continue
            stack = [(output[0], False)]
            while stack:
                name, expanded = stack.pop()
                if expanded:
                    active.discard(name)
                    done.add(name)
                    order.append(name)
                    continue
                if name in done:
                    continue
                if name in active:
                    raise ShapeError(f"the graph has a cycle through node {name!r} (while "
                                     f"loops are not supported)")
                active.add(name)
                stack.append((name, True))
                node = self.nodes[name]
                if node.op in _PLACEHOLDERS and name not in self.variables:
                    raise InputError(f"computing the outputs needs placeholder {name!r}: "
                                     f"give it as an input")
                for source in self._data_inputs(node):
                    if source not in inputs and source[0] not in done:
                        stack.append((source[0], False))
        return order

    def _data_inputs(self, node):
        sources = []
        for name in node.input:
            if name.startswith("^"):
                continue
            source = graphdef.tensor_name(name)
            if source[0] not in self.nodes:
                raise ShapeError(f"node {node.name} ({node.op}) reads {name!r}, which no node "
                                 f"of the graph computes")
            sources.append(source)
        return sources

    # Values.
    def _input(self, tensor, shape, batch_size):
        node = self.nodes[tensor[0]]
        where = f"input {_display(tensor)}"
        dtype = graphdef.myelin_type(_output_type(node, tensor[1], where), where)
        declared = _declared_shape(node, tensor[1])
        if shape is not None:
            shape = tuple(int(d) for d in shape)
            if declared is not None and (len(shape) != len(declared) or any(
                    d is not None and d != s for d, s in zip(declared, shape))):
                raise InputError(f"{where} has shape {list(shape)}, the graph declares "
                                 f"{_shape_text(declared)}")
        elif declared is None:
            raise InputError(f"{where} has a shape of unknown rank: give its shape")
        else:
            shape = tuple(batch_size if d is None else d for d in declared)
        var = self.builder.var(_display(tensor), dtype, shape)
        var.is_input = True
        self._define(tensor, var)
        return var

    def variable(self, name, dtype=None, shape=None):
        """The flow variable of the TensorFlow variable read through node ``name`` (a
        variable or a handle): a constant of its value, or a learnable variable holding it.
        ``dtype`` and ``shape``, when the node declares them, are checked against the value."""
        if name not in self.variables:
            raise InputError(f"node {name!r} is a TensorFlow variable whose value is not "
                             f"known: import from a session or function, or freeze the graph")
        given = self.variables[name]
        var = self._globals.get(name)
        if var is None:
            var = self.builder.const(given.value, copy=False)
            self.flow.rename_var(var, self.builder.varname(given.name.removesuffix(":0")))
            var.learnable = self.learnable
            self._globals[name] = var
            self._named.add(id(var))
        if dtype is not None and var.dtype != dtype or shape is not None and \
                None not in shape and tuple(shape) != var.shape:
            raise ShapeError(f"variable {given.name} is {var.type_string()}, node {name} "
                             f"declares {dtype}{_shape_text(shape)}")
        return var

    def _define(self, tensor, value):
        """Bind ``tensor`` to ``value``; a variable is renamed after the tensor, or gets its
        name as an alias when it already stands for another tensor."""
        self.values[tensor] = value
        if not isinstance(value, Variable):
            return
        wanted = self.builder._name(_display(tensor))
        if value.name != wanted and self.flow.var_named(wanted) is None:
            if id(value) in self._named:
                self.flow.add_alias(value, wanted)
            else:
                self.flow.rename_var(value, wanted)
        self._named.add(id(value))

    # Nodes.
    def _convert(self, node):
        inputs = []
        for source in self._data_inputs(node):
            if source not in self.values:
                raise ShapeError(f"node {node.name} ({node.op}) reads output {source[1]} of "
                                 f"node {source[0]}, which myelin's conversion does not give")
            inputs.append(self.values[source])
        ctx = NodeContext(self, node, inputs)
        results = converters.find(node.op)(ctx)
        if not isinstance(results, (list, tuple)):
            results = [results]
        for index, value in enumerate(results):
            self._define((node.name, index), value)

    def _output(self, tensor):
        if tensor not in self.values:
            raise ShapeError(f"node {tensor[0]} ({self.nodes[tensor[0]].op}): myelin's "
                             f"conversion does not give output {tensor[1]}")
        var = self.values[tensor]
        if not isinstance(var, Variable):
            raise InputError(f"output {_display(tensor)} is a variable handle, not a tensor")
        if var.producer is None or var.is_input:
            # An output must be an instance tensor of its own: copy inputs and constants.
            copy = self.builder.op("Identity", [var])
            self.flow.add_alias(copy, self.builder._name(_display(tensor)) + ":output")
            var = copy
        var.is_output = True
        return var


def _display(tensor):
    """The TensorFlow name of ``(node, index)``: ``node`` for output 0, else ``node:index``."""
    node, index = tensor
    return node if index == 0 else f"{node}:{index}"


def _output_type(node, index, where):
    """The TensorFlow type of output ``index`` of ``node``, from its type attributes."""
    for name in ("dtype", "T", "DstT", "out_type", "Tout", "output_type"):
        if name in node.attr:
            value = graphdef.attribute(node.attr[name], where)
            if isinstance(value, list):
                value = value[index] if index < len(value) else None
            if value is not None:
                return value
    raise InputError(f"{where}: node {node.name} ({node.op}) declares no type for its output: "
                     f"use a placeholder or give the input of another node")


def _declared_shape(node, index):
    """The shape node declares for output ``index`` (``shape`` or ``_output_shapes``)."""
    if "shape" in node.attr and node.op in _PLACEHOLDERS + ("PlaceholderWithDefault",):
        return graphdef.shape(node.attr["shape"].shape)
    if "_output_shapes" in node.attr and index < len(node.attr["_output_shapes"].list.shape):
        return graphdef.shape(node.attr["_output_shapes"].list.shape[index])
    return None


def _shape_text(shape):
    if shape is None:
        return "[?]"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
