"""Fusion: chains of 10 element-wise ops on a 4M-element float32 tensor compiled at opt level
0 (one kernel per op) and at the default level (one fused kernel), and a LayerNorm+GELU block,
against NumPy and ONNX Runtime (its default threads, and one thread) in the same run.

Two chains: arithmetic ops only (memory-bound: fusion saves nine passes over memory), and one
with Tanh and Sigmoid (their polynomials make it compute-bound). myelin runs on one thread.

Run: ``python benchmarks/fusion.py``.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import compare  # noqa: E402

import myelin  # noqa: E402

# (op, constant operand or None): the same chains in myelin, ONNX and NumPy.
CHAINS = {
    "arithmetic": [("Mul", 0.5), ("Add", 1.0), ("Max", 0.0), ("Mul", 2.0), ("Sub", 0.25),
                   ("Abs", None), ("Min", 3.0), ("Add", 0.1), ("Mul", 0.7), ("Neg", None)],
    "with Tanh and Sigmoid": [("Mul", 0.5), ("Add", 1.0), ("Tanh", None), ("Mul", 2.0),
                              ("Relu", None), ("Sub", 0.25), ("Abs", None), ("Sigmoid", None),
                              ("Add", 0.1), ("Neg", None)],
}
MYELIN = {"Max": "Maximum", "Min": "Minimum"}       # ONNX names that differ
NUMPY = {"Mul": np.multiply, "Add": np.add, "Sub": np.subtract, "Tanh": np.tanh,
         "Relu": lambda x: np.maximum(x, 0), "Abs": np.abs, "Max": np.maximum,
         "Min": np.minimum, "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Neg": np.negative}


def chain_flow(chain, shape):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "chain")
    value = f.var("x", "float32", shape)
    for op, constant in chain:
        op = MYELIN.get(op, op)
        value = f.op(op, [value] if constant is None else [value, np.float32(constant)])
    f.rename(value, "y")
    return flow


def chain_numpy(chain, x):
    for op, constant in chain:
        x = NUMPY[op](x) if constant is None else NUMPY[op](x, np.float32(constant))
    return x


def chain_onnx(chain, shape):
    from onnx import TensorProto, helper, numpy_helper
    nodes, inits, name = [], [], "x"
    for i, (op, constant) in enumerate(chain):
        inputs = [name]
        if constant is not None:
            inits.append(numpy_helper.from_array(np.array(constant, np.float32), f"c{i}"))
            inputs.append(f"c{i}")
        name = "y" if i == len(chain) - 1 else f"t{i}"
        nodes.append(helper.make_node(op, inputs, [name]))
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def layer_norm_gelu_flow(rows, width, gamma, beta):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "block")
    x = f.var("x", "float32", [rows, width])
    f.gelu(f.layer_norm(x, f.array("gamma", gamma), f.array("beta", beta)), name="y")
    return flow


def layer_norm_gelu_numpy(x, gamma, beta):
    """NumPy has no erf: its GELU is the tanh approximation (the same amount of work)."""
    mean = x.mean(-1, keepdims=True)
    centered = x - mean
    normed = centered / np.sqrt((centered * centered).mean(-1, keepdims=True) + 1e-5)
    y = normed * gamma + beta
    return 0.5 * y * (1 + np.tanh(0.7978845608 * (y + 0.044715 * y * y * y)))


def layer_norm_gelu_onnx(rows, width, gamma, beta):
    from onnx import TensorProto, helper, numpy_helper
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], axis=-1,
                              epsilon=1e-5),
             helper.make_node("Gelu", ["n"], ["y"])]
    graph = helper.make_graph(
        nodes, "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, width])],
        [numpy_helper.from_array(gamma, "gamma"), numpy_helper.from_array(beta, "beta")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def onnx_runners(model, feed):
    """ONNX Runtime with its default thread pool and with one thread ({} if not installed)."""
    try:
        import onnxruntime
    except ImportError:
        return {}
    runners = {}
    for label, threads in (("onnxruntime", 0), ("onnxruntime 1t", 1)):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
        runners[label] = lambda session=session: session.run(None, feed)
    return runners


def compiled(flow, func, x, level=None):
    compiler = myelin.Compiler() if level is None else myelin.Compiler(opt_level=level)
    data = compiler.compile(flow).cell(func).instance()
    data[f"{func}/x"] = x
    return data


def bench_chain(name, chain, elements=1 << 22):
    shape = [elements // 1024, 1024]
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    flow = chain_flow(chain, shape)
    fused, unfused = compiled(flow, "chain", x), compiled(flow, "chain", x, level=0)
    fused.compute()
    assert np.allclose(np.asarray(fused["chain/y"]), chain_numpy(chain, x), rtol=1e-5, atol=1e-6)
    contenders = {"myelin": fused.compute, "myelin -O0": unfused.compute,
                  **onnx_runners(chain_onnx(chain, shape), {"x": x}),
                  "numpy": lambda: chain_numpy(chain, x)}
    return compare(f"10 element-wise ops ({name}) on float32[{shape[0]}x{shape[1]}]", contenders)


def bench_layer_norm_gelu(rows=128, width=768):
    rng = np.random.default_rng(0)
    gamma = rng.standard_normal(width, dtype=np.float32)
    beta = rng.standard_normal(width, dtype=np.float32)
    x = rng.standard_normal((rows, width), dtype=np.float32)
    flow = layer_norm_gelu_flow(rows, width, gamma, beta)
    fused = compiled(flow, "block", x)
    unfused = compiled(flow, "block", x, level=0)
    fused.compute()
    expected = myelin.reference.run(flow, "block", {"block/x": x})["block/y"]
    assert np.allclose(np.asarray(fused["block/y"]), expected, rtol=1e-4, atol=1e-5)
    contenders = {"myelin": fused.compute, "myelin -O0": unfused.compute,
                  **onnx_runners(layer_norm_gelu_onnx(rows, width, gamma, beta), {"x": x}),
                  "numpy": lambda: layer_norm_gelu_numpy(x, gamma, beta)}
    return compare(f"LayerNorm + GELU on float32[{rows}x{width}]", contenders)


def main():
    for name, chain in CHAINS.items():
        bench_chain(name, chain)
    bench_layer_norm_gelu()


if __name__ == "__main__":
    main()
