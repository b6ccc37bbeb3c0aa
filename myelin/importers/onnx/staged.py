"""Staged execution: ONNX models whose shapes depend on values computed at run time.

NonZero, NonMaxSuppression, Unique and Compress give outputs whose shape depends on the values
of their inputs (:mod:`.hostops`), and myelin compiles code for static shapes. When such an op
reads a value computed at run time, :func:`plan` cuts the model into stages at it:

- Every value gets a *level*: graph inputs and constants 0; an ordinary node's outputs the
  highest level among what it reads (inputs, and the names its subgraphs read from around
  them); a data-dependent op's outputs one more. Stage d is the ordinary nodes of level d, an
  ONNX model of its own (those nodes; the constants they read, embedded; inputs: the values
  it reads from the graph's inputs, earlier stages and host ops; outputs: the values later
  stages, host ops or the graph's outputs read), compiled and cached per input signature by
  an :class:`~myelin.importers.onnx.OnnxModel` of its own. Between stage d and stage d+1 the
  data-dependent ops of level d run on the host (NumPy, :mod:`.hostops`). A stage after a
  NonMaxSuppression thus compiles once per number of boxes seen (each stage keeps at most
  ``max_signatures`` of them, least recently used out).
- An op whose deciding inputs are *static* (computed only from constants and from shapes,
  Shape and Size outputs, which are known when the stage compiles) is no cut: its converter
  computes it at import.
- An If whose branches hold data-dependent ops (torchvision's batched NMS: ``if boxes are
  empty: [] else: NonMaxSuppression(...)``) runs on the host too: its condition is read, and
  the branch taken is a staged graph of its own, planned the same way (its outer names are
  its inputs).
- A data-dependent op on run-time values inside a Loop or Scan body is an
  UnsupportedOpError: the body would need a compile per iteration.
- Nodes no output needs are left out.

Why stages rather than the control-flow VM hosting such steps: the VM runs cells compiled
ahead for fixed shapes, and a data-dependent op changes the shapes of everything after it, so
what follows must be compiled for the count seen anyway; a stage is exactly that, and reusing
OnnxModel gives it per-signature caching, specialization on values used as shapes, the VM for
stages with control flow, and the signature bound. Element types of the values crossing stages
come from ONNX shape inference (outputs) and from the arrays themselves (inputs).
"""

import collections
import logging
import threading

import numpy as np
import onnx

from myelin.errors import InputError, ShapeError, UnsupportedOpError
from myelin.flow import dtypes
from myelin.importers.onnx import hostops, proto

log = logging.getLogger("myelin.onnx")

SHAPE_OPS = frozenset({"Shape", "Size"})   # static outputs, whatever their input's values
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                        "RandomUniformLike", "Multinomial", "Bernoulli"})
LOOP_OPS = frozenset({"Loop", "Scan"})
CONSTANT_ATTRIBUTES = {"value": None, "value_float": np.float32, "value_floats": np.float32,
                       "value_int": np.int64, "value_ints": np.int64}


def plan(model, compile_stage):
    """A :class:`StagedModel` for ``model`` (a ModelProto), or None when no op's output
    shape depends on values computed at run time. ``compile_stage(stage_model,
    input_shapes)`` makes the OnnxModel of a stage. UnsupportedOpError for a data-dependent
    op on run-time values inside a Loop or Scan body."""
    graph = _Planner(model, compile_stage).graph(model.graph, {}, {}, "main")
    if not graph.hosts:
        return None
    return StagedModel(model, graph)


class StagedModel:
    """A model run as compiled stages with data-dependent ops on the host between them."""

    def __init__(self, model, graph):
        self.graph = graph
        self.inputs = {info.name: info for info in model.graph.input
                       if info.name not in {t.name for t in model.graph.initializer}}
        log.info("the model runs in stages: %s", graph.describe())

    @property
    def compiles(self):
        """(stage, signature, reason, seconds) per compile of every stage so far."""
        return [(stage.label,) + entry for stage in self.graph.all_stages()
                for entry in stage.compiles()]

    def compile_first(self, input_shapes):
        """Compile the first stage for ``input_shapes`` now (the others need run-time
        values)."""
        self.graph.compile_first(input_shapes)

    def run(self, feeds):
        """The graph outputs (fresh arrays) for ``feeds`` (input name -> array)."""
        for name, value in feeds.items():
            _check_input(self.inputs[name], value)
        return [np.array(v) for v in self.graph.run(dict(feeds))]


def _check_input(info, value):
    dtype, declared = proto.value_type(info)
    if dtypes.from_numpy(value.dtype) != dtype:
        raise InputError(f"input {info.name} is {dtype}, got an array of {value.dtype}")
    if declared is not None and (len(declared) != value.ndim or any(
            isinstance(d, int) and d != s for d, s in zip(declared, value.shape))):
        shown = "[" + ", ".join("?" if not isinstance(d, int) else str(d)
                                for d in declared) + "]"
        raise InputError(f"input {info.name} has shape {list(value.shape)}, the model "
                         f"declares {shown}")


class _Planner:
    """What planning the graphs of one model shares: the model, element types, stage
    compilation."""

    def __init__(self, model, compile_stage):
        self.model = model
        self.compile_stage = compile_stage
        self._types = None

    def elem_type(self, name, where):
        """The ONNX element type of value ``name`` (from shape inference, once)."""
        if self._types is None:
            self._types = _element_types(self.model)
        code = self._types.get(name)
        if not code:
            raise ShapeError(f"{where}: ONNX shape inference gives no element type for value "
                             f"{name!r}, which crosses between stages")
        return code

    def graph(self, graph, outer_static, outer_constants, label):
        return _Graph(self, graph, outer_static, outer_constants, label)


class _Graph:
    """The plan of one graph (the main graph or an If branch run on the host): its stages,
    the host steps after each, its outputs."""

    def __init__(self, planner, graph, outer_static, outer_constants, label):
        self.label = label
        self.outputs = [info.name for info in graph.output]
        self.constants = collections.ChainMap({}, outer_constants)   # name -> proto
        static = collections.ChainMap({}, outer_static)                # name -> bool
        level = collections.defaultdict(int)
        for tensor in graph.initializer:
            self.constants[tensor.name] = tensor
        for info in graph.input:
            if info.name not in self.constants:
                static[info.name] = False
        members = collections.defaultdict(list)     # level -> ordinary nodes
        self.hosts = collections.defaultdict(list)  # level -> host steps after that stage
        for node in _live(graph):
            reads = _reads(node)
            at = max((level[name] for name in reads), default=0)
            fixed = all(static.get(name, name in self.constants) for name in reads)
            outputs = [name for name in node.output if name]
            if _constant(node) is not None:
                self.constants.update((name, node) for name in outputs)
                continue
            step = self._host_step(planner, node, static, label)
            if step is not None:
                self.hosts[at].append(step)
                static.update((name, False) for name in outputs)
                level.update((name, at + 1) for name in outputs)
                continue
            if node.op_type in LOOP_OPS:
                _check_body(planner, node, static, self.constants)
            members[at].append(node)
            fixed = (fixed or node.op_type in SHAPE_OPS) and node.op_type not in RANDOM_OPS
            static.update((name, fixed) for name in outputs)
            level.update((name, at) for name in outputs)
        self.stages = self._stages(planner, members)
        self.depth = max(list(members) + [at + 1 for at in self.hosts], default=0)

    def _host_step(self, planner, node, static, label):
        """The host step running ``node``, or None when it is an ordinary node."""
        if node.domain not in ("", "ai.onnx"):
            return None
        op = hostops.find(node.op_type)
        if op is not None:
            deciding = [node.input[i] for i in op.shape_inputs
                        if i < len(node.input) and node.input[i]]
            if all(static.get(name, name in self.constants) for name in deciding):
                return None
            return _HostOp(node, op, self)
        if node.op_type == "If":
            where = f"{label} {proto.node_name(node)}"
            branches = {attr.name: planner.graph(attr.g, static, self.constants,
                                                 f"{where} {attr.name}")
                        for attr in node.attribute if attr.name in ("then_branch",
                                                                    "else_branch")}
            if any(branch.hosts for branch in branches.values()):
                for name, branch in branches.items():
                    if len(branch.outputs) != len(node.output):
                        raise ShapeError(f"node {proto.node_name(node)} (If): {name} gives "
                                         f"{len(branch.outputs)} outputs, the node has "
                                         f"{len(node.output)}")
                return _HostIf(node, branches, self)
        return None

    def _stages(self, planner, members):
        """{level: _Stage} from the ordinary nodes of each level."""
        made = {}
        for at, nodes in members.items():
            made.update((name, at) for node in nodes for name in node.output if name)
        wanted = collections.defaultdict(list)      # level -> names read after it

        def want(names, at=None):
            for name in names:
                source = made.get(name)
                if source is not None and source != at and name not in wanted[source]:
                    wanted[source].append(name)

        for at, nodes in members.items():
            for node in nodes:
                want(_reads(node), at)
        for steps in self.hosts.values():
            for step in steps:
                want(step.reads)
        want(self.outputs)
        return {at: _Stage(planner, self, f"{self.label} stage {at}", nodes, wanted[at])
                for at, nodes in sorted(members.items()) if wanted[at]}

    def all_stages(self):
        """The stages of this graph and of the branches of its host Ifs."""
        found = list(self.stages.values())
        for steps in self.hosts.values():
            for step in steps:
                for branch in getattr(step, "branches", {}).values():
                    found.extend(branch.all_stages())
        return found

    def describe(self):
        """The stages and host steps, in order, as text."""
        parts = []
        for at in range(self.depth + 1):
            if at in self.stages:
                parts.append(f"stage {at} ({len(self.stages[at].nodes)} nodes)")
            counts = collections.Counter(step.node.op_type for step in self.hosts.get(at, []))
            parts.extend(f"{count} {op_type} on the host" for op_type, count in counts.items())
        return ", ".join(parts)

    def compile_first(self, input_shapes):
        first = self.stages.get(0)
        if first is not None:
            first.compile({name: shape for name, shape in input_shapes.items()
                           if name in first.inputs})

    def value(self, env, name):
        """The array of value ``name``: computed or given (``env``), else a constant."""
        if name in env:
            return env[name]
        found = self.constants[name]
        if isinstance(found, onnx.TensorProto):
            return proto.to_array(found)
        return _constant(found)

    def run(self, env):
        """Run the stages and host steps on ``env`` (name -> array, updated); returns the
        graph's output arrays."""
        for at in range(self.depth + 1):
            stage = self.stages.get(at)
            if stage is not None:
                env.update(zip(stage.outputs, stage.run(env)))
            for step in self.hosts.get(at, []):
                env.update((name, value) for name, value in zip(step.node.output,
                                                                 step.run(env)) if name)
        return [self.value(env, name) for name in self.outputs]


class _Stage:
    """The ordinary nodes of one level, compiled as a model of their own on first use."""

    def __init__(self, planner, graph, label, nodes, outputs):
        self.planner, self.graph, self.label = planner, graph, label
        self.nodes, self.outputs = nodes, outputs
        inside = {name for node in nodes for name in node.output}
        reads = list(dict.fromkeys(name for node in nodes for name in _reads(node)
                                   if name not in inside))
        self.embedded = [name for name in reads if name in graph.constants]
        self.inputs = [name for name in reads if name not in graph.constants]
        self._model = None
        self._lock = threading.Lock()

    def compiles(self):
        return [] if self._model is None else self._model.compiles

    def compile(self, input_shapes, feeds=None):
        """The stage's OnnxModel, made on first use (element types of inputs from ``feeds``
        or their declarations)."""
        with self._lock:
            if self._model is None:
                self._model = self.planner.compile_stage(self._proto(feeds or {}),
                                                         input_shapes or None)
        return self._model

    def run(self, env):
        feeds = {name: self.graph.value(env, name) for name in self.inputs}
        return self.compile(None, feeds).run(feeds)

    def _proto(self, feeds):
        planner = self.planner
        declared = {info.name: info for info in planner.model.graph.input}
        inputs = []
        for name in self.inputs:
            if name in declared:
                inputs.append(declared[name])
            elif name in feeds:
                code = proto.onnx_dtype(dtypes.from_numpy(np.asarray(feeds[name]).dtype))
                inputs.append(onnx.helper.make_tensor_value_info(name, code, None))
            else:
                inputs.append(onnx.helper.make_tensor_value_info(
                    name, planner.elem_type(name, self.label), None))
        outputs = [onnx.helper.make_tensor_value_info(name, planner.elem_type(name, self.label),
                                                      None) for name in self.outputs]
        constants = [self.graph.constants[name] for name in self.embedded]
        graph = onnx.helper.make_graph(
            [c for c in constants if isinstance(c, onnx.NodeProto)] + self.nodes, self.label,
            inputs, outputs, [c for c in constants if isinstance(c, onnx.TensorProto)])
        return onnx.helper.make_model(graph, opset_imports=list(planner.model.opset_import),
                                      ir_version=max(planner.model.ir_version, 4))


class _HostOp:
    """A data-dependent op run on the host."""

    def __init__(self, node, op, graph):
        self.node, self.op, self.graph = node, op, graph
        self.reads = [name for name in node.input if name]
        self.attrs = proto.attributes(node)

    def run(self, env):
        inputs = [self.graph.value(env, name) if name else None for name in self.node.input]
        return self.op.compute(self.attrs, inputs,
                               f"node {proto.node_name(self.node)} ({self.node.op_type})")


class _HostIf:
    """An If run on the host: the condition read, the branch taken run as a staged graph."""

    def __init__(self, node, branches, graph):
        self.node, self.branches, self.graph = node, branches, graph
        self.reads = _reads(node)

    def run(self, env):
        condition = np.asarray(self.graph.value(env, self.node.input[0]))
        if condition.size != 1:
            raise ShapeError(f"node {proto.node_name(self.node)} (If): the condition must "
                             f"have one element, got shape {list(condition.shape)}")
        taken = "then_branch" if condition.reshape(-1)[0] else "else_branch"
        return self.branches[taken].run(collections.ChainMap({}, env))


def _check_body(planner, node, static, constants):
    """UnsupportedOpError if a body of Loop or Scan ``node`` has a data-dependent op on
    run-time values."""
    for attr in node.attribute:
        if attr.type != onnx.AttributeProto.GRAPH:
            continue
        body = planner.graph(attr.g, static, constants, f"{proto.node_name(node)} body")
        steps = [step for steps in body.hosts.values() for step in steps]
        if steps:
            found = ", ".join(f"{step.node.op_type} {proto.node_name(step.node)}"
                              for step in steps)
            raise UnsupportedOpError(
                f"node {proto.node_name(node)} ({node.op_type}): its body has {found}, whose "
                f"output's shape depends on values computed in the loop; myelin compiles loop "
                f"bodies for fixed shapes, and runs such ops on the host only between the "
                f"compiled stages of the main graph and of If branches",
                [proto.node_name(node)] + [proto.node_name(step.node) for step in steps])


def _reads(node):
    """The names ``node`` reads: its inputs, and the outer names its subgraphs read."""
    names = [name for name in node.input if name]
    for sub in proto.subgraphs(node):
        names.extend(sorted(proto.free_names(sub)))
    return list(dict.fromkeys(names))


def _live(graph):
    """The nodes of ``graph`` that its outputs need, in order."""
    needed = {info.name for info in graph.output}
    live = []
    for node in reversed(graph.node):
        if any(name in needed for name in node.output):
            live.append(node)
            needed.update(_reads(node))
    return live[::-1]


def _constant(node):
    """The value of a Constant node as an array, or None (not a Constant, or one of a kind
    (sparse, strings) left to its converter)."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or \
            len(node.attribute) != 1 or node.attribute[0].name not in CONSTANT_ATTRIBUTES:
        return None
    attr = node.attribute[0]
    value = onnx.helper.get_attribute_value(attr)
    cast = CONSTANT_ATTRIBUTES[attr.name]
    if cast is None:
        if value.data_type == onnx.TensorProto.STRING:
            return None
        return proto.to_array(value)
    return np.array(value, dtype=cast)


def _element_types(model):
    """ONNX element type code by value name, from shape inference (as far as it goes) and
    the model's declarations."""
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception as error:      # noqa: BLE001 - onnx raises its own types; what it gave is used
        log.info("ONNX shape inference failed (%s): using the declared types", error)
    types = {}

    def collect(graph):
        for info in list(graph.input) + list(graph.output) + list(graph.value_info):
            if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
                types[info.name] = info.type.tensor_type.elem_type
        for tensor in graph.initializer:
            types[tensor.name] = tensor.data_type
        for node in graph.node:
            for sub in proto.subgraphs(node):
                collect(sub)

    collect(model.graph)
    return types
