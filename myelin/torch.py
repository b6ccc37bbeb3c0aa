"""``myelin.torch``: the PyTorch front end's public API (see :mod:`myelin.importers.torch`).

``myelin.torch.compile(module, example_inputs)`` compiles a module with myelin;
``torch.compile(module, backend="myelin")`` does the same through Dynamo (the backend is
registered by the package's entry point, no import needed).
"""

from myelin.importers.torch import (ImportedProgram, TorchModel, backend, check_supported,
                                    compile, export, import_module, import_program,
                                    supported_ops)

__all__ = ["ImportedProgram", "TorchModel", "backend", "check_supported", "compile", "export",
           "import_module", "import_program", "supported_ops"]
