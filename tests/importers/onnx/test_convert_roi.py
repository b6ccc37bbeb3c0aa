"""ONNX RoiAlign (opsets 10 and 16) through myelin.onnx against ONNX Runtime: both modes,
both coordinate modes, sampling ratios 0, 1 and 2, odd sizes, ROIs partly outside the map."""

import itertools

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import myelin.onnx
from test_ops_roi import random_rois


def _check(attrs, opset, shape, count, scale):
    rng = np.random.default_rng(len(str(attrs)) + opset)
    x = rng.standard_normal(shape).astype(np.float32)
    rois, batch = random_rois(rng, count, shape[2], shape[3], shape[0], scale)
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], spatial_scale=scale,
                            **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
                      helper.make_tensor_value_info("rois", TensorProto.FLOAT, [count, 4]),
                      helper.make_tensor_value_info("batch", TensorProto.INT64, [count])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {"x": x, "rois": rois, "batch": batch}
    want = onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = myelin.onnx.load(model).run(feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode,coordinates,ratio",
                         list(itertools.product(["avg", "max"],
                                                ["half_pixel", "output_half_pixel"], [0, 1, 2])))
def test_roi_align_opset16(mode, coordinates, ratio):
    _check({"mode": mode, "coordinate_transformation_mode": coordinates, "sampling_ratio": ratio,
            "output_height": 3, "output_width": 5}, 16, (2, 3, 11, 7), 9, 0.5)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_opset10_and_defaults(mode):
    # Opset 10 has no coordinate_transformation_mode: output_half_pixel.
    _check({"mode": mode, "output_height": 2, "output_width": 2}, 10, (1, 4, 6, 5), 5, 1.0)
    _check({}, 16, (3, 2, 5, 9), 4, 0.25)
