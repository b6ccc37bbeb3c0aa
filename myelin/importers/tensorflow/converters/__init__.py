"""The table of TensorFlow op converters: one function per TensorFlow op type.

A converter takes a :class:`~myelin.importers.tensorflow.context.NodeContext` and returns the
variable (or list of variables) of the node's outputs, built from myelin ops. Importing this
package registers every converter (each module below covers one group of ops).
"""

_CONVERTERS = {}


def converter(*op_types):
    """Decorator registering a function as the converter of ``op_types``."""
    def register(fn):
        for op_type in op_types:
            if op_type in _CONVERTERS:
                raise ValueError(f"TensorFlow op {op_type} already has a converter")
            _CONVERTERS[op_type] = fn
        return fn
    return register


def find(op_type):
    """The converter of ``op_type``, or None."""
    return _CONVERTERS.get(op_type)


def supported():
    """The TensorFlow op types that have a converter."""
    return sorted(_CONVERTERS)


from myelin.importers.tensorflow.converters import (  # noqa: E402,F401
    array, math, nn, reduce, variables)
