"""The table of ONNX op converters: one function per ONNX op type (all opset versions).

A converter takes a :class:`~myelin.importers.onnx.context.NodeContext` and returns the
variable (or list of variables) of the node's outputs, built from myelin ops. Behaviour that
changed between opset versions is chosen by ``ctx.opset``. Importing this package registers
every converter (each module below covers one group of ops).
"""

_CONVERTERS = {}
_DOMAINS = ("", "ai.onnx")


def converter(*op_types):
    """Decorator registering a function as the converter of ``op_types``."""
    def register(fn):
        for op_type in op_types:
            if op_type in _CONVERTERS:
                raise ValueError(f"ONNX op {op_type} already has a converter")
            _CONVERTERS[op_type] = fn
        return fn
    return register


def find(op_type, domain=""):
    """The converter of ``op_type`` in ``domain``, or None."""
    if domain not in _DOMAINS:
        return None
    return _CONVERTERS.get(op_type)


def supported():
    """The ONNX op types that have a converter."""
    return sorted(_CONVERTERS)


from myelin.importers.onnx.converters import (  # noqa: E402,F401
    activations, array, control, dynamic, einsum, image, indexing, losses, math, nn, quantize,
    recurrent, reduce, resize, roi, sampling, scan, sequence, transformer, windows)
