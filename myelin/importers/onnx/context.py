"""What a converter sees of the ONNX node it converts: inputs, attributes, constant values,
and a way to add myelin ops (folded at once when all their inputs are constants)."""

import copy

import numpy as np

from myelin.errors import UnsupportedTypeError
from myelin.importers.context import ConverterContext

_REQUIRED = object()


class Sequence(tuple):
    """An ONNX sequence value: the variables of its tensors, in order. Positions and lengths
    are known at import time, so sequence ops only rearrange these variables."""


class NeedsInputValues(Exception):
    """A converter needs the value of a tensor computed from these graph inputs (a shape,
    axes, pads given as an input): the importer specializes the model on their values."""

    def __init__(self, names):
        self.names = frozenset(names)
        super().__init__(f"needs the values of graph inputs {sorted(self.names)}")


class NodeContext(ConverterContext):
    """One ONNX node during conversion (building ops: :class:`ConverterContext`).

    ``opset`` is the model's ai.onnx opset version; ``attrs`` the node's attributes as Python
    values; ``b`` the flow Builder of the imported function.
    """

    def __init__(self, importer, node, attrs, inputs):
        self.importer = importer
        self.node = node
        self.attrs = attrs
        self.opset = importer.opset
        self.b = importer.builder
        self._inputs = inputs
        self._op_type = node.op_type

    @property
    def name(self):
        return self.node.name or self.node.output[0]

    @property
    def op_type(self):
        return self._op_type

    @property
    def num_outputs(self):
        """The number of outputs the node declares (trailing optional ones may be "")."""
        return len(self.node.output)

    # Inputs.
    def __len__(self):
        return len(self._inputs)

    def has(self, index):
        """True if optional input ``index`` is given."""
        return index < len(self._inputs) and self._inputs[index] is not None

    def input(self, index):
        """The Variable of input ``index``; an absent required input raises ShapeError, a
        sequence UnsupportedTypeError."""
        if not self.has(index):
            raise self.error(f"input {index} is missing")
        return self._tensor(index)

    @property
    def inputs(self):
        """The given inputs (absent optional ones left out)."""
        return [self._tensor(i) for i, var in enumerate(self._inputs) if var is not None]

    def sequence(self, index):
        """The :class:`Sequence` of input ``index``; a tensor raises ShapeError."""
        value = self._inputs[index] if index < len(self._inputs) else None
        if not isinstance(value, Sequence):
            raise self.error(f"input {index} must be a sequence, not "
                             f"{'missing' if value is None else 'a tensor'}")
        return value

    def _tensor(self, index):
        value = self._inputs[index]
        if isinstance(value, Sequence):
            raise UnsupportedTypeError(f"node {self.name} ({self.op_type}): input {index} is a "
                                       f"sequence, which myelin supports only in sequence ops")
        return value

    def value(self, index, default=None):
        """The constant value of input ``index`` as a NumPy array (``default`` if absent).

        A value computed from graph inputs makes the importer specialize on those inputs'
        values (NeedsInputValues); one computed from run-time results is a ShapeError.
        """
        if not self.has(index):
            return default
        var = self._tensor(index)
        if var.data is None:
            sources = self.importer.graph_inputs_feeding(var)
            if sources:
                raise NeedsInputValues(sources)
            raise self.error(f"input {index} ({var.name}) must be known at compile time")
        return var.data

    def ints(self, index, default=None):
        """The constant int vector input ``index`` as a list (``default`` if absent)."""
        value = self._vector(index)
        return default if value is None else [int(v) for v in value]

    def floats(self, index, default=None):
        """The constant vector input ``index`` as a list of floats (``default`` if absent)."""
        value = self._vector(index)
        return default if value is None else [float(v) for v in value]

    def scalar(self, index, default=None):
        """The one element of constant input ``index`` (a NumPy scalar; ``default`` if
        absent); ShapeError unless it has exactly one element."""
        value = self.value(index)
        if value is None:
            return default
        if np.size(value) != 1:
            raise self.error(f"input {index} must have one element, not shape "
                             f"{list(np.shape(value))}")
        return np.asarray(value).reshape(-1)[0]

    def _vector(self, index):
        value = self.value(index)
        if value is not None and np.ndim(value) > 1:
            raise self.error(f"input {index} must be a vector, not of shape "
                             f"{list(np.shape(value))}")
        return None if value is None else np.asarray(value).reshape(-1)

    def axis(self, axis, rank, past_end=False):
        """``axis`` of a tensor of ``rank`` axes, counted from the end when negative;
        ShapeError unless -rank <= axis < rank (<= rank with ``past_end``: the position
        after the last axis, as Flatten's axis may be)."""
        axis = int(axis)
        if not -rank <= axis < rank + past_end:
            raise self.error(f"axis {axis} is out of range for rank {rank}")
        return axis + rank if axis < 0 else axis

    def legacy_broadcast(self):
        """Before opset 7, an element-wise op with two inputs broadcast input 1 only with the
        attribute ``broadcast`` set, aligned with input 0 at attribute ``axis`` if given
        (else at the end, as NumPy does): input 1 is reshaped with trailing ones so that
        NumPy's broadcasting does the same. Nodes without both attributes are left as
        they are."""
        if not {"broadcast", "axis"} <= self.attrs.keys() or not self.attrs["broadcast"] \
                or not (self.has(0) and self.has(1)):
            return
        a, b = self.input(0), self.input(1)
        axis = self.axis(self.attrs["axis"], a.rank)
        if axis + b.rank > a.rank:
            raise self.error(f"shape {list(b.shape)} does not fit shape {list(a.shape)} from "
                             f"axis {axis}")
        self._inputs[1] = self.reshape(b, b.shape + (1,) * (a.rank - axis - b.rank))

    def attr(self, name, default=_REQUIRED):
        """The value of attribute ``name``; a missing required attribute raises ShapeError."""
        if name in self.attrs:
            return self.attrs[name]
        if default is _REQUIRED:
            raise self.error(f"attribute {name} is required")
        return default

    def subgraph(self, attribute, builder, inputs):
        """Import the graph of attribute ``attribute`` (an If branch, a Loop or Scan body)
        into the function of ``builder``, its inputs bound to the variables ``inputs``; names
        of this node's graph and the graphs around it are visible in it. Returns the
        variables of its outputs."""
        graph = self.attr(attribute)
        return self.importer.subgraph(graph, builder, list(inputs),
                                      f"node {self.name} ({self.op_type}) {attribute}")

    def as_op(self, op_type, inputs, attrs, opset=None):
        """This node's context as an ai.onnx ``op_type`` node with other inputs (variables,
        None for absent ones) and attributes, for its converter to convert (a quantized op
        through its float op); ``opset`` replaces the opset whose form that op takes."""
        other = copy.copy(self)
        other._op_type, other._inputs, other.attrs = op_type, list(inputs), dict(attrs)
        if opset is not None:
            other.opset = opset
        return other

    def using(self, builder):
        """This node's context adding ops to the function of ``builder`` (a branch or loop
        function built for this node) instead of the graph's own."""
        other = copy.copy(self)
        other.b = builder
        return other
