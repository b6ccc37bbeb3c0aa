"""A fast, seeded sample of the .flow fuzzing campaign (scripts/fuzz_flow.py): mutated flow
files loaded, compiled and computed in worker processes under time and memory limits. No
case may end in a foreign exception, a crash, a hang or a MemoryError."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import fuzz_flow  # noqa: E402
import fuzzing  # noqa: E402

CASES = 300
SEED = 20261125


def test_a_seeded_sample_has_no_defects():
    files = fuzz_flow.corpus_files()
    cases = [fuzz_flow.make_case(files, index, SEED) for index in range(CASES)]
    results, tally, defects = fuzzing.sample(cases, "fuzz_flow:run_case")
    assert not defects, "\n\n".join(defects)
    assert len(results) == CASES
    assert tally.outcomes["ok"] >= CASES // 10 and tally.outcomes["myelin"] >= CASES // 2
