"""An exported PyTorch program (``torch.export``, decomposed to core ATen but for the ops myelin
keeps whole) to a flow: parameters, buffers and constants become constants of the flow (or
inputs bound to the module's tensors, when asked), user inputs become input variables of their
concrete shapes, and each ATen node becomes the myelin ops its converter emits.

Shapes and types come from myelin's op registry as the converters build the flow; PyTorch's
own (each node's ``meta["val"]``) serve as a check: a result of another shape is a converter's
fault and raises ShapeError naming the node, a result of another type is cast to PyTorch's.
Every op without a converter is listed at once, in one UnsupportedOpError, before anything is
converted.
"""

import dataclasses
import logging
import operator

import numpy as np
import torch
from torch.export.graph_signature import InputKind, OutputKind

from myelin.builder import Builder
from myelin.errors import InputError, ShapeError, UnsupportedOpError, UnsupportedTypeError
from myelin.flow import Flow, dtypes
from myelin.flow.graph import Variable
from myelin.importers.graph import ImportedGraph, Signature
from myelin.importers.torch import converters, types
from myelin.importers.torch.context import NodeContext

log = logging.getLogger("myelin.torch")

# Ops that check what export assumed (types, ranges of values): nothing to compute.
_CHECKS = {"aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
           "aten.sym_constrain_range_for_size.default", "aten.sym_constrain_range.default",
           "aten._assert_async.msg", "aten._assert_async.default",
           "aten._functional_assert_async.msg", "aten._functional_assert_scalar.default"}


@dataclasses.dataclass
class ImportedProgram(ImportedGraph):
    """An :class:`ImportedGraph` of a PyTorch program. ``inputs`` are the user inputs the
    flow reads (their names are placeholder names), then the parameters and buffers bound
    as inputs; ``user_inputs`` gives, per entry of ``inputs``, the position of its tensor
    among the program's flattened user inputs, or None for a bound parameter, whose tensor is
    in ``bound`` (by input name). ``results`` gives, per result of the program, the index of
    its entry in ``outputs`` or a :class:`Value` (a result known at import: None, a number,
    a tensor of no elements). ``mutations`` are (result position, user input position) for
    each user input the program writes: the run copies that result into it."""

    user_inputs: list = dataclasses.field(default_factory=list)
    bound: dict = dataclasses.field(default_factory=dict)
    results: list = dataclasses.field(default_factory=list)
    mutations: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Value:
    """A result of the program known at import time."""

    value: object


def check_supported(graph):
    """UnsupportedOpError listing every op of ``graph`` (a torch.fx Graph of ATen ops) that
    has no converter, with the nodes that use it."""
    missing = {}
    for node in graph.nodes:
        if node.op == "call_function":
            if node.target is operator.getitem or converters.op_name(node.target) in _CHECKS:
                continue
            if converters.find(node.target) is None:
                missing.setdefault(converters.op_name(node.target), []).append(node.name)
        elif node.op in ("call_module", "call_method", "get_attr"):
            if node.op == "get_attr" and all(u.op != "call_function" or
                                             converters.find(u.target) is not None
                                             for u in node.users):
                continue
            missing.setdefault(f"{node.op} {node.target}", []).append(node.name)
    if missing:
        listed = "; ".join(f"{op}: {', '.join(names[:8])}" +
                           (f" and {len(names) - 8} more" if len(names) > 8 else "")
                           for op, names in missing.items())
        raise UnsupportedOpError(f"the program uses ops myelin does not support: {listed}",
                                 [name for names in missing.values() for name in names])


PRECISIONS = ("float32", "float64")


def import_program(program, frozen=None, bind_parameters=False, precision="float32",
                   func="main"):
    """Import ``program`` (a torch.export ExportedProgram of concrete shapes) into a new
    flow; returns an :class:`ImportedProgram`.

    ``frozen`` maps positions among the flattened user inputs to tensors that become
    constants of the flow (the parameters Dynamo passes as graph inputs).
    ``bind_parameters``: parameters and buffers become reference inputs bound to the tensors
    at each run, instead of constants holding their values at import time.
    ``precision``: "float32" computes in the program's types; "float64" computes every
    float32 value in float64 (inputs and results stay float32).
    """
    if precision not in PRECISIONS:
        raise InputError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    check_supported(program.graph)
    return _ProgramImporter(program, dict(frozen or {}), bind_parameters, precision,
                            func).run()


class _ProgramImporter:
    def __init__(self, program, frozen, bind_parameters, precision, func):
        self.program = program
        self.frozen = frozen
        self.bind_parameters = bind_parameters
        self.types = {"float32": "float64"} if precision == "float64" else {}
        self.flow = Flow()
        self.builder = Builder(self.flow, func)
        self.values = {}            # fx Node -> Variable, list of them, or a Python value

    def run(self):
        signature = self.program.graph_signature
        placeholders = [n for n in self.program.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(signature.input_specs):
            raise ShapeError(f"the program has {len(placeholders)} placeholders and "
                             f"{len(signature.input_specs)} input specs")
        inputs, user_inputs, bound, bound_inputs = [], [], {}, []
        position = 0
        for node, spec in zip(placeholders, signature.input_specs):
            if spec.kind == InputKind.USER_INPUT:
                if isinstance(spec.arg, torch.export.graph_signature.ConstantArgument):
                    self.values[node] = spec.arg.value
                elif position in self.frozen:
                    if node.users:
                        self.values[node] = self._constant(node.name, self.frozen[position])
                else:
                    var = self._input(node)
                    inputs.append(Signature(node.name, var.name, var.dtype, var.shape))
                    user_inputs.append(position)
                position += 1
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER,
                               InputKind.CONSTANT_TENSOR):
                tensor = self.program.state_dict[spec.target] \
                    if spec.target in self.program.state_dict \
                    else self.program.constants[spec.target]
                if not node.users:
                    continue
                if self.bind_parameters and spec.kind != InputKind.CONSTANT_TENSOR:
                    var = self._input(node, spec.target)
                    bound_inputs.append(Signature(spec.target, var.name, var.dtype, var.shape))
                    bound[spec.target] = tensor
                else:
                    self.values[node] = self._constant(spec.target, tensor)
            else:
                raise UnsupportedOpError(f"the program takes a {spec.kind.name.lower()} "
                                         f"input ({node.name}), which myelin does not support",
                                         [node.name])
        inputs += bound_inputs                     # (the user's first)
        user_inputs += [None] * len(bound_inputs)
        for node in self.program.graph.nodes:
            if node.op == "call_function":
                self._convert(node)
            elif node.op == "get_attr":
                self.values[node] = getattr(self.program.graph_module, node.target)
        outputs, results, mutations = self._outputs(placeholders)
        return ImportedProgram(self.flow, self.builder.func.name, inputs, outputs, {},
                               user_inputs=user_inputs, bound=bound, results=results,
                               mutations=mutations)

    def retype(self, dtype):
        """The type myelin computes a value of PyTorch's type ``dtype`` (a myelin name) in."""
        return self.types.get(dtype, dtype)

    # Values.
    def _input(self, node, name=None):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise UnsupportedTypeError(f"input {node.name} is not a tensor ({type(val).__name__})")
        shape = _concrete(val.shape, f"input {node.name}")
        dtype = types.to_myelin(val.dtype, f"input {name or node.name}")
        var = self.builder.var(_safe(name or node.name), dtype, shape)
        var.is_input = True
        self.values[node] = var if self.retype(dtype) == dtype else \
            self.builder.cast(var, self.retype(dtype))
        return var

    def _constant(self, name, tensor):
        """A constant of the flow holding ``tensor``'s values, sharing its memory where it can
        (a contiguous CPU tensor); a Python number stays a number."""
        if not isinstance(tensor, torch.Tensor):
            return tensor
        dtype = types.to_myelin(tensor.dtype, f"{name}")
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        array = types.to_array(tensor.detach())
        if array.dtype != dtypes.to_numpy(self.retype(dtype)):
            array = array.astype(dtypes.to_numpy(self.retype(dtype)))
        var = self.builder.const(array, copy=False)
        if self.flow.var_named(self.builder._name(_safe(name))) is None:
            self.flow.rename_var(var, self.builder._name(_safe(name)))
        return var

    def _resolve(self, value):
        if isinstance(value, torch.fx.Node):
            if value not in self.values:
                raise ShapeError(f"node {value.name} is used before it is computed")
            return self.values[value]
        if isinstance(value, (list, tuple)):
            return type(value)(self._resolve(v) for v in value)
        return value

    # Nodes.
    def _convert(self, node):
        if node.target is operator.getitem:
            source, index = node.args
            results = self.values[source]
            value = results[index]
            if value is None:
                raise ShapeError(f"node {node.name}: result {index} of {source.name} "
                                 f"({source.target}) is not computed by myelin's converter")
            self.values[node] = value
            return
        name = converters.op_name(node.target)
        if name in _CHECKS:
            self.values[node] = None
            return
        ctx = NodeContext(self, node, self._arguments(node))
        result = converters.find(node.target)(ctx)
        self.values[node] = self._checked(ctx, result)

    def _arguments(self, node):
        """The node's arguments by schema name, resolved (defaults filled in)."""
        schema = node.target._schema
        args = {}
        for i, argument in enumerate(schema.arguments):
            if i < len(node.args) and not argument.kwarg_only:
                value = node.args[i]
            elif argument.name in node.kwargs:
                value = node.kwargs[argument.name]
            elif argument.has_default_value():
                value = argument.default_value
            else:
                value = None
            args[argument.name] = self._resolve(value)
        return args

    def _checked(self, ctx, result):
        """``result`` checked against PyTorch's shapes and types (cast to its type)."""
        meta = ctx.meta
        if isinstance(meta, (list, tuple)):
            if not isinstance(result, (list, tuple)):
                raise ShapeError(f"node {ctx.name} ({ctx.op_type}): the converter gives one "
                                 f"result, PyTorch {len(meta)}")
            return [self._check_one(ctx, r, m) for r, m in zip(result, meta)] + \
                list(result[len(meta):])
        return self._check_one(ctx, result, meta)

    def _check_one(self, ctx, var, meta):
        if not isinstance(var, Variable) or not isinstance(meta, torch.Tensor):
            return var
        shape = _concrete(meta.shape, f"node {ctx.name}")
        if var.shape != shape:
            if var.elements == int(np.prod(shape, dtype=np.int64)) and \
                    (var.rank == 0 or len(shape) == 0):
                var = ctx.reshape(var, shape)       # a scalar as [1] or the other way round
            else:
                raise ShapeError(f"node {ctx.name} ({ctx.op_type}): myelin's result has "
                                 f"shape {list(var.shape)}, PyTorch's {list(shape)}")
        dtype = types.to_myelin(meta.dtype, f"the result of node {ctx.name} ({ctx.op_type})")
        return ctx.cast(var, self.retype(dtype))

    def _outputs(self, placeholders):
        node = next(n for n in self.program.graph.nodes if n.op == "output")
        values = node.args[0]
        specs = self.program.graph_signature.output_specs
        user_positions = {}
        position = 0
        for placeholder, spec in zip(placeholders, self.program.graph_signature.input_specs):
            if spec.kind == InputKind.USER_INPUT:
                user_positions[placeholder.name] = position
                position += 1
        outputs, results, mutations, mutated_buffers = [], [], [], []
        for value, spec in zip(values, specs):
            if spec.kind == OutputKind.BUFFER_MUTATION:
                mutated_buffers.append(spec.target)
                continue
            if spec.kind not in (OutputKind.USER_OUTPUT, OutputKind.USER_INPUT_MUTATION):
                raise UnsupportedOpError(f"the program has a {spec.kind.name.lower()} output "
                                         f"({spec.arg}), which myelin does not support")
            if spec.kind == OutputKind.USER_INPUT_MUTATION:
                mutations.append((len(results), user_positions[spec.target]))
            output = self._output(value, len(results))
            if isinstance(output, Value):
                results.append(output)
            else:
                results.append(len(outputs))
                outputs.append(output)
        if mutated_buffers:
            raise UnsupportedOpError(
                f"the program writes its buffers {', '.join(mutated_buffers)} (a module in "
                f"training mode, or one keeping state between calls): myelin compiles "
                f"inference functions, without state; call module.eval()", mutated_buffers)
        return outputs, results, mutations

    def _output(self, value, index):
        """The Signature of result ``index`` of the program, computed by the flow, or its
        Value when it is known."""
        name = f"output_{index}"
        var = self.values[value] if isinstance(value, torch.fx.Node) else value
        if isinstance(var, torch.Tensor):
            var = self._constant(name, var)
        if not isinstance(var, Variable):
            return Value(var)
        meta = value.meta.get("val")
        if isinstance(meta, torch.Tensor):
            var = self.builder.cast(var, types.to_myelin(meta.dtype, f"output {index}")) \
                if var.dtype != types.to_myelin(meta.dtype) else var
        if 0 in var.shape:
            return Value(torch.empty(var.shape, dtype=types.to_torch(var.dtype)))
        if var.producer is None or var.is_input or var.is_output:
            # An output is an instance tensor of its own: copy inputs, constants, repeats.
            var = self.builder.op("Identity", [var])
        var.is_output = True
        self.flow.add_alias(var, self.builder._name(name))
        return Signature(name, var.name, var.dtype, var.shape)


def _concrete(shape, what):
    try:
        return tuple(int(d) for d in shape)
    except (TypeError, RuntimeError):
        raise ShapeError(f"{what} has a symbolic shape {list(shape)}: myelin compiles for "
                         f"concrete shapes (it recompiles per input signature)") from None


def _safe(name):
    return str(name).replace(":", "_")
