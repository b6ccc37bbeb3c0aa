"""myelin.onnx.localize: the first node whose value differs from ONNX Runtime's, found with
every value made an output or, for a fault only in fused code, by cutting the model."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import myelin.onnx
from myelin.importers.onnx import compare as localizing
from myelin.importers.onnx.model import OnnxModel

CHAIN = ["Relu", "Exp", "Neg", "Abs", "Sqrt", "Sin", "Cos", "Tanh", "Sigmoid"]


def _chain_model():
    """x -> Relu -> Exp -> ... -> Sigmoid, each node's output named after its position."""
    nodes = [helper.make_node(op, ["x" if i == 0 else f"v{i - 1}"], [f"v{i}"], name=f"n{i}")
             for i, op in enumerate(CHAIN)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [4, 7])], [helper.make_tensor_value_info(
            f"v{len(CHAIN) - 1}", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds():
    return {"x": np.random.default_rng().standard_normal((4, 7)).astype(np.float32)}


class _Faulty(OnnxModel):
    """An OnnxModel whose value ``v<wrong>`` is off by one, in every compile where
    ``fused_only`` is False, else only where it is the model's sole output (as a fault of
    fused code would be); the values after it then follow from the wrong one."""
    wrong, fused_only = 3, False

    def run(self, feeds):
        names = self.output_names
        if self.fused_only and len(names) > 1:
            return super().run(feeds)
        last = max(int(name[1:]) for name in names)
        results = super().run(feeds)
        if last < self.wrong:
            return results
        return [r + 1 if int(n[1:]) >= self.wrong else r for n, r in zip(names, results)]


def test_agreeing_model_has_no_first_wrong_value():
    report = myelin.onnx.localize(_chain_model(), _feeds())
    assert report.first is None and len(report.values) == len(CHAIN)
    assert all(v.error <= 1 for v in report.values)
    assert "every value agrees" in str(report)


@pytest.mark.parametrize("fused_only", [False, True])
def test_first_wrong_value_is_found(monkeypatch, fused_only):
    monkeypatch.setattr(localizing, "OnnxModel", type("Faulty", (_Faulty,),
                                                      {"fused_only": fused_only}))
    report = myelin.onnx.localize(_chain_model(), _feeds())
    assert report.first.node == "n3" and report.first.op_type == "Abs"
    assert report.first.mismatched == 4 * 7
    assert report.method == ("cut" if fused_only else "outputs")
    assert "first wrong: v3 of node n3 (Abs)" in str(report)


def test_comparison_has_an_absolute_floor_and_exact_integers():
    compare = localizing.compare_values
    assert compare(np.float32([1e-9, 1.0]), np.float32([3e-9, 1.0]), 1e-4, 1e-6)[0] <= 1
    assert compare(np.float32([1e-3]), np.float32([1.1e-3]), 1e-4, 1e-6)[1] == 1
    assert compare(np.float32([np.nan, 2]), np.float32([np.nan, 2]), 1e-4, 1e-6)[0] == 0
    assert compare(np.float32([np.nan]), np.float32([1]), 1e-4, 1e-6)[1] == 1
    assert compare(np.int8([3, 4, 5]), np.int8([3, 5, 5]), 1e-4, 1e-6)[1:] == (1, 1.0)
    assert compare(np.zeros((2, 3)), np.zeros((3, 2)), 1e-4, 1e-6)[0] == float("inf")
