"""NonZero, NonMaxSuppression, Unique and Compress against ONNX Runtime: on run-time inputs
(run on the host by a staged model) and on constants (computed at import by their
converters), over inputs giving different counts, none included."""

import itertools

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import myelin.onnx
from myelin.errors import InputError, ShapeError


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    """``inputs``: name -> example array (its type; shape left open); ``outputs``: name ->
    ONNX element type."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), None)
         for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w)


def _check(node, outputs, cases):
    """``node`` on each case (a dict of arrays) as run-time inputs, then as constants."""
    names = [n for n in node.input if n]
    ort = {}
    staged = myelin.onnx.load(_model([node], cases[0], outputs))
    assert staged.staged is not None
    for feeds in cases:
        model = _model([node], feeds, outputs)
        want = onnxruntime.InferenceSession(model.SerializeToString(),
                                            providers=["CPUExecutionProvider"]).run(None, feeds)
        ort[id(feeds)] = want
        _same(staged.run(feeds), want)
    for feeds in cases[:2]:
        folded = myelin.onnx.load(_model([node], {}, outputs, [(n, feeds[n]) for n in names]))
        assert folded.staged is None
        _same(folded.run({}), ort[id(feeds)])


def _nonzero_cases(rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x[x < 0.3] = 0
    x[0, 0, 0], x[1, 2, 3], x[2, 3, 4] = np.nan, -0.0, 0.0
    return [{"x": x}, {"x": np.zeros((3, 4, 5), np.float32)},
            {"x": np.where(x != 0, 2.5, 0).astype(np.float32)}]


def test_nonzero():
    rng = np.random.default_rng(0)
    node = helper.make_node("NonZero", ["x"], ["y"])
    _check(node, {"y": TensorProto.INT64}, _nonzero_cases(rng))
    _check(node, {"y": TensorProto.INT64},
           [{"x": rng.random((7,)) < 0.4}, {"x": np.zeros(5, bool)}, {"x": np.ones(2, bool)}])
    _check(node, {"y": TensorProto.INT64},
           [{"x": np.array(3, np.int64)}, {"x": np.array(0, np.int64)},
            {"x": rng.integers(-1, 2, (2, 9))}])


def _boxes(rng, batches, count, center):
    corners = rng.uniform(0, 10, (batches, count, 2)).astype(np.float32)
    sizes = rng.uniform(0.5, 4, (batches, count, 2)).astype(np.float32)
    if center:
        return np.concatenate([corners, sizes], axis=2)
    boxes = np.concatenate([corners, corners + sizes], axis=2)
    flip = rng.random((batches, count)) < 0.3          # corners given in either order
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    boxes[:, :2, 2:] = boxes[:, :2, :2]                  # boxes of no area
    return boxes


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression(center):
    rng = np.random.default_rng(center)
    outputs = {"selected": TensorProto.INT64}
    # (max boxes per class, iou, score threshold or None): some kept, all kept, none.
    for limit, iou, floor in [(4, 0.4, 0.2), (100, 0.0, None), (3, 1.0, 0.5), (0, 0.5, 0.1),
                              (5, 0.5, 0.999)]:
        names = ["boxes", "scores", "limit", "iou"] + (["floor"] if floor is not None else [])
        node = helper.make_node("NonMaxSuppression", names, ["selected"],
                                center_point_box=center)
        constants = {"limit": np.array([limit], np.int64), "iou": np.array([iou], np.float32),
                     "floor": np.array([floor or 0], np.float32)}
        cases = []
        for batches, classes, count in [(2, 3, 40), (1, 2, 7), (2, 1, 0)]:
            scores = rng.random((batches, classes, count)).astype(np.float32)
            scores[..., 1::5] = scores[..., ::5][..., :scores[..., 1::5].shape[-1]]   # ties
            case = {"boxes": _boxes(rng, batches, count, center), "scores": scores}
            case.update((n, constants[n]) for n in names[2:])
            cases.append(case)
        _check(node, outputs, cases)


def test_non_max_suppression_optional_inputs_and_errors():
    rng = np.random.default_rng(3)
    boxes, scores = _boxes(rng, 1, 9, 0), rng.random((1, 2, 9)).astype(np.float32)
    outputs = {"selected": TensorProto.INT64}
    _check(helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["selected"]), outputs,
           [{"boxes": boxes, "scores": scores}])
    _check(helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "", "floor"],
                            ["selected"]), outputs,
           [{"boxes": boxes, "scores": scores, "limit": np.array([2], np.int64),
             "floor": np.array([0.4], np.float32)}])
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou"],
                            ["selected"])
    feeds = {"boxes": boxes, "scores": scores, "limit": np.array([2], np.int64),
             "iou": np.array([1.5], np.float32)}
    model = myelin.onnx.load(_model([node], feeds, outputs))
    with pytest.raises(InputError, match="iou_threshold"):
        model.run(feeds)
    with pytest.raises(ShapeError, match="boxes must have shape"):
        model.run(dict(feeds, boxes=boxes[:, :5], iou=np.array([0.5], np.float32)))


def test_non_max_suppression_many_boxes_of_classes_kept_apart():
    # torchvision's batched NMS: one class, boxes of each label shifted apart.
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 30, 3000)
    boxes = _boxes(rng, 1, 3000, 0) + (labels * 20.0)[None, :, None].astype(np.float32)
    boxes[0, ::97, 3] += 400        # a few wide boxes, compared with every kept one
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou"],
                            ["selected"])
    feeds = {"boxes": boxes, "scores": rng.random((1, 1, 3000)).astype(np.float32),
             "limit": np.array([100000], np.int64), "iou": np.array([0.3], np.float32)}
    model = _model([node], feeds, {"selected": TensorProto.INT64})
    want = onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, feeds)
    _same(myelin.onnx.load(model).run(feeds), want)


@pytest.mark.parametrize("axis,ordered", list(itertools.product([None, 0, 1, -1], [0, 1])))
def test_unique(axis, ordered):
    rng = np.random.default_rng(5)
    attrs = {"sorted": ordered} if axis is None else {"sorted": ordered, "axis": axis}
    node = helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], **attrs)
    outputs = {"y": TensorProto.FLOAT, "first": TensorProto.INT64,
               "inverse": TensorProto.INT64, "counts": TensorProto.INT64}
    x = rng.integers(-2, 3, (6, 4)).astype(np.float32)
    x[3] = x[1]
    x[:, 2] = x[:, 0]
    cases = [{"x": x}, {"x": np.full((3, 5), 7, np.float32)},
             {"x": rng.integers(0, 2, (5, 2)).astype(np.float32)}]
    _check(node, outputs, cases)
    _check(helper.make_node("Unique", ["x"], ["y"], **attrs), {"y": TensorProto.FLOAT},
           cases[:1])


def test_unique_integers_and_empty():
    rng = np.random.default_rng(6)
    node = helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], sorted=0)
    outputs = {"y": TensorProto.INT64, "first": TensorProto.INT64,
               "inverse": TensorProto.INT64, "counts": TensorProto.INT64}
    _check(node, outputs, [{"x": rng.integers(0, 9, (4, 3))}, {"x": np.zeros((0,), np.int64)}])


def test_unique_nan_is_one_value():
    # ONNX Runtime's Unique merges NaN with every value; myelin counts NaNs as one value.
    node = helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"])
    x = np.array([np.nan, 1, np.nan, -0.0, 0.0, 1], np.float32)
    model = _model([node], {"x": x}, {"y": TensorProto.FLOAT, "first": TensorProto.INT64,
                                      "inverse": TensorProto.INT64,
                                      "counts": TensorProto.INT64})
    y, first, inverse, counts = myelin.onnx.load(model).run({"x": x})
    np.testing.assert_array_equal(y, [0, 1, np.nan])
    np.testing.assert_array_equal(first, [3, 1, 0])
    np.testing.assert_array_equal(inverse, [2, 1, 2, 0, 0, 1])
    np.testing.assert_array_equal(counts, [2, 2, 2])


@pytest.mark.parametrize("axis", [None, 0, 1, -2])
def test_compress(axis):
    rng = np.random.default_rng(7)
    node = helper.make_node("Compress", ["x", "condition"], ["y"],
                            **({} if axis is None else {"axis": axis}))
    x = rng.standard_normal((3, 5)).astype(np.float32)
    # Shorter than the axis, longer than it (the rest ignored), all false.
    cases = [{"x": x, "condition": np.array([1, 0, 1], bool)},
             {"x": x, "condition": np.array([0, 1, 1, 0, 1, 1, 0, 1], bool)},
             {"x": x, "condition": np.zeros(4, bool)}]
    _check(node, {"y": TensorProto.FLOAT}, cases)


def test_compress_known_condition_gathers_run_time_data():
    rng = np.random.default_rng(8)
    node = helper.make_node("Compress", ["x", "condition"], ["y"], axis=1)
    model = _model([node], {"x": np.zeros((2, 4), np.float32)}, {"y": TensorProto.FLOAT},
                   [("condition", np.array([1, 0, 0, 1], bool))])
    loaded = myelin.onnx.load(model)
    assert loaded.staged is None
    x = rng.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_array_equal(loaded.run({"x": x})[0], x[:, [0, 3]])


def test_host_ops_are_supported():
    ops = set(myelin.onnx.supported_ops())
    assert {"NonZero", "NonMaxSuppression", "Unique", "Compress", "RoiAlign"} <= ops
