"""What ``OnnxModel.run`` adds over the compiled code: per-call latency of the raw
``instance.compute()`` (input bound once, nothing copied), of ``model.run(inputs)`` (a list, a
dict), of ``model.run(inputs, out=...)`` and of ONNX Runtime's ``session.run`` (its default
threads, and one thread: "1t"), for the guide's model imported from ONNX and the MLP
784-512-512-10 at batch 1.

Each system is timed in several alternating passes (the machine may be shared); a system's
latency is its least median over the passes. "run - compute" is the overhead of the run path.

Run: ``python benchmarks/run_overhead.py [--passes N]``.
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "importers",
                                "onnx"))
from common import format_seconds, ort_session, time_call  # noqa: E402
from guide_example import build, onnx_model  # noqa: E402
from torch_models import export, mnist_mlp  # noqa: E402

import myelin.onnx  # noqa: E402


def guide():
    """The guide's model as ONNX bytes and its input."""
    _, _, _, weights, bias = build()
    x = np.random.default_rng(1).random((1, 64), dtype=np.float32)
    return onnx_model(weights, bias), x


def mlp():
    """The MLP 784-512-512-10 at batch 1 as ONNX bytes and its input."""
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1, 784), dtype=np.float32)
    return export(mnist_mlp(), torch.from_numpy(x), dynamic_batch=False), x


def contenders(model_bytes, x):
    """{system: callable} for one model of one input "x"."""
    model = myelin.onnx.load(model_bytes, input_shapes={"x": x.shape}, cache=False)
    cell, = model.network().cells
    data = cell.instance()
    data.bind(cell.inputs[0], x)
    session, single = ort_session(model_bytes), ort_session(model_bytes, 1)
    feeds, out = {"x": x}, [np.empty_like(y) for y in model.run([x])]
    return {"compute()": data.compute,
            "run([x])": lambda: model.run([x]),
            "run({x})": lambda: model.run(feeds),
            "run([x], out)": lambda: model.run([x], out=out),
            "onnxruntime": lambda: session.run(None, feeds),
            "onnxruntime 1t": lambda: single.run(None, feeds)}


def measure(title, systems, passes):
    times = {name: float("inf") for name in systems}
    for _ in range(passes):
        for name, function in systems.items():
            times[name] = min(times[name], time_call(function, min_seconds=0.3, rounds=9))
    print(f"\n{title}")
    print(f"  {'system':<16}{'latency':>12}{'- compute()':>14}{'/ onnxruntime':>16}")
    for name, seconds in times.items():
        print(f"  {name:<16}{format_seconds(seconds):>12}"
              f"{format_seconds(seconds - times['compute()']):>14}"
              f"{seconds / times['onnxruntime']:>16.3f}")
    return times


def main(passes=5):
    for title, workload in [("guide model (ONNX), x[1,64] W[64,256]", guide),
                            ("MLP 784-512-512-10, batch 1", mlp)]:
        measure(title, contenders(*workload()), passes)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=5,
                        help="alternating timing passes over the systems (default 5)")
    main(parser.parse_args().passes)
