"""Where an ONNX model's time goes in myelin and in ONNX Runtime, side by side.

Both systems compute the model on the same random inputs with their profilers on (myelin's
cycle counters, ONNX Runtime's per-node trace), on ``--threads`` threads (default 1: the
kernels' own speed, without the second core), their calls alternating so that a machine
whose speed drifts slows both alike. Their steps are grouped alike: convolutions by kernel
size and output plane (``conv 3x3 -> 14x14``), every other step by its op; each group's time
per call is printed for both, with their ratio and myelin's GFLOP/s. A step that one system
fuses into another (ONNX Runtime's Relu into its Conv, myelin's epilogues into its products)
is counted where that system runs it.

Run: ``python benchmarks/profile_vs_ort.py MODEL.onnx [--threads N] [--runs N]
[--dynamic N]``.
"""

import argparse
import collections
import json
import os
import tempfile

import numpy as np
import onnxruntime

import myelin
from myelin.importers.onnx import import_graph, proto
from myelin.ops import conv as conv_ops
from myelin.ops import fused as fused_ops

WARMUP = 2


def conv_group(kernel, plane):
    """The group of a convolution: its kernel size and output plane."""
    return f"conv {'x'.join(map(str, kernel))} -> {'x'.join(map(str, plane))}"


def random_inputs(model, dynamic=1):
    """A random float32 array (small integers for integer inputs) for each graph input of
    ``model`` (an ONNX ModelProto), dynamic dimensions of size ``dynamic``."""
    initializers = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    inputs = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value or dynamic for d in tensor.shape.dim]
        if tensor.elem_type == 1:
            inputs[value.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            inputs[value.name] = rng.integers(0, 4, shape).astype(np.int64)
    return inputs


class _Myelin:
    """The model compiled with the profiler, an instance per cell with the inputs bound."""

    def __init__(self, model, threads, inputs):
        flow = import_graph(model, {name: a.shape for name, a in inputs.items()}).flow
        network = myelin.Compiler(threads=threads, profile=True, cache=False).compile(flow)
        self.cells = network.cells
        self.instances = []
        for cell in self.cells:
            data = cell.instance()
            for name in cell.inputs:
                data[name] = inputs[name.split("/", 1)[-1]]
            self.instances.append(data)

    def compute(self):
        for data in self.instances:
            data.compute()

    def reset(self):
        for cell in self.cells:
            cell.reset_profile()

    def groups(self):
        """{group: [microseconds per call, flops per call]}."""
        groups = collections.defaultdict(lambda: [0.0, 0])
        for cell in self.cells:
            for row in cell.profile().steps:
                step = cell.steps[row.index]
                group = step.type
                if step.type in ("Conv", "FusedConv"):
                    g = conv_ops.geometry(fused_ops.conv_part(step))
                    group = conv_group(g.kernel, g.output)
                groups[group][0] += row.us_per_call
                groups[group][1] += row.flops
        return groups


class _OnnxRuntime:
    """An ONNX Runtime session of the model with its profiler on."""

    def __init__(self, model_bytes, threads, inputs):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
        self.session = onnxruntime.InferenceSession(model_bytes, options,
                                                    providers=["CPUExecutionProvider"])
        self.feeds = {i.name: inputs[i.name] for i in self.session.get_inputs()}
        self.calls = 0

    def compute(self):
        self.session.run(None, self.feeds)
        self.calls += 1

    def groups(self):
        """{group: microseconds per call}, over every call made."""
        trace = self.session.end_profiling()
        with open(trace) as file:
            events = json.load(file)
        os.remove(trace)
        os.rmdir(os.path.dirname(trace))
        groups = collections.defaultdict(float)
        for event in events:
            if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
                continue
            args = event["args"]
            group = args.get("op_name", "?")
            shapes = [list(d.values())[0] for d in args.get("input_type_shape", [])]
            outputs = [list(d.values())[0] for d in args.get("output_type_shape", [])]
            if group in ("Conv", "FusedConv") and len(shapes) > 1 and outputs:
                group = conv_group(shapes[1][2:], outputs[0][2:])
            groups[group] += event["dur"] / self.calls
        return groups


def report(path, threads=1, runs=10, dynamic=1):
    """The side-by-side table of the ONNX file ``path`` (its dynamic dimensions of size
    ``dynamic``), as lines of text."""
    with open(path, "rb") as file:
        model_bytes = file.read()
    model = proto.load(path)
    inputs = random_inputs(model, dynamic)
    ours, theirs = _Myelin(model, threads, inputs), _OnnxRuntime(model_bytes, threads, inputs)
    for _ in range(WARMUP):
        ours.compute()
    ours.reset()
    for _ in range(runs):
        ours.compute()
        theirs.compute()
    mine, other = ours.groups(), theirs.groups()
    lines = [f"{os.path.basename(path)}, {threads} thread(s), {runs} calls each: myelin "
             f"{sum(us for us, _ in mine.values()):.0f} us, ONNX Runtime "
             f"{sum(other.values()):.0f} us per call (the steps' sums)",
             f"{'group':32s} {'myelin us':>10s} {'ORT us':>10s} {'ratio':>6s} {'GFLOP/s':>8s}"]
    for group in sorted(set(mine) | set(other),
                        key=lambda g: -max(mine.get(g, (0, 0))[0], other.get(g, 0))):
        us, flops = mine.get(group, (0.0, 0))
        theirs_us = other.get(group, 0.0)
        ratio = f"{us / theirs_us:6.2f}" if us and theirs_us else " " * 6
        rate = f"{flops / us / 1e3:8.1f}" if us and flops else " " * 8
        lines.append(f"{group:32s} {us:10.1f} {theirs_us:10.1f} {ratio} {rate}")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an ONNX file")
    parser.add_argument("--threads", type=int, default=1, help="threads of both (default 1)")
    parser.add_argument("--runs", type=int, default=10, help="profiled calls (default 10)")
    parser.add_argument("--dynamic", type=int, default=1,
                        help="the size of the inputs' dynamic dimensions (default 1)")
    args = parser.parse_args(argv)
    print("\n".join(report(args.model, args.threads, args.runs, args.dynamic)))


if __name__ == "__main__":
    main()
