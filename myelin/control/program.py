"""The compile pipeline for flows with control flow, and the Program it exports.

:func:`compile` runs the steps of the pipeline in order, each a function of its own:

1. ``lower`` (:mod:`myelin.control.lower`): wrap constants, split each function with a
   signature into linear segments and control nodes, and compile it to instructions;
2. ``optimize`` (:mod:`myelin.control.peephole`): direct calls, branches, tail calls, early
   element reads, merged externals, dead values; then (:mod:`myelin.control.loops`) loops
   whose body is one segment become cells that loop by themselves;
3. ``compile_segments``: every segment of every function becomes a function of one new flow,
   compiled by :class:`myelin.Compiler` into one network of cells (one LLVM module);
4. ``link`` (:mod:`myelin.control.link`): one list of VM code;
5. export: a :class:`Program`, which runs a function on the VM (:mod:`myelin.control.vm`).
"""

import itertools
import threading

import numpy as np

from myelin.builder import verify
from myelin.control import loops, peephole
from myelin.control.link import link
from myelin.control.lower import FunctionCode, Instr, Segment
from myelin.control.vm import External, run
from myelin.errors import FlowError, InputError
from myelin.flow import dtypes
from myelin.flow.graph import Flow
from myelin.ops.control import (holds_function, is_tuple_type, tensor_type, tuple_elements,
                                 value_type)

REFERENCE_BYTES = 1 << 14     # segment inputs this large are bound in place, smaller copied


def compile(flow, optimize=True, native_loops=True, **compiler_options):
    """Compile every function of ``flow`` that has a signature; returns a :class:`Program`.
    ``optimize`` runs the peephole step and, with ``native_loops``, the native-loop step;
    ``compiler_options`` go to :class:`myelin.Compiler` for the cells. FlowError if the flow
    is inconsistent (:func:`myelin.builder.verify.check`: its control-flow ops' functions and
    arguments too)."""
    functions = [func for func in flow.funcs.values() if func.results is not None]
    if not functions:
        raise FlowError("the flow has no function with a signature (param()s and ret())")
    verify.check(flow)
    for func in functions:
        for var in func.params + func.results:
            if not var.shape_defined:
                raise FlowError(f"function {func.name}: {var.name} has dynamic shape "
                                f"{list(var.shape)}; the VM needs static shapes")
    names = (f"segment{i}" for i in itertools.count())
    codes = {func.name: FunctionCode(func, names).lower(flow).instrs for func in functions}
    if optimize:
        codes = {name: peephole.optimize(instrs) for name, instrs in codes.items()}
        if native_loops:
            codes = loops.native_loops(codes)
    externals = [i.args for instrs in codes.values() for i in instrs if i.op == "external"]
    network = compile_segments([segment for segment, _, _ in externals], compiler_options)
    code, entries = link(codes, {s.name: index for index, (s, _, _) in enumerate(externals)})
    return Program(flow, codes, code, entries, network, externals)


def compile_segments(segments, compiler_options):
    """One network with a cell per segment, named after it. A segment's large inputs are
    reference inputs (bound to the VM's arrays without a copy), small ones (and a looping
    segment's state) are copied in; its variables are named ``<segment>/<variable>``, its
    constants keep their names (shared by the cells)."""
    from myelin.compiler import Compiler

    flow = Flow()
    repeats = {}
    for segment in segments:
        func = flow.func(segment.name)
        local = {}

        def copy(var):
            if id(var) not in local:
                name = var.name if var.is_global else f"{segment.name}/{var.name}"
                made = flow.vars.get(name)
                if made is None:
                    made = flow.var(name, var.dtype, var.shape)
                    made.data, made.flags = var.data, var.flags if var.is_global else 0
                local[id(var)] = made
            return local[id(var)]

        references = _references(segment)
        for var in segment.inputs:
            copy(var).is_input = True
            copy(var).ref = id(var) in references
        for alias, var in segment.aliases:
            local[id(alias)] = copy(var)
        for op in segment.ops:
            flow.op(f"{segment.name}/{op.name}", op.type, func, [copy(v) for v in op.inputs],
                    [copy(v) for v in op.outputs], op.attrs)
        for var in segment.outputs:
            copy(var).is_output = True
        if segment.loop is not None:
            outputs = [copy(v).name for v in segment.outputs]
            inputs = [copy(v).name for v in segment.inputs]
            repeats[segment.name] = (outputs[segment.loop.condition],
                                     [(outputs[o], inputs[i]) for o, i in segment.loop.feedback])
    if not segments:
        return None
    return Compiler(**compiler_options, loops=repeats).compile(flow)


class Program:
    """Compiled functions of a flow with control flow: ``program.run(name, *args)`` (or
    ``program.function(name)(*args)``) computes a function's results. Programs may run on
    several threads at once: each thread has its own cell instances."""

    def __init__(self, flow, codes, code, entries, network, externals, cells=None):
        self.flow = flow
        self.codes = codes              # function name -> instructions (before linking)
        self.code = code
        self.entries = entries
        self.network = network
        self.externals = externals      # (segment, input registers, output registers)
        # What each External is made of: (cell, inputs, outputs, reference inputs).
        self.cells = cells if cells is not None else \
            [_cell_plan(*args) for args in externals]
        self._local = threading.local()

    # Saving and pickling (myelin.runtime.serialize): the flow (as .flow bytes), the linked
    # code, the network (its own bytes) and what each segment's External binds; the
    # instructions before linking keep only their segments' names and sizes.
    def __reduce__(self):
        from myelin.flow import fileformat
        from myelin.errors import FlowError, SerializationError
        try:
            flow = fileformat.to_bytes(self.flow)
        except FlowError as error:
            raise SerializationError(f"cannot save or pickle the program: its flow cannot "
                                     f"be written as a .flow file: {error}") from None
        codes = {name: [Instr(i.op, tuple(map(_saved_operand, i.args))) for i in instrs]
                 for name, instrs in self.codes.items()}
        externals = [(_saved_operand(segment), inputs, outputs)
                     for segment, inputs, outputs in self.externals]
        return _restore, (flow, codes, self.code, self.entries, self.network, externals,
                          self.cells)

    def save(self, path):
        """Write the program to the file ``path`` (see :mod:`myelin.runtime.serialize`)."""
        from myelin.runtime import serialize
        serialize.save(self, path)

    @classmethod
    def load(cls, path):
        """The program saved in the file ``path`` by :meth:`save`."""
        from myelin.runtime import serialize
        return serialize.load(path, Program)

    def run(self, function, *args):
        """The results of ``function`` (a name) on ``args``: one value, or a tuple of them.
        A tensor is an array, a tuple a tuple of values (tuple arguments may be lists)."""
        values = self.arguments(function, *args)
        results = run(self.code, self.thread_externals(), self.entries[function], values)
        return results[0] if len(results) == 1 else tuple(results)

    def arguments(self, function, *args):
        """``args`` as the VM takes them for ``function``: arrays of its parameters' types
        and shapes (InputError if they do not fit)."""
        func = self.flow.funcs.get(function)
        if func is None or function not in self.entries:
            raise InputError(f"the program has no function {function!r}; it has "
                             f"{', '.join(self.entries)}")
        if any(holds_function(value_type(v)) for v in func.params + func.results):
            raise InputError(f"function {function} takes or gives function values, which "
                             f"Python cannot pass or receive: call it from another function")
        if len(args) != len(func.params):
            raise InputError(f"function {function} takes {len(func.params)} arguments "
                             f"({', '.join(p.name for p in func.params)}), got {len(args)}")
        return [_argument(param.name, value_type(param), value)
                for param, value in zip(func.params, args)]

    def function(self, name):
        """A Python callable running function ``name``."""
        if name not in self.entries:
            raise InputError(f"the program has no function {name!r}")
        return lambda *args: self.run(name, *args)

    def listing(self):
        """The instructions of every function, as text (before linking)."""
        lines = []
        for name, instrs in self.codes.items():
            lines.append(f"{name}:")
            lines.extend(f"  {position:4}  {instr!r}" for position, instr in enumerate(instrs))
        return "\n".join(lines)

    def thread_externals(self):
        """The Externals (cell instances) of the calling thread, made on its first run."""
        externals = getattr(self._local, "externals", None)
        if externals is None:
            externals = [External(self.network.cell(cell), inputs, outputs, references)
                         for cell, inputs, outputs, references in self.cells]
            self._local.externals = externals
        return externals


def _cell_plan(segment, inputs, outputs):
    """(cell name, [(tensor, register)] read, [(tensor, register)] written, names of the
    reference inputs) of the External running ``segment`` with its registers."""
    def named(var):
        return f"{segment.name}/{var.name}"

    references = _references(segment)
    return (segment.name, list(zip(map(named, segment.inputs), inputs)),
            list(zip(map(named, segment.outputs), outputs)),
            {named(v) for v in segment.inputs if id(v) in references})


def _saved_operand(value):
    """An instruction's operand as a saved program keeps it: a segment as one with its name,
    its number of ops (None each) and whether it loops, but not its flow objects."""
    if isinstance(value, Segment):
        return Segment(value.name, [None] * len(value.ops),
                       loop=True if value.loop is not None else None)
    return value


def _restore(flow, codes, code, entries, network, externals, cells):
    """The Program of :meth:`Program.__reduce__`."""
    from myelin.flow import fileformat
    return Program(fileformat.from_bytes(flow), codes, code, entries, network, externals,
                   cells)


def _references(segment):
    """The ids of the inputs of ``segment`` bound in place rather than copied into its cell's
    instance: large ones, unless the cell loops and copies its outputs over them."""
    state = {i for _, i in segment.loop.feedback} if segment.loop else set()
    return {id(var) for index, var in enumerate(segment.inputs)
            if index not in state and var.elements * dtypes.itemsize(var.dtype) >= REFERENCE_BYTES}


def _argument(name, kind, value):
    """``value`` as the VM takes a value of type ``kind`` (text; ``name`` in errors): an
    array of the tensor type and shape, or for a tuple type a tuple (from a tuple or list) of
    such values. InputError if it cannot be."""
    if is_tuple_type(kind):
        elements = tuple_elements(kind)
        if not isinstance(value, (tuple, list)) or len(value) != len(elements):
            raise InputError(f"argument {name} must be a tuple of {len(elements)} values")
        return tuple(_argument(f"{name}[{i}]", element, item)
                     for i, (element, item) in enumerate(zip(elements, value)))
    tensor = tensor_type(kind)
    array = np.asarray(value)
    target = dtypes.to_numpy(tensor.dtype)
    if array.size != int(np.prod(tensor.shape, dtype=np.int64)):
        raise InputError(f"argument {name} has shape {list(array.shape)}, expected "
                         f"{list(tensor.shape)}")
    if not np.can_cast(array.dtype, target, "same_kind"):
        raise InputError(f"argument {name} has type {array.dtype}, expected {tensor.dtype}")
    return np.ascontiguousarray(array, target).reshape(tensor.shape)
