"""Run ONNX's backend test suite against myelin and count pass / skip / fail by category.

    python scripts/onnx_conformance.py                 # summary table (Markdown)
    python scripts/onnx_conformance.py --failures      # also each failing case and its error
    python scripts/onnx_conformance.py -k test_conv    # only cases whose name matches a regex

The README's conformance table is this script's output. Cases run in worker processes (one
per core), each with a time limit, so one hung or crashed case cannot stop the count.
"""

import argparse
import collections
import concurrent.futures
import os
import re
import sys
import time
import unittest
import warnings

CATEGORIES = {
    "OnnxBackendNodeModelTest": "node",
    "OnnxBackendSimpleModelTest": "simple",
    "OnnxBackendRealModelTest": "real",
    "OnnxBackendPyTorchConvertedModelTest": "pytorch-converted",
    "OnnxBackendPyTorchOperatorModelTest": "pytorch-operator",
}


def _test_classes():
    warnings.simplefilter("ignore")
    import onnx.backend.test

    from myelin.importers.onnx.backend import MyelinBackend
    return onnx.backend.test.BackendTest(MyelinBackend, __name__).test_cases


def _case_names(pattern):
    names = []
    for cls_name, cls in _test_classes().items():
        for name in sorted(n for n in dir(cls) if n.endswith("_cpu")):
            if re.search(pattern, name):
                names.append((cls_name, name))
    return names


def _run_one(cls_name, name):
    """(outcome, message) for one case: pass, skip, fail or error."""
    cls = _test_classes()[cls_name]
    result = unittest.TestResult()
    cls(name).run(result)
    if result.skipped:
        return "skip", result.skipped[0][1]
    for kind, found in (("fail", result.failures), ("error", result.errors)):
        if found:
            return kind, found[0][1].strip().splitlines()[-1][:300]
    return "pass", ""


def _run_batch(batch):
    return [(cls_name, name) + _run_one(cls_name, name) for cls_name, name in batch]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="regex selecting case names")
    parser.add_argument("--failures", action="store_true", help="list failing cases")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    args = parser.parse_args()

    names = _case_names(args.k)
    batches = [names[i::args.jobs * 8] for i in range(args.jobs * 8)]
    start = time.perf_counter()
    results = []
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        for batch_results in pool.map(_run_batch, [b for b in batches if b]):
            results.extend(batch_results)
    seconds = time.perf_counter() - start

    counts = collections.defaultdict(collections.Counter)
    for cls_name, _, outcome, _ in results:
        counts[CATEGORIES[cls_name]][outcome] += 1
    print("| category | cases | pass | skip (unsupported type) | fail |")
    print("|---|---|---|---|---|")
    for category in CATEGORIES.values():
        c = counts[category]
        total = sum(c.values())
        if total:
            print(f"| {category} | {total} | {c['pass']} | {c['skip']} | "
                  f"{c['fail'] + c['error']} |")
    print(f"\n{len(results)} cases in {seconds:.0f} s")
    if args.failures:
        for cls_name, name, outcome, message in sorted(results, key=lambda r: r[1]):
            if outcome in ("fail", "error"):
                print(f"{name}: {message}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
