"""ONNX's backend test suite (node, simple, real, pytorch-converted and pytorch-operator cases)
run through myelin's ONNX backend: every case is compiled to native code and compared with
ONNX's expected outputs. Cases with data types myelin lacks skip with the reason; the cases
known to fail are listed in ``expected_failures.py``, each with its reason."""

import warnings

import pytest

pytest.importorskip("onnx")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the case generators warn about casts they do on purpose
    import onnx.backend.test

from expected_failures import EXPECTED_FAILURES  # noqa: E402
from myelin.importers.onnx.backend import MyelinBackend  # noqa: E402

backend_test = onnx.backend.test.BackendTest(MyelinBackend, __name__)
backend_test.exclude(r"_cuda$")
for case in EXPECTED_FAILURES:
    backend_test.xfail(rf"^{case}_cpu$")

globals().update(backend_test.test_cases)
