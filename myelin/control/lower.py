"""Lowering a function with control flow into VM instructions: the steps "wrap constants",
"split" and "compile to instructions" of the pipeline (see :mod:`myelin.control`).

A function's values live in the registers of its frame: its parameters first, then every
value it makes, each in a register of its own. The function's ops are cut, in topological
order, into linear segments (runs of tensor ops) and control nodes (``Call`` and ``If`` ops).
A segment becomes one ``external`` instruction (its ops are compiled into one cell later),
a ``Call`` a ``call`` of the function (or of a function value), a ``Function`` a
``push_graph``, a ``Partial`` a ``partial``, a ``Tuple`` a ``tuple``, a ``TupleGet`` a
``tuple_get`` (or nothing, for an element of a tuple the function builds, or one read
before: its register is the element's), an ``If`` the closures of its two branches
(``partial``), a ``switch`` on its condition between them and a ``call`` of the one chosen. A
constant that a control node reads or that the function returns is wrapped as a ``push`` of
its value; constants that segments read go into their cells. The function ends with a
``return`` of its results; ``pad_stack`` at its start sizes its frame.

Instructions name functions (graphs) by name here; :mod:`myelin.control.link` resolves them.
"""

import dataclasses

import numpy as np

from myelin.errors import FlowError
from myelin.flow import dtypes
from myelin.ops.control import is_control


@dataclasses.dataclass
class Segment:
    """A linear segment: tensor ops of one function, compiled into one cell. ``inputs`` and
    ``outputs`` are the variables it reads from and gives to the rest of the function, each
    input from a register of its own; ``aliases`` are (variable, variable) pairs: the first
    is the value of the second (which an op of the segment makes, or an input from the same
    register); ``loop`` says how the cell repeats itself, if it runs a whole loop
    (:mod:`myelin.control.loops`)."""
    name: str
    ops: list
    inputs: list = dataclasses.field(default_factory=list)
    outputs: list = dataclasses.field(default_factory=list)
    loop: object = None
    aliases: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Instr:
    """One instruction: ``op`` and its operands (registers are frame indices)."""
    op: str
    args: tuple

    def __repr__(self):
        return f"{self.op} " + ", ".join(map(_operand_text, self.args))


def _operand_text(value):
    if isinstance(value, Segment):
        return f"<{value.name}: {len(value.ops)} ops{', looping' if value.loop else ''}>"
    if isinstance(value, np.ndarray):
        return f"const{list(value.shape)}"
    return repr(value)


class FunctionCode:
    """The instructions of one function, and the registers of its values."""

    def __init__(self, func, segment_names):
        if func.results is None:
            raise FlowError(f"function {func.name} has no signature (param()s and ret())")
        self.func = func
        self.instrs = []
        self.registers = {}            # id of a variable -> register
        self._segment_names = segment_names
        self._elements = {}            # (tuple register, index) -> register of the element
        for param in func.params:
            self.registers.setdefault(id(param), len(self.registers))
        self.size = len(self.registers)

    def register(self, var):
        """The register holding ``var``, wrapping a constant (``push``) on first use."""
        register = self.registers.get(id(var))
        if register is None:
            if var.data is None:
                raise FlowError(f"function {self.func.name} reads {var.name}, which nothing "
                                f"gives it (not a parameter, constant or earlier value)")
            register = self._new(var)
            array = np.array(var.data, dtypes.to_numpy(var.dtype)).reshape(var.shape)
            array.flags.writeable = False      # shared by every run: it may be a result
            self.instrs.append(Instr("push", (register, array)))
        return register

    def _new(self, var=None):
        """A new register (for ``var``, when it holds a variable)."""
        if var is not None:
            self.registers[id(var)] = self.size
        self.size += 1
        return self.size - 1

    def lower(self, flow):
        """Emit the function's instructions."""
        for item in split(flow, self.func):
            if isinstance(item, Segment):
                self._external(item)
            elif item.type == "If":
                self._if(item)
            else:
                getattr(self, "_" + item.type.lower())(item)
        self.instrs.append(Instr("return", (tuple(self.register(v) for v in self.func.results),)))
        self.instrs.insert(0, Instr("pad_stack", (self.size,)))
        return self

    def _external(self, segment):
        segment.name = next(self._segment_names)
        produced = {id(v) for op in segment.ops for v in op.outputs}
        reads = {}
        for op in segment.ops:
            for var in op.inputs:
                if id(var) not in produced and not var.is_global:
                    reads.setdefault(id(var), var)
        given = {}                  # register -> the input variable read from it
        for var in reads.values():
            register = self.register(var)
            if register in given:   # an element of a tuple and the value it was built from
                segment.aliases.append((var, given[register]))
            else:
                given[register] = var
        segment.inputs = list(given.values())
        inputs = tuple(given)
        segment.outputs = [v for op in segment.ops for v in op.outputs if _used_later(v, segment)]
        outputs = tuple(self._new(v) for v in segment.outputs)
        self.instrs.append(Instr("external", (segment, inputs, outputs)))

    def _call(self, op):
        if "function" in op.attrs:
            target = self._new()
            self.instrs.append(Instr("push_graph", (target, op.attrs["function"])))
            args = op.inputs
        else:                              # input 0 is a function value
            target, args = self.register(op.inputs[0]), op.inputs[1:]
        arguments = tuple(self.register(v) for v in args)
        results = tuple(self._new(v) for v in op.outputs)
        self.instrs.append(Instr("call", (results, target, arguments)))

    def _function(self, op):
        self.instrs.append(Instr("push_graph", (self._new(op.outputs[0]), op.attrs["function"])))

    def _partial(self, op):
        function = self.register(op.inputs[0])
        bound = tuple(self.register(v) for v in op.inputs[1:])
        self.instrs.append(Instr("partial", (self._new(op.outputs[0]), function, bound)))

    def _tuple(self, op):
        elements = tuple(self.register(v) for v in op.inputs)
        self.instrs.append(Instr("tuple", (self._new(op.outputs[0]), elements)))

    def _tupleget(self, op):
        source, index = op.inputs[0], op.attrs.get_int("index")
        made = self._tuple_op(source)
        if made is not None:
            # An element of a tuple built here is the register it was built from.
            self.registers[id(op.outputs[0])] = self.register(made.inputs[index])
            return
        key = (self.register(source), index)
        if key not in self._elements:        # read each element once
            self._elements[key] = self._new()
            self.instrs.append(Instr("tuple_get", (self._elements[key], *key)))
        self.registers[id(op.outputs[0])] = self._elements[key]

    def _tuple_op(self, var):
        """The Tuple op of this function whose value ``var`` is (directly, or as an element
        of a tuple built here), or None."""
        op = var.producer
        if op is None or op.func is not self.func:
            return None
        if op.type == "Tuple":
            return op
        if op.type == "TupleGet":
            outer = self._tuple_op(op.inputs[0])
            return self._tuple_op(outer.inputs[op.attrs.get_int("index")]) if outer else None
        return None

    def _if(self, op):
        condition = self.register(op.inputs[0])
        captured = tuple(self.register(v) for v in op.inputs[1:])
        closures = []
        for attribute in ("then_branch", "else_branch"):
            graph = self._new()
            self.instrs.append(Instr("push_graph", (graph, op.attrs[attribute])))
            closure = self._new()
            self.instrs.append(Instr("partial", (closure, graph, captured)))
            closures.append(closure)
        chosen = self._new()
        self.instrs.append(Instr("switch", (chosen, condition, *closures)))
        results = tuple(self._new(v) for v in op.outputs)
        self.instrs.append(Instr("call", (results, chosen, ())))


def _used_later(var, segment):
    """True if ``var`` is read outside ``segment`` or is a result of its function."""
    members = set(map(id, segment.ops))
    func = segment.ops[0].func
    return (any(id(c) not in members for c in var.consumers)
            or any(var is r for r in func.results))


def split(flow, func):
    """The ops of ``func`` in topological order, runs of tensor ops gathered into Segments
    and control ops (calls, branches, function values, tuples) between them."""
    items, run = [], []
    for op in flow.order(func):
        if is_control(op):
            if run:
                items.append(Segment("", run))
                run = []
            items.append(op)
        else:
            run.append(op)
    if run:
        items.append(Segment("", run))
    return items
