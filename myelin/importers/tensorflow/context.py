"""What a converter sees of the TensorFlow node it converts: data inputs, attributes (decoded
on first use), constant values, and the building methods of
:class:`~myelin.importers.context.ConverterContext`."""

import numpy as np

from myelin.importers.context import ConverterContext
from myelin.importers.tensorflow import graphdef

_REQUIRED = object()


class Resource:
    """The value of a variable handle (VarHandleOp, a captured resource of a TF2 function):
    the flow variable holding the variable's value, which ReadVariableOp reads."""

    def __init__(self, var):
        self.var = var


class NodeContext(ConverterContext):
    """One NodeDef during conversion: ``inputs`` are the variables of its data inputs (control
    inputs are left out), ``importer`` the graph importer (for variable values)."""

    def __init__(self, importer, node, inputs):
        self.importer = importer
        self.node = node
        self.b = importer.builder
        self.inputs = inputs
        self._attrs = {}

    @property
    def name(self):
        return self.node.name

    @property
    def op_type(self):
        return self.node.op

    # Inputs.
    def input(self, index):
        """The variable of data input ``index``."""
        if index >= len(self.inputs):
            raise self.error(f"input {index} is missing")
        return self.inputs[index]

    def value(self, index):
        """The value of input ``index`` as a NumPy array; it must be known at import time."""
        var = self.input(index)
        if var.data is None or var.learnable:
            raise self.error(f"input {index} ({var.name}) must be known at import time")
        return var.data

    def ints(self, index):
        """The constant int input ``index`` as a list (a scalar as a one-element list)."""
        return [int(v) for v in np.asarray(self.value(index)).reshape(-1)]

    # Attributes.
    def attr(self, name, default=_REQUIRED):
        """The decoded value of attribute ``name``; a missing required one raises ShapeError."""
        if name not in self._attrs:
            if name not in self.node.attr:
                if default is _REQUIRED:
                    raise self.error(f"attribute {name} is required")
                return default
            self._attrs[name] = graphdef.attribute(self.node.attr[name], f"node {self.name}")
        return self._attrs[name]

    def dtype(self, name="T", default=_REQUIRED):
        """The myelin type of type attribute ``name`` (``default`` if absent);
        UnsupportedTypeError for a type myelin lacks."""
        return graphdef.myelin_type(self.attr(name, default), f"node {self.name} "
                                                              f"({self.op_type})")
