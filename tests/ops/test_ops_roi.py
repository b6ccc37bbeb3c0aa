"""The RoiAlign registry entry: its shape rule and errors, and its float64 reference against
ONNX Runtime (both modes, both coordinate modes, sampling ratios 0, 1 and 2, odd sizes, ROIs
partly outside the map or of negative extent)."""

import itertools

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import myelin
from myelin import reference
from myelin.errors import InputError, ShapeError


def _flow(x, rois, batch, attrs):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    variables = [f.var("x", str(x.dtype), x.shape), f.var("rois", str(rois.dtype), rois.shape),
                 f.var("batch", str(batch.dtype), batch.shape)]
    f.op("RoiAlign", variables, attrs=attrs)
    return flow, dict(zip(variables, (x, rois, batch)))


def _reference(x, rois, batch, attrs):
    flow, inputs = _flow(x, rois, batch, attrs)
    return list(reference.run(flow, "f", inputs).values())[0]


def _onnx_runtime(x, rois, batch, attrs):
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
                      helper.make_tensor_value_info("rois", TensorProto.FLOAT, None),
                      helper.make_tensor_value_info("batch", TensorProto.INT64, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x, "rois": rois, "batch": batch})[0]


def random_rois(rng, count, height, width, batches, scale=1.0):
    """ROIs around a map of ``height`` x ``width`` (in image coordinates: / ``scale``), some
    reaching outside it, some of negative extent."""
    start = rng.uniform(-3, [width + 2, height + 2], (count, 2))
    size = rng.uniform(-1, [width / 2 + 3, height / 2 + 3], (count, 2))
    rois = (np.concatenate([start, start + size], axis=1) / scale).astype(np.float32)
    return rois, rng.integers(0, batches, count).astype(np.int64)


@pytest.mark.parametrize("mode,coordinates,ratio",
                         list(itertools.product(["avg", "max"],
                                                ["half_pixel", "output_half_pixel"], [0, 1, 2])))
def test_reference_matches_onnx_runtime(mode, coordinates, ratio):
    rng = np.random.default_rng(ratio + 3 * len(mode) + len(coordinates))
    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    rois, batch = random_rois(rng, 8, 7, 9, 2, scale=0.5)
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinates,
             "output_height": 3, "output_width": 2, "sampling_ratio": ratio,
             "spatial_scale": 0.5}
    got = _reference(x, rois, batch, attrs)
    want = _onnx_runtime(x, rois, batch, attrs)
    assert got.shape == want.shape == (8, 3, 3, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_shape_rule():
    x = np.zeros((2, 5, 6, 7), np.float32)
    rois, batch = np.zeros((4, 4), np.float32), np.zeros(4, np.int64)
    flow, _ = _flow(x, rois, batch, {"output_height": 3, "output_width": 2})
    (op,) = flow.funcs["f"].ops
    assert myelin.ops.infer(op)[0].shape == (4, 5, 3, 2)


@pytest.mark.parametrize("change,match", [
    ({"attrs": {"mode": "sum"}}, "mode"),
    ({"attrs": {"coordinate_transformation_mode": "asymmetric"}}, "coordinate"),
    ({"attrs": {"output_height": 0}}, "at least 1"),
    ({"attrs": {"sampling_ratio": -1}}, "sampling_ratio"),
    ({"x": np.zeros((1, 2, 3), np.float32)}, r"\[N, C, H, W\]"),
    ({"rois": np.zeros((3, 5), np.float32)}, r"\[R, 4\]"),
    ({"batch": np.zeros(2, np.int64)}, r"\[R\]"),
    ({"rois": np.zeros((3, 4), np.float64)}, "same type"),
    ({"batch": np.zeros(3, np.float32)}, "int32 or int64"),
    ({"x": np.zeros((1, 2, 0, 4), np.float32)}, "empty spatial axis"),
])
def test_errors(change, match):
    arrays = {"x": np.zeros((1, 2, 3, 4), np.float32), "rois": np.zeros((3, 4), np.float32),
              "batch": np.zeros(3, np.int64)}
    arrays.update({k: v for k, v in change.items() if k != "attrs"})
    with pytest.raises(ShapeError, match=match):
        _flow(arrays["x"], arrays["rois"], arrays["batch"], change.get("attrs", {}))


def test_batch_index_out_of_range():
    x = np.ones((2, 1, 3, 3), np.float32)
    rois = np.array([[0, 0, 2, 2]], np.float32)
    for index in (2, -1):
        with pytest.raises(InputError, match="batch index"):
            _reference(x, rois, np.array([index], np.int64), {})


def test_adaptive_sampling_of_huge_and_nan_rois_is_bounded():
    x = np.ones((1, 2, 4, 5), np.float32)
    rois = np.array([[-1e30, -1e30, 1e30, 1e30], [np.nan, 0, 3, 3], [0, 0, np.inf, 2]],
                    np.float32)
    got = _reference(x, rois, np.zeros(3, np.int64), {"output_height": 2, "output_width": 2})
    assert got.shape == (3, 2, 2, 2)
    assert np.all(got[1] == 0)      # a NaN extent: no samples
