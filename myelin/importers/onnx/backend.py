"""myelin as an ONNX backend (``onnx.backend.base.Backend``), for ONNX's backend test suite.

Every model runs as JIT-compiled code (there is no fallback to an interpreter); a model with
control flow (If, Loop, Scan) runs its compiled cells on myelin.control's VM. A model that
uses a data type myelin does not compute with (bfloat16, float8, strings, ...) is skipped
with the reason (``unittest.SkipTest``); every other problem is an error.
"""

import contextlib
import unittest

from onnx.backend.base import Backend, BackendRep

from myelin.errors import UnsupportedTypeError
from myelin.importers.onnx.model import OnnxModel


@contextlib.contextmanager
def _skip_unsupported_types():
    try:
        yield
    except UnsupportedTypeError as exc:
        raise unittest.SkipTest(str(exc)) from None


class MyelinRep(BackendRep):
    """A prepared model: compiled for each input signature it is run with."""

    def __init__(self, model):
        self.model = model

    def run(self, inputs, **kwargs):
        with _skip_unsupported_types():
            return tuple(self.model.run(inputs))


class MyelinBackend(Backend):
    """Compiles ONNX models for the host CPU."""

    @classmethod
    def supports_device(cls, device):
        return device.upper() == "CPU"

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        super().prepare(model, device, **kwargs)
        with _skip_unsupported_types():
            return MyelinRep(OnnxModel(model))

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)
