"""Memory that compiling keeps: the growth of the resident set over many compiles of a small
flow, and over an ONNX model run at many batch sizes (one compiled signature each).

Run: ``python benchmarks/compile_memory.py [--compiles N] [--batches N]`` (Linux). The compile
cache is off, so every compile runs LLVM. Prints KiB kept per compile, and for the ONNX model
(an MLP with 4 MiB of weights) the networks held and the memory kept with the default
``max_signatures`` and with no bound.
"""

import argparse
import ctypes
import gc
import os

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import myelin
import myelin.onnx


def resident_mib():
    """The resident set in MiB, after collecting garbage and handing freed heap memory back to
    the system (glibc keeps freed blocks otherwise, which would count as kept here)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):       # not glibc
        pass
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def small_flow():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [4, 16])
    f.relu(f.add(f.matmul(x, f.array("W", np.ones((16, 8), np.float32))), f.const(1.0)),
           name="y")
    return flow


def compiles(count):
    compiler = myelin.Compiler(cache=False)
    for _ in range(20):                 # warm up: imports, LLVM's one-time set-up
        compiler.compile(small_flow())
    before = resident_mib()
    for _ in range(count):
        compiler.compile(small_flow())
    after = resident_mib()
    print(f"{count} compiles of a small flow: resident {before:.1f} -> {after:.1f} MiB, "
          f"{(after - before) * 1024 / count:.1f} KiB kept per compile")


def mlp_model():
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("w1", (1024, 1024)), ("w2", (1024, 10)))]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def batch_sizes(count):
    for bound, options in (("default max_signatures", {}),
                           ("no bound", {"max_signatures": count + 1})):
        model = myelin.onnx.load(mlp_model(), cache=False, **options)
        before = resident_mib()
        for n in range(1, count + 1):
            model.run([np.ones((n, 1024), np.float32)])
        after = resident_mib()
        print(f"ONNX MLP at batch sizes 1..{count}, {bound}: {len(model.compiles)} compiles, "
              f"{len(model._compiled)} networks held, resident +{after - before:.1f} MiB")
        del model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compiles", type=int, default=200)
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args()
    os.environ["MYELIN_CACHE"] = "off"
    compiles(args.compiles)
    batch_sizes(args.batches)


if __name__ == "__main__":
    main()
