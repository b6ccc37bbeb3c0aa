"""The Myelin guide's example, y = softmax(relu(x W + b)) with x[1,64], W[64,256], timed
against ONNX Runtime, PyTorch eager and NumPy in one run.

Run: ``python benchmarks/guide_example.py``. Prints latencies and the ratio of myelin's
latency to each system's (below 1: myelin is faster).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import compare, ort_session  # noqa: E402

import myelin  # noqa: E402


def build():
    rng = np.random.default_rng(0)
    weights = rng.random((64, 256), dtype=np.float32)
    bias = rng.random(256, dtype=np.float32)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    W = f.array("W", weights)
    b = f.array("b", bias)
    x = f.var("x", myelin.DT_FLOAT, [1, 64])
    y = f.softmax(f.relu(f.add(f.matmul(x, W), b)), name="y")
    return flow, x, y, weights, bias


def onnx_model(weights, bias):
    """The same model as ONNX bytes (opset 17): input x[1,64], output y[1,256]."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["z"]),
         helper.make_node("Relu", ["z"], ["r"]),
         helper.make_node("Softmax", ["r"], ["y"], axis=-1)],
        "guide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
        [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def onnx_session(weights, bias, threads=None):
    """:func:`onnx_model` in an ONNX Runtime session on ``threads`` threads (default: its
    pool; None if ONNX or ONNX Runtime is not installed)."""
    try:
        import onnx  # noqa: F401 (onnx_model needs it)
        import onnxruntime  # noqa: F401 (ort_session needs it)
    except ImportError:
        return None
    return ort_session(onnx_model(weights, bias), threads)


def main():
    flow, x, y, weights, bias = build()
    net = myelin.Compiler().compile(flow)
    data = net.cell("f").instance()
    xv = np.random.default_rng(1).random((1, 64), dtype=np.float32)
    data[x] = xv
    data.compute()
    expected = np.maximum(xv @ weights + bias, 0)
    expected = np.exp(expected - expected.max()) / np.exp(expected - expected.max()).sum()
    assert np.allclose(np.asarray(data[y]), expected, rtol=1e-4, atol=1e-6)

    contenders = {"myelin": data.compute}
    xin, yout = data[x].numpy(), data[y].numpy()

    def myelin_io():
        xin[...] = xv
        data.compute()
        return yout.copy()

    contenders["myelin+io"] = myelin_io
    session = onnx_session(weights, bias)
    if session is not None:
        feed = {"x": xv}
        contenders["onnxruntime"] = lambda: session.run(None, feed)
    threads = None
    try:
        import torch
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        tw, tb, tx = torch.from_numpy(weights), torch.from_numpy(bias), torch.from_numpy(xv)

        def torch_eager():
            with torch.no_grad():
                return torch.softmax(torch.relu(tx @ tw + tb), dim=-1)

        contenders["pytorch"] = torch_eager
    except ImportError:
        pass

    def numpy_forward():
        z = np.maximum(xv @ weights + bias, 0)
        e = np.exp(z - z.max())
        return e / e.sum()

    contenders["numpy"] = numpy_forward
    compare("guide example: softmax(relu(x[1,64] W[64,256] + b))", contenders)
    if threads:
        torch.set_num_threads(threads)      # later benchmarks get PyTorch's default again


if __name__ == "__main__":
    main()
