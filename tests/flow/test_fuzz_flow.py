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
    results = fuzzing.run_cases(cases, "fuzz_flow:run_case", workers=2, timeout=60)
    tally = fuzzing.Tally()
    for result in results:
        tally.add(result)
    defects = [f"case {r.case.index} ({r.case.mutation}): {r.outcome} {r.kind}\n{r.detail}"
               for r in results if r.outcome in fuzzing.DEFECTS]
    assert not defects, "\n\n".join(defects)
    assert len(results) == CASES
    assert tally.outcomes["ok"] >= CASES // 10 and tally.outcomes["myelin"] >= CASES // 2
