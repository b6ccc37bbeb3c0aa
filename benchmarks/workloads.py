"""myelin's target workloads, each timed against ONNX Runtime (its default threads, and one
thread: "1t"), PyTorch eager (its default threads) and NumPy where it applies, in one process:

1. the guide example, y = softmax(relu(x W + b)) with x[1,64], W[64,256], imported from ONNX
   and run through ``model.run`` like the others (and, as "myelin compute", the guide's own
   flow: x copied in, ``compute()``, y copied out);
2. an MLP 784-512-512-10 with ReLU and softmax, batch 1, and 3. the same at batch 256;
   2b. the MLP at batch 1 with myelin storing its weights as bfloat16
   (``weights="bfloat16"``; the others float32, issue 27's goal);
4. one LSTM cell step written with plain ops (matmuls, sigmoid, tanh, mul, add), input and
   hidden size 256, batch 1;
5. a ResNet-18 at batch 1, 224x224, 1000 classes;
6. a 4-layer transformer encoder, d=256, 4 heads, feed-forward 1024, sequence 128, batch 1
   (``encoder(256, 4, 4, ff=1024)``: without ``ff``, its feed-forward width is 2 * d = 512);
   6b. a BERT-base-sized one, 12 layers of d=768, 12 heads, feed-forward 3072, each layer
   with weights of its own (issue 25's goal);
7. a float32 matmul 1024x1024x1024 of two inputs, also in GFLOP/s.

Workloads 2-7 are PyTorch modules with random weights, exported to ONNX and imported by myelin
(the time that takes, import, optimization and LLVM, is printed as myelin's compile time,
always a full compile: the compile cache is off; ``compile_cache.py`` times it).
Each workload prints its latencies, myelin's latency over each system's (below 1: myelin is
faster) and the relative difference of myelin's outputs to ONNX Runtime's. The end prints a
Markdown summary with each workload's goal (myelin's latency over ONNX Runtime's; for the matmul,
myelin's GFLOP/s over the fastest other system's) and whether it is met.

Run: ``python benchmarks/workloads.py [--only NAME]`` (NAME: part of workload names, e.g. mlp).
"""

import argparse
import os
import sys
import time
from typing import Callable, NamedTuple

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "importers",
                                "onnx"))
from common import compare, format_seconds, ort_session  # noqa: E402
from guide_example import build, onnx_model  # noqa: E402
from torch_models import LstmStep, MatMul, ResNet18, encoder, export, mnist_mlp  # noqa: E402

import myelin.onnx  # noqa: E402

OTHERS = {"onnxruntime": "ONNX Runtime", "onnxruntime 1t": "ONNX Runtime 1t",
          "pytorch": "PyTorch", "numpy": "NumPy"}


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def linear(layer):
    """A torch Linear layer's transposed weight and bias, as arrays."""
    return layer.weight.detach().numpy().T, layer.bias.detach().numpy()


def imported(module, inputs, outputs=("y",), **options):
    """myelin, ONNX Runtime and PyTorch running ``module`` exported to ONNX; ``inputs`` maps
    input names to arrays, in the order of the module's arguments; ``options`` are myelin's
    compiler options."""
    arrays = list(inputs.values())
    tensors = [torch.from_numpy(a) for a in arrays]
    model_bytes = export(module, tuple(tensors), dynamic_batch=False, inputs=tuple(inputs),
                         outputs=outputs)
    start = time.perf_counter()
    model = myelin.onnx.load(model_bytes, input_shapes={n: a.shape for n, a in inputs.items()},
                             cache=False, **options)
    print(f"  myelin compile (ONNX import, optimization, LLVM): "
          f"{time.perf_counter() - start:.2f} s")
    session, single = ort_session(model_bytes), ort_session(model_bytes, 1)
    return {"myelin": lambda: model.run(arrays),
            "onnxruntime": lambda: session.run(None, inputs),
            "onnxruntime 1t": lambda: single.run(None, inputs),
            "pytorch": lambda: module(*tensors)}


def guide():
    """The guide's model imported from ONNX, through model.run; "myelin compute" is the raw
    compute() of the guide's own flow (x copied in, y copied out), for reference."""
    flow, x, y, weights, bias = build()
    data = myelin.Compiler().compile(flow).cell("f").instance()
    xv = np.random.default_rng(1).random((1, 64), dtype=np.float32)
    xin, yout = data[x].numpy(), data[y].numpy()

    def compute():
        xin[...] = xv
        data.compute()
        return [yout.copy()]

    model_bytes = onnx_model(weights, bias)
    model = myelin.onnx.load(model_bytes, input_shapes={"x": xv.shape}, cache=False)
    tw, tb, tx = torch.from_numpy(weights), torch.from_numpy(bias), torch.from_numpy(xv)
    session, single = ort_session(model_bytes), ort_session(model_bytes, 1)
    return {"myelin": lambda: model.run([xv]),
            "myelin compute": compute,
            "onnxruntime": lambda: session.run(None, {"x": xv}),
            "onnxruntime 1t": lambda: single.run(None, {"x": xv}),
            "pytorch": lambda: torch.softmax(torch.relu(tx @ tw + tb), -1),
            "numpy": lambda: softmax(np.maximum(xv @ weights + bias, 0))}


def mlp(batch, **options):
    torch.manual_seed(0)
    module = mnist_mlp()
    x = np.random.default_rng(0).standard_normal((batch, 784), dtype=np.float32)
    (w1, b1), (w2, b2), (w3, b3) = (linear(module[i]) for i in (0, 2, 4))

    def numpy_mlp():
        h = np.maximum(x @ w1 + b1, 0)
        return softmax(np.maximum(h @ w2 + b2, 0) @ w3 + b3)

    return {**imported(module, {"x": x}, **options), "numpy": numpy_mlp}


def lstm():
    torch.manual_seed(0)
    step = LstmStep(256, 256)
    x, h, c = np.random.default_rng(0).standard_normal((3, 1, 256), dtype=np.float32)
    wx, bx = linear(step.wx)
    wh = step.wh.weight.detach().numpy().T

    def numpy_step():
        i, f, g, o = np.split(x @ wx + bx + h @ wh, 4, axis=1)
        c_next = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        return sigmoid(o) * np.tanh(c_next), c_next

    return {**imported(step, {"x": x, "h": h, "c": c}, outputs=("h_next", "c_next")),
            "numpy": numpy_step}


def resnet():
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    return imported(ResNet18(width=64, classes=1000), {"x": x})


def transformer():
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1, 128, 256), dtype=np.float32)
    return imported(encoder(256, 4, 4, ff=1024), {"x": x})


def bert_base():
    """A BERT-base-sized encoder: 12 layers of d=768, 12 heads, feed-forward 3072, sequence
    128, each layer with weights of its own (PyTorch's encoder clones one layer: its export
    would keep 28 MB of weights once, where a trained model has 340 MB)."""
    torch.manual_seed(0)
    module = encoder(768, 12, 12, ff=3072)
    for sub in module.modules():
        reset = getattr(sub, "reset_parameters", None) or getattr(sub, "_reset_parameters", None)
        if reset is not None and sub is not module:
            reset()
    x = np.random.default_rng(0).standard_normal((1, 128, 768), dtype=np.float32)
    return imported(module, {"x": x})


def matmul():
    a, b = np.random.default_rng(0).standard_normal((2, 1024, 1024), dtype=np.float32)
    return {**imported(MatMul(), {"a": a, "b": b}), "numpy": lambda: a @ b}


class Workload(NamedTuple):
    """A workload: its contenders (() -> {system: callable returning the outputs}) and its goal,
    myelin's latency at most ``goal`` times ONNX Runtime's or, given ``flops`` (per call),
    myelin's GFLOP/s at least ``goal`` times the fastest other system's."""

    name: str
    contenders: Callable
    goal: float
    flops: int = 0


WORKLOADS = [
    Workload("guide example, x[1,64] W[64,256]", guide, 0.3),
    Workload("MLP 784-512-512-10, batch 1", lambda: mlp(1), 0.6),
    Workload("MLP 784-512-512-10, batch 1, bfloat16 weights",
             lambda: mlp(1, weights="bfloat16"), 0.5),
    Workload("MLP 784-512-512-10, batch 256", lambda: mlp(256), 0.9),
    Workload("LSTM cell step, hidden 256, batch 1", lstm, 0.3),
    Workload("ResNet-18, batch 1, 224x224", resnet, 1.0),
    Workload("encoder 4 x d256, ff 1024, seq 128", transformer, 0.9),
    Workload("BERT-base-sized encoder 12 x d768, ff 3072, seq 128", bert_base, 0.85),
    Workload("matmul 1024x1024x1024 float32", matmul, 0.95, flops=2 * 1024 ** 3),
]


def goal(workload, times):
    """The goal in words, the measured value and whether it is met."""
    if workload.flops:
        value = min(t for name, t in times.items() if name != "myelin") / times["myelin"]
        return f"GFLOP/s >= {workload.goal}x fastest", f"{value:.2f}x", value >= workload.goal
    value = times["myelin"] / times["onnxruntime"]
    return f"myelin / ORT <= {workload.goal}", f"{value:.2f}", value <= workload.goal


def latency(workload, seconds):
    text = format_seconds(seconds)
    return f"{text}, {workload.flops / seconds / 1e9:.0f} GFLOP/s" if workload.flops else text


def relative_difference(actual, expected):
    """The largest relative difference (in norm) over the outputs."""
    return max(np.linalg.norm(a - e) / np.linalg.norm(e) for a, e in zip(actual, expected))


def summary(results):
    print("\nRatios: myelin's latency over the system's (below 1: myelin is faster).\n")
    print("| workload | myelin | " + " | ".join(f"{label} (ratio)" for label in OTHERS.values())
          + " | goal | met |")
    print("|---" * (len(OTHERS) + 4) + "|")
    for workload, times in results:
        cells = [workload.name, latency(workload, times["myelin"])]
        for system in OTHERS:
            seconds = times.get(system)
            cells.append("–" if seconds is None else
                         f"{latency(workload, seconds)} ({times['myelin'] / seconds:.2f})")
        text, value, met = goal(workload, times)
        cells += [text, f"{'yes' if met else 'no'} ({value})"]
        print("| " + " | ".join(cells) + " |")


def main(only=""):
    results = []
    for workload in WORKLOADS:
        if only.lower() not in workload.name.lower():
            continue
        contenders = workload.contenders()
        with torch.no_grad():
            times = compare(workload.name, contenders, min_seconds=1.0)
        if workload.flops:
            print("  GFLOP/s: " + ", ".join(f"{name} {workload.flops / seconds / 1e9:.1f}"
                                            for name, seconds in times.items()))
            print(f"  myelin's GFLOP/s over the fastest other's: {goal(workload, times)[1]}")
        difference = relative_difference(contenders["myelin"](), contenders["onnxruntime"]())
        print(f"  relative difference to onnxruntime: {difference:.2e}")
        results.append((workload, times))
    summary(results)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", metavar="NAME",
                        help="run only the workloads whose name contains NAME (any case)")
    main(parser.parse_args().only)
