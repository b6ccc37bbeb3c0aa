"""Staged models (myelin/importers/onnx/staged.py) against ONNX Runtime: compiled stages with
data-dependent ops between them, over inputs giving different counts (none included):
NonMaxSuppression feeding a RoiAlign and a Conv, a NonZero count feeding a Reshape, an If
whose branch holds the NonMaxSuppression (torchvision's batched NMS); what compiles when;
the errors."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import myelin.onnx
from myelin.errors import InputError, UnsupportedOpError

F, I = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _compare(model, cases):
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    loaded = myelin.onnx.load(model)
    assert loaded.staged is not None
    for feeds in cases:
        want = session.run(None, feeds)
        got = loaded.run(feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    return loaded


def _detector():
    """scores -> NonMaxSuppression -> the kept boxes -> RoiAlign on a feature map -> Conv ->
    Relu; outputs the features and the kept indices."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "floor"],
                         ["selected"]),
        helper.make_node("Gather", ["selected", "two"], ["which"], axis=1),
        helper.make_node("Squeeze", ["boxes", "zero"], ["all_boxes"]),
        helper.make_node("Gather", ["all_boxes", "which"], ["kept"], axis=0),
        helper.make_node("Shape", ["which"], ["count"]),
        helper.make_node("ConstantOfShape", ["count"], ["batch"],
                         value=numpy_helper.from_array(np.array([0], np.int64))),
        helper.make_node("RoiAlign", ["features", "kept", "batch"], ["pooled"],
                         output_height=3, output_width=3, sampling_ratio=2,
                         spatial_scale=0.5),
        helper.make_node("Conv", ["pooled", "w"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["out"]),
    ]
    constants = [("limit", np.array([6], np.int64)), ("iou", np.array([0.4], np.float32)),
                 ("floor", np.array([0.5], np.float32)), ("two", np.array(2, np.int64)),
                 ("zero", np.array([0], np.int64)),
                 ("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))]
    return _model(nodes, [("boxes", F, [1, 12, 4]), ("scores", F, [1, 1, 12]),
                          ("features", F, [1, 3, 9, 11])],
                  [("out", F), ("selected", I)], constants)


def _detector_inputs(rng, most):
    corners = rng.uniform(0, 16, (1, 12, 2))
    boxes = np.concatenate([corners, corners + rng.uniform(1, 8, (1, 12, 2))], axis=2)
    return {"boxes": boxes.astype(np.float32),
            "scores": rng.uniform(0, most, (1, 1, 12)).astype(np.float32),
            "features": rng.standard_normal((1, 3, 9, 11)).astype(np.float32)}


def test_detector_over_counts_including_none():
    rng = np.random.default_rng(1)
    cases = [_detector_inputs(rng, most) for most in (1.0, 0.4, 1.0, 0.6)]
    loaded = _compare(_detector(), cases)
    counts = [len(loaded.run(feeds)[1]) for feeds in cases]
    assert 0 in counts and len(set(counts)) >= 3, counts
    # The stage after the NonMaxSuppression compiled once per count; a count seen before
    # compiled nothing more.
    after = [c for c in loaded.staged.compiles if c[0] == "main stage 1"]
    assert len(after) == len(set(counts))
    loaded.run(cases[0])
    assert len([c for c in loaded.staged.compiles if c[0] == "main stage 1"]) == len(after)


def test_nonzero_count_feeds_reshape_and_range():
    nodes = [
        helper.make_node("Greater", ["x", "zero_f"], ["positive"]),
        helper.make_node("NonZero", ["positive"], ["where"]),
        helper.make_node("Shape", ["where"], ["where_shape"]),
        helper.make_node("Gather", ["where_shape", "one"], ["count"], axis=0),
        helper.make_node("Concat", ["count", "one"], ["shape"], axis=0),
        helper.make_node("Squeeze", ["where", "zero"], ["index"]),
        helper.make_node("Gather", ["x", "index"], ["values"], axis=0),
        helper.make_node("Reshape", ["values", "shape"], ["column"]),
        helper.make_node("Squeeze", ["count", "zero"], ["limit"]),
        helper.make_node("Range", ["start", "limit", "step"], ["steps"]),
        helper.make_node("Mul", ["column", "twice"], ["out"]),
    ]
    model = _model(nodes, [("x", F, [7])], [("out", F), ("steps", I)],
                   [("zero_f", np.array(0, np.float32)), ("zero", np.array([0], np.int64)),
                    ("one", np.array([1], np.int64)), ("start", np.array(0, np.int64)),
                    ("step", np.array(1, np.int64)), ("twice", np.array(2, np.float32))])
    rng = np.random.default_rng(2)
    cases = [{"x": rng.standard_normal(7).astype(np.float32)} for _ in range(2)]
    cases.append({"x": -np.ones(7, np.float32)})
    _compare(model, cases)


def _batched_nms():
    """torchvision's batched NMS as exported: boxes scored above a threshold (NonZero), then
    ``if there are none: [] else: NonMaxSuppression``, the kept boxes gathered."""
    then = helper.make_graph(
        [helper.make_node("Constant", [], ["nothing"],
                          value=numpy_helper.from_array(np.zeros(0, np.int64)))],
        "then", [], [helper.make_tensor_value_info("nothing", I, [0])])
    other = helper.make_graph(
        [helper.make_node("Unsqueeze", ["found", "zero"], ["b3"]),
         helper.make_node("Unsqueeze", ["found_scores", "zero"], ["s2"]),
         helper.make_node("Unsqueeze", ["s2", "zero"], ["s3"]),
         helper.make_node("NonMaxSuppression", ["b3", "s3", "limit", "iou"], ["picked"]),
         helper.make_node("Gather", ["picked", "two"], ["column"], axis=1),
         helper.make_node("Squeeze", ["column", "one"], ["kept"])],
        "else", [], [helper.make_tensor_value_info("kept", I, None)])
    nodes = [
        helper.make_node("Greater", ["scores", "floor"], ["good"]),
        helper.make_node("NonZero", ["good"], ["where"]),
        helper.make_node("Squeeze", ["where", "zero"], ["index"]),
        helper.make_node("Gather", ["boxes", "index"], ["found"], axis=0),
        helper.make_node("Gather", ["scores", "index"], ["found_scores"], axis=0),
        helper.make_node("Shape", ["found"], ["shape"]),
        helper.make_node("ReduceProd", ["shape"], ["size"], keepdims=0),
        helper.make_node("Equal", ["size", "zero_scalar"], ["empty"]),
        helper.make_node("If", ["empty"], ["keep"], then_branch=then, else_branch=other),
        helper.make_node("Gather", ["found", "keep"], ["out"], axis=0),
    ]
    return _model(nodes, [("boxes", F, [20, 4]), ("scores", F, [20])], [("out", F)],
                  [("floor", np.array(0.3, np.float32)), ("zero", np.array([0], np.int64)),
                   ("one", np.array([1], np.int64)), ("two", np.array([2], np.int64)),
                   ("zero_scalar", np.array(0, np.int64)), ("limit", np.array([50], np.int64)),
                   ("iou", np.array([0.3], np.float32))])


def test_if_with_non_max_suppression_in_a_branch():
    rng = np.random.default_rng(3)
    cases = []
    for most in (1.0, 0.2, 0.8):
        corners = rng.uniform(0, 10, (20, 2))
        boxes = np.concatenate([corners, corners + rng.uniform(1, 5, (20, 2))], axis=1)
        cases.append({"boxes": boxes.astype(np.float32),
                      "scores": rng.uniform(0, most, 20).astype(np.float32)})
    loaded = _compare(_batched_nms(), cases)
    assert any("else_branch" in c[0] for c in loaded.staged.compiles)


def test_data_dependent_op_on_constants_or_shapes_needs_no_stages():
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("NonZero", ["shape"], ["where"]),
             helper.make_node("Cast", ["where"], ["cast"], to=F),
             helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             helper.make_node("Add", ["cast", "total"], ["out"])]
    model = _model(nodes, [("x", F, [2, 0, 3])], [("out", F)])
    loaded = myelin.onnx.load(model)
    assert loaded.staged is None
    x = np.zeros((2, 0, 3), np.float32)
    np.testing.assert_array_equal(loaded.run({"x": x})[0], [[0, 2]])


def test_nonzero_in_a_loop_body_is_unsupported():
    body = helper.make_graph(
        [helper.make_node("NonZero", ["v"], ["where"]),
         helper.make_node("ReduceSum", ["where"], ["total"], keepdims=0),
         helper.make_node("Cast", ["total"], ["as_float"], to=F),
         helper.make_node("Add", ["v", "as_float"], ["v_next"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [helper.make_tensor_value_info("i", I, []),
                 helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v", F, [4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_next", F, [4])])
    node = helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body)
    model = _model([node], [("x", F, [4])], [("y", F)], [("trips", np.array(3, np.int64))])
    with pytest.raises(UnsupportedOpError, match="its body has NonZero"):
        myelin.onnx.load(model)


def test_inputs_are_checked_and_shapes_at_load_compile_the_first_stage():
    model = _detector()
    loaded = myelin.onnx.load(model, input_shapes={"boxes": [1, 12, 4],
                                                   "scores": [1, 1, 12],
                                                   "features": [1, 3, 9, 11]})
    assert [c[0] for c in loaded.staged.compiles] == ["main stage 0"]
    feeds = _detector_inputs(np.random.default_rng(4), 1.0)
    with pytest.raises(InputError, match="input scores is float32"):
        loaded.run(dict(feeds, scores=feeds["scores"].astype(np.float64)))
    with pytest.raises(InputError, match="the model declares"):
        loaded.run(dict(feeds, boxes=feeds["boxes"][:, :5]))
