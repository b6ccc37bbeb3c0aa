"""``myelin.tf``: the TensorFlow importer's public API (see :mod:`myelin.importers.tensorflow`)."""

from myelin.importers.tensorflow import (Extractor, ImportedGraph, check_supported,
                                         import_function, import_graph, import_saved_model,
                                         load_graph, supported_ops)

__all__ = ["Extractor", "ImportedGraph", "check_supported", "import_function", "import_graph",
           "import_saved_model", "load_graph", "supported_ops"]
