"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss converters against ONNX Runtime."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import myelin.onnx

_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
          np.dtype(np.int32): TensorProto.INT32}


def _case(op, shape, reduction, weight, ignore_index, log_prob=False, target_type=np.int64,
          opset=13, seed=0):
    """(model, feeds) for one loss node on random scores and targets (some equal to
    ``ignore_index``)."""
    rng = np.random.default_rng(seed)
    classes = shape[1]
    feeds = {"x": rng.standard_normal(shape).astype(np.float32),
             "target": rng.integers(0, classes, shape[:1] + shape[2:]).astype(target_type)}
    if ignore_index is not None:
        flat = feeds["target"].reshape(-1)
        flat[rng.random(flat.size) < 0.3] = ignore_index
    if weight:
        feeds["weight"] = rng.random(classes).astype(np.float32) + 0.1
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    outputs = ["loss", "log_prob"] if log_prob else ["loss"]
    node = helper.make_node(op, list(feeds), outputs, **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, _TYPES[v.dtype], v.shape)
                      for n, v in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), feeds


def _check(model, feeds):
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    actual = myelin.onnx.load(model).run(feeds)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


_CASES = [((5, 4), "mean", False, None), ((5, 4), "sum", True, None),
          ((3, 4, 6), "none", True, 2), ((3, 5, 2, 3), "mean", True, -1),
          ((2, 3, 4), "mean", False, 1), ((2, 3, 2, 2, 2), "sum", False, 7)]


@pytest.mark.parametrize("shape,reduction,weight,ignore_index", _CASES)
def test_negative_log_likelihood_loss(shape, reduction, weight, ignore_index):
    model, feeds = _case("NegativeLogLikelihoodLoss", shape, reduction, weight, ignore_index,
                         opset=22, seed=len(shape))
    _check(model, feeds)


@pytest.mark.parametrize("shape,reduction,weight,ignore_index", _CASES)
@pytest.mark.parametrize("log_prob", [False, True])
def test_softmax_cross_entropy_loss(shape, reduction, weight, ignore_index, log_prob):
    model, feeds = _case("SoftmaxCrossEntropyLoss", shape, reduction, weight, ignore_index,
                         log_prob=log_prob, seed=len(shape) + 1)
    _check(model, feeds)


def test_int32_targets_and_old_opset():
    model, feeds = _case("NegativeLogLikelihoodLoss", (4, 3, 5), "mean", True, 0,
                         target_type=np.int32, opset=12)
    _check(model, feeds)
    model, feeds = _case("SoftmaxCrossEntropyLoss", (4, 3, 5), "none", False, None,
                         log_prob=True, target_type=np.int32, opset=12)
    _check(model, feeds)
