"""``torch.compile(model, backend="myelin")``: the Dynamo backend.

The package registers :func:`backend` in the ``torch_dynamo_backends`` entry-point group
(pyproject.toml), which PyTorch reads when a backend name it does not know is asked for, so
``backend="myelin"`` works after ``pip install myelin`` with no import. Dynamo hands over each
graph it captured (graph breaks run in eager PyTorch between them, as always) with example
arguments; each graph becomes a :class:`~myelin.importers.torch.model.TorchModel`: exported,
imported and compiled for the signature it is called with, recompiled per signature. The
parameters and buffers among the graph's arguments (Dynamo marks them as static inputs) are
constants of the flow unless ``bind_parameters`` is set.

``torch.compile(model, backend="myelin", options={...})`` takes:

* ``opt_level`` (0 to 3), ``threads``, and any other :class:`myelin.Compiler` option;
* ``precision``: "float32" (default: the model's own types) or "float64" (every float32 value
  computed in float64, the results given back in float32: a check of how much float32's
  rounding moves them);
* ``bind_parameters`` (default False), ``max_signatures`` (8);
* ``fallback`` (default True): a graph with ops myelin cannot compile runs in eager PyTorch,
  with a warning listing every such op; False raises the UnsupportedOpError instead.

Inference only: a graph called while autograd records (grad mode on, parameters that require
grad) gives results whose backward raises UnsupportedOpError; train with another backend.
"""

import logging
import warnings

import torch

from myelin.errors import InputError, MyelinError
from myelin.importers.torch.model import TorchModel

log = logging.getLogger("myelin.torch")

_OPTIONS = {"bind_parameters", "max_signatures", "fallback"}
PRECISIONS = ("float32", "float64")


def options_of(options):
    """(model options, compiler options, fallback) from ``torch.compile``'s ``options``;
    InputError for a precision myelin does not compute in."""
    options = dict(options or {})
    fallback = bool(options.pop("fallback", True))
    precision = options.get("precision", "float32")
    if precision not in PRECISIONS:
        raise InputError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    model = {name: options.pop(name) for name in list(options) if name in _OPTIONS}
    model["precision"] = options.pop("precision", "float32")
    return model, options, fallback


def backend(gm, example_inputs, options=None, mode=None):
    """Compile the Dynamo graph ``gm`` with myelin; returns the callable Dynamo calls with
    the graph's arguments. ``options`` as ``torch.compile(..., options=...)`` gives them;
    ``mode`` is accepted and ignored (myelin has one mode)."""
    model_options, compiler_options, fallback = options_of(options)
    frozen = {}
    if not model_options.get("bind_parameters"):
        frozen = {i: t for i, t in enumerate(example_inputs) if isinstance(t, torch.Tensor)
                  and getattr(t, "_dynamo_static_input_type", None) is not None}
    model = TorchModel(gm, frozen=frozen, **model_options, **compiler_options)
    compiled = _Graph(model, gm, fallback)
    if _concrete(example_inputs):
        try:
            model._lookup(tuple(example_inputs), {}, "graph from Dynamo")
        except Exception as error:        # noqa: BLE001  (see _Graph.failed)
            if not compiled.failed(error):
                raise
            return gm.forward
    return compiled


class _Graph:
    """What Dynamo calls: the compiled graph, or the graph itself in eager PyTorch for a
    signature myelin cannot compile (with ``fallback``)."""

    def __init__(self, model, gm, fallback):
        self.model = model
        self.gm = gm
        self.fallback = fallback
        self.eager = set()             # signatures that run in eager PyTorch

    def __call__(self, *args):
        if self.eager:
            key = _shapes(args)
            if key in self.eager:
                return self.gm(*args)
        try:
            return self.model(*args)
        except Exception as error:         # noqa: BLE001
            if not self.failed(error):
                raise
            self.eager.add(_shapes(args))
            return self.gm(*args)

    def failed(self, error):
        """True (after a warning) if the graph falls back to eager PyTorch for ``error``:
        ``fallback`` is set and myelin could not export, import or compile the graph."""
        if not self.fallback or isinstance(error, InputError):
            return False
        if not isinstance(error, MyelinError) and not _export_error(error):
            return False
        message = f"myelin could not compile a graph from Dynamo; it runs in eager PyTorch: " \
                  f"{type(error).__name__}: {error}"
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        log.warning(message)
        return True


def _export_error(error):
    """True for the errors torch.export raises on what it cannot trace."""
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(names & {"UserError", "Unsupported", "GuardOnDataDependentSymNode",
                         "TorchRuntimeError", "UnsupportedOperatorException"}) or \
        type(error).__module__.startswith(("torch._dynamo", "torch.export", "torch._export",
                                           "torch.fx"))


def _concrete(values):
    """True if ``values`` are all concrete: real tensors and numbers, no symbolic sizes."""
    for value in values:
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return False
        if isinstance(value, torch.Tensor) and type(value).__name__ == "FakeTensor":
            return False
    return True


def _shapes(args):
    return tuple((a.dtype, tuple(a.shape)) if isinstance(a, torch.Tensor) else a for a in args)
