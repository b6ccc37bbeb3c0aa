"""myelin as an ONNX backend (``onnx.backend.base.Backend``), for ONNX's backend test suite.

Every model runs as JIT-compiled code (there is no fallback to an interpreter); a model with
control flow (If, Loop, Scan) runs its compiled cells on myelin.control's VM. A model that
uses a data type myelin does not compute with (float8, int4, strings, ...) is skipped
with the reason (``unittest.SkipTest``); every other problem is an error.
"""

import unittest

from onnx.backend.base import Backend, BackendRep

from myelin.errors import UnsupportedTypeError
from myelin.importers.onnx.model import OnnxModel


class _SkipUnsupportedTypes:
    """A context turning UnsupportedTypeError into unittest.SkipTest (a class: entering and
    leaving it costs a fifth of a generator's contextlib.contextmanager, on every run)."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if kind is not None and issubclass(kind, UnsupportedTypeError):
            raise unittest.SkipTest(str(error)) from None
        return False


_skip_unsupported_types = _SkipUnsupportedTypes()


class MyelinRep(BackendRep):
    """A prepared model: compiled for each input signature it is run with."""

    def __init__(self, model):
        self.model = model

    def run(self, inputs, **kwargs):
        with _skip_unsupported_types:
            return tuple(self.model.run(inputs))


class MyelinBackend(Backend):
    """Compiles ONNX models for the host CPU."""

    @classmethod
    def supports_device(cls, device):
        return device.upper() == "CPU"

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        super().prepare(model, device, **kwargs)
        with _skip_unsupported_types:
            return MyelinRep(OnnxModel(model))

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)
