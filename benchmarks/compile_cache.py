"""The compile cache: a ResNet-18 (batch 1, 224x224, random weights) exported to ONNX and
imported and compiled with an empty cache (cold), then again from the cache (warm),
in one process after a small warm-up compile (so neither pays for Python's first imports).
Prints both times, the phases of each, their ratio, and for comparison how long ONNX Runtime
takes to create a session for the same model. The cache is a temporary directory.

Run: ``python benchmarks/compile_cache.py [--warm-runs N]``.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "importers",
                                "onnx"))
from common import ort_session  # noqa: E402
from torch_models import MatMul, ResNet18, export  # noqa: E402

import myelin.onnx  # noqa: E402
from myelin.codegen.llvm.codecache import CodeCache  # noqa: E402


def compile_seconds(model_bytes, cache, shapes):
    """Seconds the ONNX import and the compile take, the phase timings and the network."""
    start = time.perf_counter()
    flow = myelin.onnx.import_model(model_bytes, shapes=shapes).flow
    compiler = myelin.Compiler(cache=cache)
    network = compiler.compile(flow)
    seconds = time.perf_counter() - start
    timings = {"import": seconds - sum(compiler.timings.values()), **compiler.timings}
    return seconds, timings, network


def output(network, x):
    data = network.cells[0].instance()
    data[network.cells[0].inputs[0]] = x
    data.compute()
    return np.array(data[network.cells[0].outputs[0]])


def phases(timings):
    return ", ".join(f"{name} {seconds:.3f} s" for name, seconds in timings.items())


def main(warm_runs):
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    model_bytes = export(ResNet18(width=64, classes=1000), (torch.from_numpy(x),),
                         dynamic_batch=False, inputs=("x",), outputs=("y",))
    shapes = {"x": x.shape}
    with tempfile.TemporaryDirectory() as cache:
        small = export(MatMul(), (torch.zeros(4, 4), torch.zeros(4, 4)), dynamic_batch=False,
                       inputs=("a", "b"), outputs=("y",))
        compile_seconds(small, False, {"a": (4, 4), "b": (4, 4)})      # warm-up
        cold, cold_phases, cold_network = compile_seconds(model_bytes, cache, shapes)
        warm_times = []
        for _ in range(warm_runs):
            seconds, warm_phases, warm_network = compile_seconds(model_bytes, cache, shapes)
            warm_times.append(seconds)
        if "cache" not in warm_phases:
            raise SystemExit("the warm compile did not come from the cache")
        entry = sum(info.size for info in CodeCache(cache).entries())
        same = np.array_equal(output(cold_network, x), output(warm_network, x))
    start = time.perf_counter()
    ort_session(model_bytes)
    ort = time.perf_counter() - start
    warm = statistics.median(warm_times)
    print("ResNet-18, batch 1, 224x224, from ONNX (import and compile)")
    print(f"  cold compile (empty cache): {cold:.3f} s  [{phases(cold_phases)}]")
    print(f"  warm compile (from cache):  {warm:.3f} s  [{phases(warm_phases)}] "
          f"(median of {warm_runs})")
    print(f"  cold / warm: {cold / warm:.1f}x; cache entry {entry / 2**20:.1f} MiB; "
          f"warm outputs {'equal' if same else 'DIFFERENT from'} cold ones")
    print(f"  ONNX Runtime session creation: {ort:.3f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm-runs", type=int, default=5)
    main(parser.parse_args().warm_runs)
