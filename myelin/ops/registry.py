"""The op registry: one :class:`OpDef` per op type, the single place for facts about an op.

An entry holds the op's attributes, its shape and type rule (``infer``), its fusion kind and
its float64 NumPy reference implementation (``reference``), and for element-wise ops the
facts the other layers derive their tables from: the Builder method (:func:`helper`), the
names the importers convert one to one (``names``), the inputs tests draw (``domain``), and
for composite ops the expansion into other ops that back ends lower instead (:func:`expand`).
Passes, the interpreter, the Builder, the importers and the back ends look ops up here instead
of keeping tables of their own. User code registers custom ops with :func:`register`.
"""

import dataclasses
import enum
import re
from typing import Callable

import numpy as np

from myelin.errors import ShapeError, UnsupportedOpError
from myelin.flow.attributes import Attributes


class Kind(enum.IntEnum):
    """How an op fuses with its neighbours (NNVM's op pattern kinds; lower fuses more freely)."""

    ELEMWISE = 0           # out[i] = f(in[i]) over inputs of the output's shape
    BROADCAST = 1          # element-wise with NumPy broadcasting of inputs
    INJECTIVE = 2          # each output element reads one input element (transpose, slice, ...)
    REDUCTION = 3          # reduces over some axes (sum, max, ...)
    OUT_ELEMWISE_FUSABLE = 4  # complex op that can absorb an element-wise epilogue (matmul)
    OPAQUE = 8             # stands alone


@dataclasses.dataclass
class TensorType:
    """The element type and shape of a value: what ``infer`` reads and returns."""

    dtype: str
    shape: tuple

    def __post_init__(self):
        self.shape = tuple(int(d) for d in self.shape)


@dataclasses.dataclass
class OpDef:
    """Everything myelin knows about one op type.

    ``infer(op)`` returns a list of :class:`TensorType`, one per output, from ``op.inputs``
    (variables with ``dtype``/``shape``, and ``data`` for constants) and ``op.attrs``; it
    raises ShapeError naming the op and the offending shapes. ``reference(op, inputs)`` maps a
    list of NumPy arrays (floats as float64) to a list of output arrays. ``attrs`` maps each
    attribute the op understands to its default value (None: required or no default).
    ``inputs`` is (min, max) input count, max None for any number. ``outputs`` is the output
    count, None when it depends on the op (Split). ``gradient(g)`` is the op's gradient rule
    (None: the op is not differentiable): it adds the adjoint terms of the op's inputs through
    ``g``, a :class:`myelin.autodiff.context.OpContext`.

    ``names`` maps a front end (``"onnx"``, ``"tensorflow"``, ``"torch"``) to the names of its
    ops that are this op exactly, on the same inputs and attributes (its importer converts
    them one to one; ATen names without ``aten.``). ``helper`` is the name of the Builder
    method that makes the op ("" derives it, :func:`helper`; None: no method). ``domain`` is
    the (low, high) of the real inputs where the op is defined and smooth (one such pair per
    input for a binary op): tests draw from it. ``expansion(e, *args)``, for a composite op,
    builds its value from other ops through an :class:`Expander` ``e`` (which also reads the
    op's attributes); a back end that has no lowering of its own for the op lowers the
    expansion (:func:`expand`). ``recipe_operands(op)``, for an op that applies a recipe
    (attribute ``expr``, :mod:`myelin.ops.recipe`), lists what each ``%k`` of the recipe
    reads: the position of an input of the op, or None for a value the op computes (a
    product's ``%0``).
    """

    type: str
    kind: Kind
    infer: Callable
    reference: Callable
    attrs: dict = dataclasses.field(default_factory=dict)
    inputs: tuple = (1, 1)
    outputs: int = 1
    doc: str = ""
    gradient: Callable | None = None
    names: dict = dataclasses.field(default_factory=dict)
    helper: str | None = ""
    domain: tuple | None = None
    expansion: Callable | None = None
    recipe_operands: Callable | None = None


_REGISTRY: dict[str, OpDef] = {}


def register(opdef, replace=False):
    """Add an op definition. Re-registering a type raises unless ``replace`` is set."""
    if opdef.type in _REGISTRY and not replace:
        raise ValueError(f"op type {opdef.type} is already registered")
    _REGISTRY[opdef.type] = opdef
    return opdef


def unregister(op_type):
    """Remove an op definition (for tests and user code that registered a temporary op)."""
    _REGISTRY.pop(op_type, None)


def lookup(op_type):
    """The definition of an op type; raises UnsupportedOpError if there is none."""
    try:
        return _REGISTRY[op_type]
    except KeyError:
        raise UnsupportedOpError(f"unknown op type {op_type}", [op_type]) from None


def find(op_type):
    """The definition of an op type, or None."""
    return _REGISTRY.get(op_type)


def types():
    """All registered op type names."""
    return sorted(_REGISTRY)


def named(front_end):
    """{name: op type} of the ops ``front_end`` (a key of :attr:`OpDef.names`) has one to one."""
    return {name: opdef.type for opdef in _REGISTRY.values()
            for name in opdef.names.get(front_end, ())}


def helper(opdef):
    """The name of the Builder method that makes ``opdef``'s op, or None: its ``helper``, or
    for an element-wise op of one or two inputs and for a reduction, the op type in
    snake_case (``LogSigmoid``: ``log_sigmoid``)."""
    if opdef.helper is None or opdef.helper:
        return opdef.helper
    fixed = opdef.inputs in ((1, 1), (2, 2)) and opdef.kind in (Kind.ELEMWISE, Kind.BROADCAST)
    if fixed or opdef.kind == Kind.REDUCTION:
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", opdef.type).lower()
    return None


class Expander:
    """What an expansion builds an ``op_type`` op with attributes ``attrs`` (a flow
    ``Attributes``) from: ``op(type, *args)`` applies an op, ``const(value)`` makes a constant
    of the op's type and ``attribute(name)`` reads an attribute (as :func:`attribute`); a back
    end's subclass lowers ``op`` and ``const`` to its code."""

    def __init__(self, op_type, attrs):
        self.op_type = op_type
        self.attrs = attrs

    def op(self, op_type, *args):
        raise NotImplementedError

    def const(self, value):
        raise NotImplementedError

    def attribute(self, name):
        return _typed(self.op_type, self.attrs, name)


def expand(expander, args):
    """The value of the composite op ``expander.op_type`` applied to ``args``, built by
    ``expander`` (:class:`Expander`) from its registry entry's expansion; None if it has
    none."""
    opdef = find(expander.op_type)
    if opdef is None or opdef.expansion is None:
        return None
    return opdef.expansion(expander, *args)


class _Uses(Expander):
    """An expander that records the op types an expansion applies."""

    def __init__(self, op_type):
        super().__init__(op_type, Attributes())
        self.types = set()

    def op(self, op_type, *args):
        self.types.add(op_type)
        return op_type

    def const(self, value):
        return value


def expansion_uses(op_type):
    """The op types the expansion of ``op_type`` applies (with its default attributes), or
    None if it has no expansion."""
    uses = _Uses(op_type)
    opdef = find(op_type)
    if opdef is None or expand(uses, [op_type] * opdef.inputs[0]) is None:
        return None
    return uses.types


def check_supported(ops):
    """Raise UnsupportedOpError naming every op in ``ops`` whose type has no definition.

    The error's ``ops`` lists the names of those ops in the given order; the message groups
    them by type.
    """
    unknown = [op for op in ops if op.type not in _REGISTRY]
    if unknown:
        by_type = {}
        for op in unknown:
            by_type.setdefault(op.type, []).append(op.name)
        listed = "; ".join(f"{t} ({', '.join(names)})" for t, names in by_type.items())
        raise UnsupportedOpError(f"unsupported op types: {listed}", [op.name for op in unknown])


def attribute(op, name):
    """The value of attribute ``name`` of ``op``, typed like its default in the op's definition.

    An absent attribute reads as that default. Defaults that are bool, int, float or str select
    the parser; a None default gives the raw string (or None when absent).
    """
    return _typed(op.type, op.attrs, name)


def _typed(op_type, attrs, name):
    """Attribute ``name`` of an ``op_type`` op with attributes ``attrs`` (see attribute)."""
    default = lookup(op_type).attrs[name]
    if isinstance(default, bool):
        return attrs.get_bool(name, default)
    if isinstance(default, int):
        return attrs.get_int(name, default)
    if isinstance(default, float):
        return attrs.get_float(name, default)
    return attrs.get_str(name, default)


def arity_problem(op, opdef, outputs=True):
    """What is wrong with the number of inputs of ``op`` by its definition, and with its
    number of outputs where the definition fixes it (``outputs``); None if nothing."""
    low, high = opdef.inputs
    n = len(op.inputs)
    if n < low or (high is not None and n > high):
        wanted = f"{low}" if low == high else f"{low} to {high if high is not None else 'any'}"
        return f"op {op.name} ({op.type}) takes {wanted} inputs, got {n}"
    if outputs and opdef.outputs is not None and len(op.outputs) != opdef.outputs:
        return f"op {op.name} ({op.type}) gives {opdef.outputs} outputs, has {len(op.outputs)}"
    return None


def check_arity(op, opdef):
    """Raise ShapeError if ``op`` has an input count its definition does not allow."""
    problem = arity_problem(op, opdef, outputs=False)
    if problem:
        raise ShapeError(problem)


def infer(op):
    """Output types of ``op`` from its registry entry (checks the input count first)."""
    opdef = lookup(op.type)
    check_arity(op, opdef)
    return opdef.infer(op)


def check_outputs(op, types):
    """Raise ShapeError unless ``op`` has one output per type in ``types`` (what its rule
    gave)."""
    if len(op.outputs) != len(types):
        raise ShapeError(f"op {op.name} ({op.type}) gives {len(types)} outputs, has "
                         f"{len(op.outputs)}")


def broadcast_shapes(op, *shapes):
    """NumPy broadcasting of ``shapes``; -1 (dynamic) matches anything. Errors name ``op``."""
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        sizes = {d for d in dims if d != 1}
        if len(sizes - {-1}) > 1:
            listed = " and ".join(str(list(s)) for s in shapes)
            raise ShapeError(f"op {op.name} ({op.type}): shapes {listed} do not broadcast")
        concrete = sizes - {-1}
        result.append(concrete.pop() if concrete else (-1 if -1 in sizes else 1))
    return tuple(result)


def as_float64(array):
    """The array as the reference computes it: floats widened to float64, others unchanged."""
    array = np.asarray(array)
    if array.dtype.kind == "f":
        return array.astype(np.float64)
    return array
