"""benchmarks/profile_vs_ort.py: myelin's and ONNX Runtime's profiles of one model grouped
alike, on a two-layer CNN built with onnx.helper."""

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import profile_vs_ort  # noqa: E402


def _cnn(path, batch=1):
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("w1", (16, 8, 3, 3)), ("w2", (16, 16, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("MaxPool", ["c2"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 16, 6, 6])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_both_profiles_are_grouped_alike(tmp_path):
    path = tmp_path / "cnn.onnx"
    _cnn(str(path))
    lines = profile_vs_ort.report(str(path), threads=1, runs=3)
    assert lines[0].startswith("cnn.onnx, 1 thread(s), 3 calls each: myelin ")
    rows = {line.split("  ")[0].strip(): line.split()[-4:] for line in lines[2:]}
    for group in ("conv 3x3 -> 12x12", "conv 1x1 -> 12x12"):
        mine, theirs, ratio, rate = rows[group]
        assert float(mine) > 0 and float(theirs) > 0 and float(rate) > 0
        assert abs(float(ratio) - float(mine) / float(theirs)) <= 0.1 * float(ratio)
    assert "MaxPool" in rows


def test_dynamic_dimensions_take_the_given_size(tmp_path):
    path = tmp_path / "cnn.onnx"
    _cnn(str(path), batch="batch")
    assert profile_vs_ort.random_inputs(onnx.load(str(path)), 3)["x"].shape == (3, 8, 12, 12)
    lines = profile_vs_ort.report(str(path), threads=1, runs=2, dynamic=3)
    assert any(line.startswith("conv 3x3 -> 12x12") for line in lines[2:])
