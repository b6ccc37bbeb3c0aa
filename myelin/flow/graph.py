"""The flow IR: variables, operations, functions, connectors and blobs in one graph.

A :class:`Flow` owns every object by name. An :class:`Operation` reads input
:class:`Variable` s and writes output variables; the links both ways (``var.producer``,
``var.consumers``) are kept consistent by the methods here, never by callers editing lists.
"""

import enum
import functools
import operator

import numpy as np

from myelin.errors import FlowError, ShapeError
from myelin.flow import attributes, dtypes


class VarFlags(enum.IntFlag):
    """Variable flags with SLING's bit values."""

    NONE = 0
    IN = 1
    OUT = 2
    REF = 4
    LEARNABLE = 8
    UNIQUE = 16
    DYNAMIC = 32
    ROW = 64
    COL = 128
    NOGRADIENT = 256


class OpFlags(enum.IntFlag):
    """Operation flags with SLING's bit values."""

    NONE = 0
    NOGRADIENT = 1


class FuncFlags(enum.IntFlag):
    """Function flags with SLING's bit values."""

    NONE = 0
    TRAINING = 1
    BACKPROP = 2


def _flag_property(bit, doc):
    def get(self):
        return bool(int.__and__(self.flags, bit))     # (an IntFlag's own & costs 20 times more)

    def set(self, on):
        self.flags = (self.flags | bit) if on else (self.flags & ~bit)

    return property(get, set, doc=doc)


def _dimensions(name, shape):
    """``shape`` as a tuple of ints, each a size or -1 (dynamic); ShapeError for anything else,
    such as a named dimension, which myelin does not compile."""
    dims = []
    for d in shape:
        try:
            size = operator.index(d)
        except TypeError:
            size = None
        if size is None or size < -1:
            named = isinstance(d, str)
            raise ShapeError(
                f"variable {name}: dimension {d!r} of shape {list(shape)} is not a size"
                + (": myelin compiles concrete sizes (named dimensions are not implemented); "
                   "give its size, or -1 and flow.batch_size = N" if named else
                   " (an int >= 0, or -1 for a dynamic one)"))
        dims.append(size)
    return tuple(dims)


class Variable:
    """A tensor in the flow: a constant (with ``data``), a learnable global, or a local value.

    ``shape`` is a tuple of ints; -1 marks a dynamic dimension. ``data`` is a NumPy array
    (or None); ``attrs`` maps attribute names to strings.
    """

    def __init__(self, flow, name, dtype="float32", shape=(), data=None):
        self.flow = flow
        self.name = name
        self.aliases = []
        self.dtype = dtypes.canonical(dtype) if dtype else ""
        self.shape = _dimensions(name, shape)
        self.flags = VarFlags.NONE
        self.attrs = attributes.Attributes()
        self.data = None
        self.producer = None
        self.consumers = []
        if data is not None:
            self.set_data(data)

    is_input = _flag_property(VarFlags.IN, "The variable is an input of its function.")
    is_output = _flag_property(VarFlags.OUT, "The variable is an output of its function.")
    ref = _flag_property(VarFlags.REF, "The variable holds a reference (pointer) to a tensor.")
    learnable = _flag_property(VarFlags.LEARNABLE, "A trainable global parameter.")
    unique = _flag_property(VarFlags.UNIQUE, "An input with a single gradient source.")
    dynamic = _flag_property(VarFlags.DYNAMIC, "A tensor whose first dimension is a channel.")
    nogradient = _flag_property(VarFlags.NOGRADIENT, "Excluded from differentiation.")

    @property
    def constant(self):
        """True if the variable has constant data."""
        return self.data is not None

    @property
    def fixed(self):
        """True for constant data that training does not change (not a learnable parameter):
        what the optimizer may fold, pack or read while compiling."""
        return self.constant and not self.learnable

    @property
    def is_global(self):
        """Constants and learnable parameters live outside instances."""
        return self.constant or self.learnable

    @property
    def rank(self):
        return len(self.shape)

    @property
    def elements(self):
        """Number of elements, counting a dynamic dimension as 1."""
        return int(np.prod([1 if d < 0 else d for d in self.shape], dtype=np.int64))

    @property
    def shape_defined(self):
        return all(d >= 0 for d in self.shape)

    def set_data(self, value):
        """Make the variable a constant holding ``value`` (array-like or buffer)."""
        array = np.ascontiguousarray(value)
        self.dtype = dtypes.from_numpy(array.dtype)
        self.shape = tuple(array.shape)
        self.data = array

    def type_string(self):
        """Type and shape as SLING prints them, e.g. ``float32[1x64]``."""
        prefix = "&" if self.ref else ""
        if not self.shape:
            return prefix + self.dtype
        dims = "x".join("?" if d < 0 else str(d) for d in self.shape)
        return f"{prefix}{self.dtype}[{dims}]"

    def __repr__(self):
        # SLING's Python API looks tensors up by repr(key): keep it the plain name.
        return self.name

    def __str__(self):
        return f"{self.name}: {self.type_string()}"


class Operation:
    """An operation of a given ``type`` reading ``inputs`` and writing ``outputs``."""

    def __init__(self, flow, name, type):
        self.flow = flow
        self.name = name
        self.type = type
        self.inputs = []
        self.outputs = []
        self.attrs = attributes.Attributes()
        self.flags = OpFlags.NONE
        self.func = None

    nogradient = _flag_property(OpFlags.NOGRADIENT, "Excluded from differentiation.")

    def add_input(self, var):
        self.inputs.append(var)
        var.consumers.append(self)

    def add_output(self, var):
        if var.producer is not None:
            raise FlowError(f"variable {var.name} already has producer {var.producer.name}; "
                            f"op {self.name} cannot also produce it")
        self.outputs.append(var)
        var.producer = self

    def replace_input(self, old, new):
        """Make every use of ``old`` by this op read ``new`` instead."""
        for i, var in enumerate(self.inputs):
            if var is old:
                self.inputs[i] = new
                old.consumers.remove(self)
                new.consumers.append(self)

    def remove_input(self, index):
        var = self.inputs.pop(index)
        var.consumers.remove(self)

    def replace_output(self, old, new):
        index = self.outputs.index(old)
        if new.producer is not None:
            raise FlowError(f"variable {new.name} already has producer {new.producer.name}")
        old.producer = None
        self.outputs[index] = new
        new.producer = self

    def remove_output(self, var):
        self.outputs.remove(var)
        var.producer = None

    def __repr__(self):
        return f"<Operation {self.name}: {self.type}>"


class Function:
    """A named, ordered list of operations that compiles into one cell; with a signature
    (``params``, ``results``), a function that control-flow ops call."""

    def __init__(self, flow, name):
        self.flow = flow
        self.name = name
        self.ops = []
        self.flags = FuncFlags.NONE
        # The signature of a function that Call and If ops run (see myelin.control): its
        # parameters and results, in order; None for a function compiled as a cell alone.
        self.params = None
        self.results = None

    training = _flag_property(FuncFlags.TRAINING, "Only needed for training.")
    backprop = _flag_property(FuncFlags.BACKPROP, "Build the gradient function when compiling.")

    def add(self, op):
        if op.func is not None and op.func is not self:
            raise FlowError(f"op {op.name} already belongs to function {op.func.name}")
        if op.func is None:
            op.func = self
            self.ops.append(op)

    def variables(self):
        """Every variable read or written by the function's ops, in first-use order."""
        seen = {}
        for op in self.ops:
            for var in op.inputs + op.outputs:
                seen.setdefault(id(var), var)
        return list(seen.values())

    def inputs(self):
        return [v for v in self.variables() if v.is_input and not v.is_global]

    def outputs(self):
        return [v for v in self.variables() if v.is_output and not v.is_global]

    def __repr__(self):
        return f"<Function {self.name}: {len(self.ops)} ops>"


class Connector:
    """Variables in different functions that must share one layout (e.g. RNN state in and out)."""

    def __init__(self, flow, name):
        self.flow = flow
        self.name = name
        self.links = []
        self.flags = 0

    def add(self, var):
        if var not in self.links:
            self.links.append(var)

    def __repr__(self):
        return f"<Connector {self.name}: {len(self.links)} links>"


class Blob:
    """Named opaque data stored in a flow (lexicons, configuration, ...)."""

    def __init__(self, flow, name, type=""):
        self.flow = flow
        self.name = name
        self.type = type
        self.attrs = attributes.Attributes()
        self.data = b""
        self.flags = 0

    def __repr__(self):
        return f"<Blob {self.name}: {self.type}, {len(self.data)} bytes>"


class Mark:
    """The functions, ops and variables a flow has at one point; :meth:`undo` removes those
    added since (they are the newest entries of the flow's dicts), for builders that leave
    the flow as it was when they fail."""

    def __init__(self, flow):
        self.flow = flow
        self.sizes = len(flow.funcs), len(flow.ops), len(flow.vars)

    def undo(self):
        flow = self.flow
        funcs, ops, vars_ = self.sizes
        for op in reversed(list(flow.ops.values())[ops:]):
            flow.delete_op(op)
        for var in reversed(list(flow.vars.values())[vars_:]):
            flow.delete_var(var)
        for name in list(flow.funcs)[funcs:]:
            del flow.funcs[name]


def atomic(method):
    """Make a method of a builder (an object with a ``flow``) all or nothing: if it raises,
    the functions, ops and variables it added to the flow are removed again."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        mark = self.flow.mark()
        try:
            return method(self, *args, **kwargs)
        except Exception:
            mark.undo()
            raise
    return wrapper


class _class_or_instance_method:
    """A method that gets the class and the instance it is called on (None on the class)."""

    def __init__(self, func):
        self.func = func
        functools.update_wrapper(self, func)

    def __get__(self, instance, owner):
        return functools.update_wrapper(functools.partial(self.func, owner, instance), self.func)


class Flow:
    """A graph of variables and operations grouped into functions, plus connectors and blobs.

    Objects are kept in insertion order in ``vars``, ``ops``, ``funcs``, ``cnxs`` and ``blobs``
    (dicts keyed by name). Variables are also found by alias with :meth:`var_named`.
    ``batch_size`` (SLING's ``set_batch_size``) is the size the compiler gives every dynamic
    (-1) dimension; unset (None), a flow with one does not compile.
    """

    def __init__(self):
        self.vars = {}
        self.ops = {}
        self.funcs = {}
        self.cnxs = {}
        self.blobs = {}
        self.flags = 0
        self._aliases = {}
        self._suffixes = {}     # name -> the number to try first for the next one like it
        self.batch_size = None  # the size of every dynamic (-1) dimension, when compiled

    # Variables.
    def var(self, name, dtype="float32", shape=(), data=None):
        """Create a new variable; a name already in use raises FlowError."""
        if name in self.vars or name in self._aliases:
            raise FlowError(f"variable {name} already exists")
        var = Variable(self, name, dtype, shape, data)
        self.vars[name] = var
        return var

    def add_alias(self, var, alias):
        if alias == var.name or alias in var.aliases:
            return
        var.aliases.append(alias)
        self._aliases.setdefault(alias, var)

    def var_named(self, name):
        """The variable with this name or alias, or None."""
        return self.vars.get(name) or self._aliases.get(name)

    def unique_var_name(self, base):
        return self._unique(base, lambda n: n in self.vars or n in self._aliases)

    def rename_var(self, var, new_name):
        if self.var_named(new_name) is not None:
            raise FlowError(f"variable {new_name} already exists")
        del self.vars[var.name]
        var.name = new_name
        self.vars[new_name] = var

    def delete_var(self, var):
        if var.producer is not None or var.consumers:
            raise FlowError(f"variable {var.name} is still in use")
        del self.vars[var.name]
        for alias in var.aliases:
            if self._aliases.get(alias) is var:
                del self._aliases[alias]
        for cnx in self.cnxs.values():
            if var in cnx.links:
                cnx.links.remove(var)

    # Operations.
    def op(self, name, type, func=None, inputs=(), outputs=(), attrs=None):
        """Create a new operation, optionally in ``func`` and with its inputs and outputs."""
        if name in self.ops:
            raise FlowError(f"operation {name} already exists")
        op = Operation(self, name, type)
        self.ops[name] = op
        if func is not None:
            func.add(op)
        for var in inputs:
            op.add_input(var)
        for var in outputs:
            op.add_output(var)
        for key, value in (attrs or {}).items():
            op.attrs[key] = value
        return op

    def unique_op_name(self, base):
        return self._unique(base, lambda n: n in self.ops)

    def delete_op(self, op):
        """Remove an op, unlinking its inputs and outputs (the variables stay)."""
        for var in op.inputs:
            var.consumers.remove(op)
        for var in op.outputs:
            var.producer = None
        op.inputs, op.outputs = [], []
        if op.func is not None:
            op.func.ops.remove(op)
            op.func = None
        del self.ops[op.name]

    # Functions, connectors, blobs.
    def func(self, name):
        """The function with this name, created if it does not exist (as SLING's Python API)."""
        if name not in self.funcs:
            self.funcs[name] = Function(self, name)
        return self.funcs[name]

    def unique_func_name(self, base):
        return self._unique(base, lambda n: n in self.funcs)

    def mark(self):
        """A :class:`Mark` of the flow as it is now, to remove what is added after it."""
        return Mark(self)

    def cnx(self, name, links=()):
        if name in self.cnxs:
            raise FlowError(f"connector {name} already exists")
        cnx = Connector(self, name)
        for var in links:
            cnx.add(var)
        self.cnxs[name] = cnx
        return cnx

    def blob(self, name, type=""):
        if name in self.blobs:
            raise FlowError(f"blob {name} already exists")
        blob = Blob(self, name, type)
        self.blobs[name] = blob
        return blob

    # Graph-wide helpers.
    def infer_inputs_and_outputs(self):
        """Mark variables IN and OUT as SLING does (flags are only ever added, never cleared).

        Connector-linked ref variables with both a producer and consumers become IN and OUT. Then,
        for every non-global variable, an ``input``/``output`` attribute on the producer decides;
        otherwise a variable with no producer (or one whose producer has no inputs) is an input
        and a variable with no consumers is an output.
        """
        for cnx in self.cnxs.values():
            for var in cnx.links:
                if var.ref and var.producer is not None and var.consumers:
                    var.flags |= VarFlags.IN | VarFlags.OUT
        for var in self.vars.values():
            if var.is_global:
                continue
            producer = var.producer
            if producer is not None and ("input" in producer.attrs or "output" in producer.attrs):
                if producer.attrs.get_bool("input", False):
                    var.flags |= VarFlags.IN
                if producer.attrs.get_bool("output", False):
                    var.flags |= VarFlags.OUT
                continue
            if producer is None or not producer.inputs:
                var.flags |= VarFlags.IN
            if not var.consumers:
                var.flags |= VarFlags.OUT

    def order(self, func):
        """The ops of ``func`` in a topological order (stable: keeps the given order where free).

        Raises FlowError if the ops form a cycle.
        """
        members = set(map(id, func.ops))
        remaining = {}
        for op in func.ops:
            remaining[id(op)] = sum(1 for v in op.inputs
                                    if v.producer is not None and id(v.producer) in members
                                    and v.producer is not op)
        ready = [op for op in func.ops if remaining[id(op)] == 0]
        ordered, position = [], {id(op): i for i, op in enumerate(func.ops)}
        import heapq
        heap = [(position[id(op)], op.name, op) for op in ready]
        heapq.heapify(heap)
        while heap:
            _, _, op = heapq.heappop(heap)
            ordered.append(op)
            for var in op.outputs:
                # A consumer reading ``var`` twice is listed twice: count it once.
                for consumer in {id(c): c for c in var.consumers}.values():
                    if id(consumer) in members and consumer is not op:
                        remaining[id(consumer)] -= sum(1 for v in consumer.inputs if v is var)
                        if remaining[id(consumer)] == 0:
                            heapq.heappush(heap, (position[id(consumer)], consumer.name, consumer))
        if len(ordered) != len(func.ops):
            stuck = sorted(op.name for op in func.ops if remaining[id(op)] > 0)
            raise FlowError(f"function {func.name} has a cycle through ops {', '.join(stuck)}")
        return ordered

    def sort(self):
        """Put the ops of every function in topological order."""
        for func in self.funcs.values():
            func.ops = self.order(func)

    def copy(self):
        """A structural copy of the flow that shares the constant arrays (``data``) with it.

        The compiler optimizes a copy, so the caller's flow stays as it was built. Passes
        replace constant data with new arrays; they never write into a shared one.
        """
        other = Flow()
        other.flags, other.batch_size = self.flags, self.batch_size
        vars_ = {}
        for name, var in self.vars.items():
            copy = other.var(name, var.dtype, var.shape)
            copy.data, copy.flags = var.data, var.flags
            copy.attrs.update(var.attrs)
            for alias in var.aliases:
                other.add_alias(copy, alias)
            vars_[id(var)] = copy
        for fname, func in self.funcs.items():
            other.func(fname).flags = func.flags
        for name, op in self.ops.items():
            func = other.funcs[op.func.name] if op.func is not None else None
            copy = other.op(name, op.type, func, [vars_[id(v)] for v in op.inputs],
                            [vars_[id(v)] for v in op.outputs], op.attrs)
            copy.flags = op.flags
        for fname, func in self.funcs.items():   # keep each function's op order
            copy = other.funcs[fname]
            copy.ops = [other.ops[op.name] for op in func.ops]
            if func.results is not None:
                copy.params = [vars_[id(v)] for v in func.params]
                copy.results = [vars_[id(v)] for v in func.results]
        for name, cnx in self.cnxs.items():
            other.cnx(name, [vars_[id(v)] for v in cnx.links]).flags = cnx.flags
        for name, blob in self.blobs.items():
            copy = other.blob(name, blob.type)
            copy.data, copy.flags = blob.data, blob.flags
            copy.attrs.update(blob.attrs)
        return other

    # Flow files (myelin.flow.fileformat).
    @_class_or_instance_method
    def load(cls, self, source):
        """Read a .flow file (a path, bytes or a binary file object).

        ``Flow.load(source)`` returns a new flow; ``flow.load(source)`` loads into ``flow``,
        which must be empty (else FlowError), and returns it.
        """
        from myelin.flow import fileformat
        return fileformat.load(source, cls() if self is None else self)

    @classmethod
    def from_bytes(cls, data):
        """A new flow read from the bytes of a .flow file."""
        from myelin.flow import fileformat
        return fileformat.from_bytes(data, cls())

    def save(self, path, version=6):
        """Write the flow as a .flow file of ``version`` (3 to 6) to a path or binary file."""
        from myelin.flow import fileformat
        fileformat.save(self, path, version)

    def to_bytes(self, version=6):
        """The flow as the bytes of a .flow file of ``version`` (3 to 6)."""
        from myelin.flow import fileformat
        return fileformat.to_bytes(self, version)

    def __str__(self):
        from myelin.flow.dump import to_text
        return to_text(self)

    def to_dot(self, title=None):
        """GraphViz DOT text of the flow (see :mod:`myelin.flow.dot`)."""
        from myelin.flow.dot import to_dot
        return to_dot(self, title)

    def _unique(self, base, taken):
        """``base``, or ``base_N`` with the first N not taken after those made before (so
        many names of one base cost no search through all of them)."""
        if not taken(base):
            return base
        n = self._suffixes.get(base, 1)
        while taken(f"{base}_{n}"):
            n += 1
        self._suffixes[base] = n + 1
        return f"{base}_{n}"
