"""ONNX import: models in, flows and compiled models out.

``load(model)`` gives an :class:`OnnxModel` that compiles on first run (or at once, given
``input_shapes``) and caches compiled code per input signature; ``import_model(model, shapes)``
gives the flow for one signature. ``supported_ops()`` lists the ONNX op types that convert;
``localize(model, feeds)`` finds the first node whose value differs from ONNX Runtime's.
Needs the ``onnx`` package (``pip install myelin[onnx]``).
"""

from myelin.importers.onnx.converters import supported as supported_ops
from myelin.importers.onnx.importer import ImportedGraph, check_supported, import_graph
from myelin.importers.onnx.compare import localize
from myelin.importers.onnx.model import OnnxModel
from myelin.importers.onnx.proto import load as load_proto


def load(model, input_shapes=None, **options):
    """An :class:`OnnxModel` for ``model`` (a path, bytes or ModelProto); ``options`` are
    those of :class:`OnnxModel` (``base_dir``, ``max_signatures``) and of the compiler."""
    return OnnxModel(model, input_shapes, **options)


def import_model(model, shapes=None, values=None, base_dir=None):
    """The :class:`ImportedGraph` (flow and name maps) of ``model`` for the given input
    shapes and values; ``base_dir`` holds the files of its external data (by default the
    folder of a path; required for bytes or a ModelProto that has external data)."""
    return import_graph(load_proto(model, base_dir), shapes, values)


__all__ = ["ImportedGraph", "OnnxModel", "check_supported", "import_model", "load",
           "localize", "supported_ops"]
