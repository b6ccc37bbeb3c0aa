"""``myelin.onnx``: the ONNX importer's public API (see :mod:`myelin.importers.onnx`)."""

from myelin.importers.onnx import (ImportedGraph, OnnxModel, check_supported, import_model,
                                   load, localize, supported_ops)

__all__ = ["ImportedGraph", "OnnxModel", "check_supported", "import_model", "load",
           "localize", "supported_ops"]
