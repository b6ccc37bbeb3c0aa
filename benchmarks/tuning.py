"""Kernel choice by measurement: each workload compiled with its kernels' default options and
with ``Compiler(tune=True)``; prints both latencies, their ratio, the option chosen and the
time tuning took (measured afresh: no cache). With ``--resnet``, also a ResNet-18 (batch 1,
224x224) imported from ONNX, with and without tuning.

Run: ``python benchmarks/tuning.py [--resnet]``.
"""

import argparse
import os
import sys
import time

import numpy as np

import myelin
from common import format_seconds, time_call

CONV = dict(strides=[1, 1], pads=[1, 1, 1, 1])


def matmul(m, k, n, constant):
    """x[m, k] times W[k, n]: W constant (packed at compile time) or a second input."""
    rng = np.random.default_rng(0)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [m, k])
    if constant:
        w = f.array("w", rng.standard_normal((k, n), dtype=np.float32))
    else:
        w = f.var("w", "float32", [k, n])
    f.matmul(x, w, name="y")
    return flow


def conv(channels, size):
    """A ResNet-style 3x3 convolution, ``channels`` in and out, on a size x size image."""
    rng = np.random.default_rng(0)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [1, channels, size, size])
    w = f.array("w", rng.standard_normal((channels, channels, 3, 3), dtype=np.float32) * 0.05)
    f.op("Conv", [x, w], name="y", attrs=CONV)
    return flow


WORKLOADS = [
    ("matmul 1024x1024x1024, variable", lambda: matmul(1024, 1024, 1024, False)),
    ("matmul 128x256x1024, constant", lambda: matmul(128, 256, 1024, True)),
    ("matmul 1x784x512, constant", lambda: matmul(1, 784, 512, True)),
    ("conv 64x56x56, 3x3", lambda: conv(64, 56)),
    ("conv 256x14x14, 3x3", lambda: conv(256, 14)),
]


def instance(net, flow):
    """An instance of the flow's one cell with random inputs."""
    rng = np.random.default_rng(1)
    data = net.cell("f").instance()
    for var in flow.funcs["f"].ops[0].inputs:
        if not var.constant:
            data[var] = rng.standard_normal(var.shape, dtype=np.float32)
    return data


def best_of(functions, rounds=2, min_seconds=0.2):
    """The least median latency of each function over ``rounds`` alternating timings."""
    times = [float("inf")] * len(functions)
    for _ in range(rounds):
        for i, function in enumerate(functions):
            times[i] = min(times[i], time_call(function, min_seconds))
    return times


def option_text(option):
    return ", ".join(f"{k}={v}" for k, v in option.items()) or "default"


def kernels():
    print("\nkernel options chosen by measurement (Compiler(tune=True)), one step each")
    print(f"  {'workload':<34}{'default':>12}{'tuned':>12}{'default/tuned':>15}"
          f"{'tuning':>9}  choice")
    for name, build in WORKLOADS:
        flow = build()
        default = myelin.Compiler().compile(flow)
        compiler = myelin.Compiler(tune=True, tuning_cache=False)
        tuned = compiler.compile(flow)
        (step,) = tuned.cell("f").steps
        first, second = instance(default, flow), instance(tuned, flow)
        plain, fast = best_of([first.compute, second.compute])
        print(f"  {name:<34}{format_seconds(plain):>12}{format_seconds(fast):>12}"
              f"{plain / fast:>15.3f}{compiler.timings['tune']:>8.2f}s  "
              f"{option_text(step.choice)}")


def resnet():
    """ResNet-18 from ONNX, default and tuned: latency and compile time."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "importers",
                                    "onnx"))
    import torch
    import myelin.onnx
    from torch_models import ResNet18, export

    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    model_bytes = export(ResNet18(width=64, classes=1000), torch.from_numpy(x),
                         dynamic_batch=False)
    models, seconds = {}, {}
    for label, options in [("default", {}), ("tuned", dict(tune=True, tuning_cache=False))]:
        start = time.perf_counter()
        models[label] = myelin.onnx.load(model_bytes, input_shapes={"x": x.shape}, **options)
        seconds[label] = time.perf_counter() - start
    times = best_of([lambda: models["default"].run([x]), lambda: models["tuned"].run([x])],
                    min_seconds=0.5)
    net = models["tuned"].network()
    steps = [s for cell in net.cells for s in cell.steps if s.choice]
    changed = sum(s.choice != s.kernel.choices(s, net.target)[0] for s in steps)
    print("\nResNet-18, batch 1, 224x224, imported from ONNX")
    print(f"  default  {format_seconds(times[0]):>12}   compile {seconds['default']:.2f} s")
    print(f"  tuned    {format_seconds(times[1]):>12}   compile {seconds['tuned']:.2f} s "
          f"({len(steps)} steps tuned, {changed} off the default)   "
          f"default/tuned {times[0] / times[1]:.3f}")


def main(with_resnet=False):
    kernels()
    if with_resnet:
        resnet()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resnet", action="store_true", help="also tune a whole ResNet-18")
    main(parser.parse_args().resnet)
