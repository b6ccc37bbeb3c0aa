"""PyTorch front end: ``torch.export`` programs in, flows and compiled callables out.

``compile(module, example_inputs)`` gives a :class:`TorchModel`, called as the module is
(tensors in, tensors out, no copies), compiled per input signature; ``import_module(module,
example_inputs)`` gives the :class:`ImportedProgram` (flow and name maps) of one signature;
``backend`` is ``torch.compile``'s backend ``"myelin"`` (:mod:`.dynamo`). ``supported_ops()``
lists the ATen ops that convert. Needs PyTorch (``pip install myelin[torch]``).
"""

from myelin.importers.torch.converters import supported as supported_ops
from myelin.importers.torch.dynamo import backend
from myelin.importers.torch.exporting import export
from myelin.importers.torch.importer import ImportedProgram, check_supported, import_program
from myelin.importers.torch.model import TorchModel


def compile(module, example_inputs=None, example_kwargs=None, *, bind_parameters=False,
            precision="float32", max_signatures=8, **compiler_options):
    """``module`` (an ``nn.Module`` or a function of tensors) compiled by myelin: a
    :class:`TorchModel` called as the module is, compiled at once for ``example_inputs`` (a
    tuple of arguments, or one tensor) and ``example_kwargs`` when given, and for each new
    input signature it is called with. ``bind_parameters``: parameters and buffers are read
    at every call rather than compiled in as constants. ``precision``: "float32" computes in
    the module's own types, "float64" computes its float32 values in float64 (results stay
    float32). ``compiler_options`` go to :class:`myelin.Compiler` (``threads``,
    ``opt_level``, ...)."""
    return TorchModel(module, example_inputs, example_kwargs, bind_parameters=bind_parameters,
                      precision=precision, max_signatures=max_signatures, **compiler_options)


def import_module(module, example_inputs, example_kwargs=None, bind_parameters=False):
    """The :class:`ImportedProgram` of ``module`` exported for ``example_inputs``: the flow
    and how its variables map to the module's inputs and results, not compiled."""
    args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else \
        (example_inputs,)
    return import_program(export(module, args, example_kwargs),
                          bind_parameters=bind_parameters)


__all__ = ["ImportedProgram", "TorchModel", "backend", "check_supported", "compile", "export",
           "import_module", "import_program", "supported_ops"]
