"""A fast, seeded sample of the ONNX fuzzing campaign (scripts/fuzz_onnx.py) on the models
built with onnx.helper: mutated models imported, compiled and run in worker processes under
time and memory limits. No case may end in a foreign exception, a crash, a hang or a
MemoryError."""

import os
import sys

import myelin.onnx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
import fuzz_onnx  # noqa: E402
import fuzzing  # noqa: E402

CASES = 300
SEED = 20261125


def test_a_seeded_sample_has_no_defects():
    models = fuzz_onnx.corpus(torch=False)
    supported = myelin.onnx.supported_ops()
    cases = [fuzz_onnx.make_case(models, index, SEED, supported) for index in range(CASES)]
    results, tally, defects = fuzzing.sample(cases, "fuzz_onnx:run_case")
    assert not defects, "\n\n".join(defects)
    assert len(results) == CASES
    assert tally.outcomes["ok"] >= CASES // 20 and tally.outcomes["myelin"] >= CASES // 2
