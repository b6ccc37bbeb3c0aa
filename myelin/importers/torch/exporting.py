"""Exporting a PyTorch callable for one input signature: ``torch.export`` in inference mode
(no autograd, the module in eval mode while it is traced), then decomposition to core ATen
but for the ops that have a converter of their own (:func:`decompositions`)."""

import contextlib
import functools
import time
import warnings

import torch

from myelin.importers.torch import converters


@functools.cache
def decompositions():
    """The decomposition table export runs: PyTorch's default one (to core ATen), less the
    ops myelin converts whole (``linear``, ``matmul``, ``scaled_dot_product_attention``,
    normalizations, activations)."""
    table = torch.export.default_decompositions()
    preserved = converters.preserved()
    for op in list(table.keys()):
        if str(op) in preserved:
            del table[op]
    return table


@contextlib.contextmanager
def _evaluating(module):
    """``module`` (if it is an nn.Module) in eval mode inside, its own modes restored after."""
    if not isinstance(module, torch.nn.Module):
        yield
        return
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def export(module, args, kwargs=None, timings=None):
    """The ExportedProgram of ``module`` (an nn.Module, or a callable) called on ``args`` and
    ``kwargs``, decomposed for myelin. ``timings`` (a dict) gets the seconds of the trace
    ("export") and of the decomposition ("decompose")."""
    if not isinstance(module, torch.nn.Module):
        module = _Callable(module)
    start = time.perf_counter()
    with _evaluating(module), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(module, tuple(args), kwargs or None, strict=False)
        traced = time.perf_counter()
        program = program.run_decompositions(decompositions())
    if timings is not None:
        timings["export"] = traced - start
        timings["decompose"] = time.perf_counter() - traced
    return program


class _Callable(torch.nn.Module):
    """A plain function as a module, for torch.export."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args, **kwargs):
        return self.fn(*args, **kwargs)
