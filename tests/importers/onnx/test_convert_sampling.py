"""GridSample (opsets 16 and 22, 4-D and 5-D) and AffineGrid converters against ONNX Runtime,
and AffineGrid feeding GridSample (a spatial transformer)."""

import itertools

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import myelin.onnx


def _model(nodes, inputs, outputs, opset, initializers=()):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, n) for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, rtol=1e-4, atol=1e-5):
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    actual = myelin.onnx.load(model).run(feeds)
    for got, want in zip(actual, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("mode,padding,align",
                         list(itertools.product(["bilinear", "nearest", "bicubic"],
                                                ["zeros", "border", "reflection"], [0, 1])))
def test_grid_sample_opset16(mode, padding, align):
    rng = np.random.default_rng(len(mode) + 3 * len(padding) + align)
    feeds = {"x": rng.standard_normal((2, 3, 6, 7)).astype(np.float32),
             "grid": rng.uniform(-1.4, 1.4, (2, 5, 4, 2)).astype(np.float32)}
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode,
                            padding_mode=padding, align_corners=align)
    _check(_model([node], feeds, ["y"], 16), feeds)


@pytest.mark.parametrize("mode,padding,align",
                         list(itertools.product(["linear", "nearest"],
                                                ["zeros", "border", "reflection"], [0, 1])))
def test_grid_sample_volumetric(mode, padding, align):
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32),
             "grid": rng.uniform(-1.3, 1.3, (1, 2, 3, 4, 3)).astype(np.float32)}
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode,
                            padding_mode=padding, align_corners=align)
    _check(_model([node], feeds, ["y"], 22), feeds)


def test_grid_sample_default_attributes_opset20():
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((1, 1, 4, 4)).astype(np.float32),
             "grid": rng.uniform(-1, 1, (1, 3, 3, 2)).astype(np.float32)}
    node = helper.make_node("GridSample", ["x", "grid"], ["y"])
    _check(_model([node], feeds, ["y"], 20), feeds)


@pytest.mark.parametrize("size,align", [((2, 3, 5, 6), 0), ((2, 3, 5, 6), 1),
                                        ((1, 1, 1, 4), 0), ((2, 1, 3, 4, 5), 0),
                                        ((2, 1, 3, 4, 5), 1)])
def test_affine_grid(size, align):
    rank = len(size) - 2
    rng = np.random.default_rng(len(size) + align)
    feeds = {"theta": rng.standard_normal((size[0], rank, rank + 1)).astype(np.float32)}
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)
    model = _model([node], feeds, ["grid"], 20, [("size", np.array(size, dtype=np.int64))])
    _check(model, feeds)


def test_spatial_transformer():
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((2, 3, 8, 9)).astype(np.float32),
             "theta": (np.eye(2, 3) + 0.2 * rng.standard_normal((2, 2, 3))).astype(np.float32)}
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["grid"]),
             helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear")]
    model = _model(nodes, feeds, ["y"], 20, [("size", np.array([2, 3, 6, 7], np.int64))])
    _check(model, feeds)
