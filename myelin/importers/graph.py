"""What an importer gives for one input signature, whatever the format it reads (ONNX,
PyTorch): the specialized flow, and how its variables map to the model's inputs and outputs.
:mod:`myelin.importers.compiled` compiles and runs it."""

import dataclasses

from myelin.flow import Flow


@dataclasses.dataclass
class Signature:
    """The name, type and shape of one graph input or output of an imported flow."""

    name: str        # the model's name for it (an ONNX value, a PyTorch placeholder)
    var: str | None  # the flow variable's name (None for an empty output, which has none)
    dtype: str
    shape: tuple


@dataclasses.dataclass
class ImportedGraph:
    """A flow specialized for one input signature, and how its names map to the model's."""

    flow: Flow
    func: str
    inputs: list           # Signature per graph input the flow reads at run time
    outputs: list          # Signature per graph output
    specialized: dict      # graph input name -> the value the flow was specialized on
