"""Quantized models against ONNX Runtime (issue 27's table): the zoo's dynamic-quantized
BERT-style encoder (sequence 128) and its int8 QDQ ResNet-50 and MobileNetV2 (batch 1), each
with myelin's int8 kernels ("myelin"), without them ("before": the passes
``fuse_integer_matmul`` and ``fuse_integer_conv`` off, so products are int32 MatMuls and QDQ
convolutions float ones), and ONNX Runtime, all with default threads, timed in the same
rounds (the systems' order alternating; medians).

    python benchmarks/zoo/build.py bert_int8_dynamic resnet50_int8_qdq mobilenet_v2_int8_qdq
    python benchmarks/int8.py                      # all three
    python benchmarks/int8.py bert_int8_dynamic    # these

Prints one row per model: median latencies, the ratios myelin / ONNX Runtime (the issue's
goals: <= 0.9 for BERT and ResNet-50, <= 1.0 for MobileNetV2) and how far myelin's outputs
are from ONNX Runtime's (largest difference over the output's largest magnitude), and how
many steps run the int8 kernels (MatMulInteger and ConvInteger).
"""

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import alternating
from zoo import catalog, check

import myelin.onnx

MODELS = ("bert_int8_dynamic", "resnet50_int8_qdq", "mobilenet_v2_int8_qdq")
PASSES = ("fuse_integer_matmul", "fuse_integer_conv")
GOALS = {"bert_int8_dynamic": 0.9, "resnet50_int8_qdq": 0.9, "mobilenet_v2_int8_qdq": 1.0}


def measure(name, rounds):
    """(row of the table) for zoo model ``name``."""
    onnx_path, json_path = catalog.paths(name)
    if not json_path.exists():
        return f"{name:<24} not built (benchmarks/zoo/build.py {name})"
    meta = catalog.read_meta(json_path)
    feeds = check.make_inputs({i["name"]: i for i in meta["inputs"]},
                              np.random.default_rng(0))
    session = check.ort_session(onnx_path)
    after = myelin.onnx.load(str(onnx_path))
    before = myelin.onnx.load(str(onnx_path), disable_passes=PASSES)
    want = session.run(None, feeds)
    got = after.run(feeds)
    error = max(float(np.max(np.abs(np.asarray(g, np.float64) - w)) / max(np.max(np.abs(w)),
                                                                        1e-30))
                for g, w in zip(got, want))
    before.run(feeds)
    steps = sum(step.type in ("MatMulInteger", "ConvInteger")
                for step in after.network().cell("main").steps)
    samples = alternating({"myelin": lambda: after.run(feeds),
                           "before": lambda: before.run(feeds),
                           "ort": lambda: session.run(None, feeds)}, rounds=rounds)
    median = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    ratio = statistics.median(m / o for m, o in zip(samples["myelin"], samples["ort"]))
    ratio_before = statistics.median(m / o for m, o in zip(samples["before"], samples["ort"]))
    return (f"{name:<24} {median['before']:>9.2f} {median['myelin']:>9.2f} "
            f"{median['ort']:>9.2f} {ratio_before:>7.2f} {ratio:>6.2f} {GOALS[name]:>5} "
            f"{error:>9.1e} {steps:>6}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=MODELS)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    print(f"{'model':<24} {'before ms':>9} {'myelin ms':>9} {'ORT ms':>9} {'before':>7} "
          f"{'ratio':>6} {'goal':>5} {'rel diff':>9} {'int8':>6}")
    for name in args.models:
        print(measure(name, args.rounds), flush=True)


if __name__ == "__main__":
    main()
