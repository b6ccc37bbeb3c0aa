"""An ONNX model compiled for one input signature: :mod:`myelin.importers.compiled`, which
every importer's compiled models share."""

from myelin.importers.compiled import (Compiled, CompiledCell, CompiledProgram,  # noqa: F401
                                       _fits)
