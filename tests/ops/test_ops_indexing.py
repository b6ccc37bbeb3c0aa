"""Registry entries of the indexing ops and the new element-wise ops: shape rules, errors, and the
float64 references checked against ONNX's reference evaluator and hand-worked examples."""

import numpy as np
import pytest

import myelin
from myelin import reference

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def ours(optype, inputs, attrs=None, outputs=1):
    """Our reference on NumPy ``inputs``; returns the list of output arrays."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    variables = [f.var(f"in{i}", str(np.asarray(a).dtype), np.shape(a))
                 for i, a in enumerate(inputs)]
    result = f.op(optype, variables, attrs=attrs)
    result = result if isinstance(result, list) else [result]
    values = reference.run(flow, "f", dict(zip(variables, inputs)))
    return [values[v.name] for v in result]


def theirs(optype, inputs, attrs=None, outputs=1):
    """ONNX's reference evaluator on one node with ``inputs`` (None: an omitted input)."""
    names = [f"in{i}" if a is not None else "" for i, a in enumerate(inputs)]
    node = helper.make_node(optype, names, [f"out{i}" for i in range(outputs)], **(attrs or {}))
    feeds = {n: a for n, a in zip(names, inputs) if a is not None}
    return ReferenceEvaluator(node).run(None, feeds)


def check(ours_result, theirs_result):
    assert len(ours_result) == len(theirs_result)
    for a, b in zip(ours_result, theirs_result):
        assert a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                   rtol=1e-6, atol=1e-6)


rng = np.random.default_rng()


def rand(*shape, dtype=np.float32):
    return rng.uniform(-3, 3, shape).astype(dtype)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, 2, 0, 1], [0, 3, 2, 0], [2, 0, 1, 1]], ids=str)
def test_pad_matches_onnx(mode, pads):
    x = rand(3, 5)
    value = np.array(2.5, np.float32)
    ins = [x, value] if mode == "constant" else [x]
    check(ours("Pad", ins, {"pads": pads, "mode": mode}),
          theirs("Pad", [x, np.array(pads, np.int64)] + ins[1:], {"mode": mode}))


def test_pad_negative_crops():
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    (y,) = ours("Pad", [x], {"pads": [-1, 1, 0, -2]})
    np.testing.assert_array_equal(y, [[0, 4, 5], [0, 8, 9]])
    (y,) = ours("Pad", [x], {"pads": [0, -1, 0, 2], "mode": "reflect"})
    np.testing.assert_array_equal(y, [[1, 2, 3, 2, 1], [5, 6, 7, 6, 5], [9, 10, 11, 10, 9]])


def test_tile_broadcast_to_match_onnx():
    x = rand(2, 1, 3)
    check(ours("Tile", [x], {"repeats": [2, 3, 1]}),
          theirs("Tile", [x, np.array([2, 3, 1], np.int64)]))
    check(ours("BroadcastTo", [x], {"shape": [4, 2, 5, 3]}),
          theirs("Expand", [x, np.array([4, 2, 5, 3], np.int64)]))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_axis_matches_onnx(axis):
    x = rand(4, 5, 6)
    indices = rng.integers(0, x.shape[axis], (2, 3)).astype(np.int64)
    check(ours("Gather", [x, indices], {"axis": axis}),
          theirs("Gather", [x, indices], {"axis": axis}))


def test_gather_axis_bad_index_is_an_input_error():
    with pytest.raises(myelin.InputError, match="index -1"):
        ours("Gather", [rand(3, 4), np.array([0, -1], np.int32)], {"axis": 1})


@pytest.mark.parametrize("axis", [0, 1, 2])   # ONNX's evaluator mishandles axis -1 here
def test_gather_elements_matches_onnx(axis):
    x = rand(4, 5, 6)
    shape = list(x.shape)
    shape[axis] = 7    # ONNX's evaluator needs data's extent on the other axes
    n = x.shape[axis]
    indices = rng.integers(-n, n, shape).astype(np.int64)
    check(ours("GatherElements", [x, indices], {"axis": axis}),
          theirs("GatherElements", [x, indices], {"axis": axis}))


@pytest.mark.parametrize("batch_dims,ishape", [(0, (3, 2)), (0, (2, 2, 3)), (1, (4, 2, 1)),
                                               (2, (4, 5, 1))])
def test_gather_nd_matches_onnx(batch_dims, ishape):
    x = rand(4, 5, 6)
    dims = np.array(x.shape[batch_dims:batch_dims + ishape[-1]])
    indices = rng.integers(0, dims, ishape).astype(np.int64)
    check(ours("GatherND", [x, indices], {"batch_dims": batch_dims}),
          theirs("GatherND", [x, indices], {"batch_dims": batch_dims}))


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_elements_matches_onnx(reduction, axis):
    data = rand(4, 5)
    indices = rng.integers(-data.shape[axis], data.shape[axis], (3, 4)).astype(np.int64)
    if reduction == "none":   # ONNX leaves duplicates undefined: make them unique
        indices = np.argsort(rng.random((3, 4) if axis else (4, 4)), axis=axis)[:3, :4]
        indices = indices if axis else indices[:3]
    updates = rand(3, 4)
    attrs = {"axis": axis, "reduction": reduction}
    check(ours("ScatterElements", [data, indices, updates], attrs),
          theirs("ScatterElements", [data, indices, updates], attrs))


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_matches_onnx(reduction):
    data = rand(4, 5, 3)
    indices = np.array([[1, 2], [3, 0], [1, 2]], np.int64)
    if reduction == "none":
        indices = indices[:2]
    updates = rand(len(indices), 3)
    check(ours("ScatterND", [data, indices, updates], {"reduction": reduction}),
          theirs("ScatterND", [data, indices, updates], {"reduction": reduction}))


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum_matches_onnx(exclusive, reverse, axis):
    x = rand(3, 4, 5).astype(np.float64)
    attrs = {"exclusive": exclusive, "reverse": reverse}
    check(ours("CumSum", [x], {"axis": axis, **attrs}),
          theirs("CumSum", [x, np.array(axis, np.int64)], attrs))


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_topk_matches_onnx_with_ties(largest, axis):
    x = rng.integers(0, 3, (4, 5, 6)).astype(np.float32)
    k = 3
    attrs = {"axis": axis, "largest": largest}
    check(ours("TopK", [x], {"k": k, **attrs}),
          theirs("TopK", [x, np.array([k], np.int64)], attrs, outputs=2))


def test_topk_ties_take_the_lower_index_first():
    x = np.array([2, 5, 2, 5, 1], np.int32)
    values, indices = ours("TopK", [x], {"k": 3})
    assert values.tolist() == [5, 5, 2] and indices.tolist() == [1, 3, 0]
    assert indices.dtype == np.int64
    values, indices = ours("TopK", [x], {"k": 3, "largest": False})
    assert values.tolist() == [1, 2, 2] and indices.tolist() == [4, 0, 2]


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_onehot_matches_onnx(axis):
    indices = rng.integers(-7, 7, (3, 4)).astype(np.int64)
    values = np.array([-1.5, 2.0], np.float32)
    check(ours("OneHot", [indices, values], {"depth": 5, "axis": axis}),
          theirs("OneHot", [indices, np.array(5, np.int64), values], {"axis": axis}))


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-2, 0, 1, 7])
def test_trilu_matches_onnx(upper, k):
    x = rand(2, 4, 5)
    check(ours("Trilu", [x], {"upper": upper, "k": k}),
          theirs("Trilu", [x, np.array(k, np.int64)], {"upper": upper}))


@pytest.mark.parametrize("dtype,fmod", [("int32", 0), ("int32", 1), ("int8", 0), ("uint16", 0),
                                        ("float32", 1), ("float64", 1), ("float32", 0),
                                        ("float64", 0)])
def test_mod_matches_onnx(dtype, fmod):
    x = rng.integers(-50, 50, (3, 7)).astype(dtype)
    y = rng.integers(1, 9, (7,)).astype(dtype) * np.where(rng.random(7) < 0.5, 1, -1)
    y = y.astype(dtype) if np.dtype(dtype).kind != "u" else np.abs(y).astype(dtype)
    if dtype.startswith("float"):
        x, y = x + 0.25, y * 0.75
    check(ours("Mod", [x, y], {"fmod": fmod}), theirs("Mod", [x, y], {"fmod": fmod}))


def test_mod_signs_and_zero_divisor():
    x = np.array([7, -7, 7, -7, 5], np.int32)
    y = np.array([3, 3, -3, -3, 0], np.int32)
    assert ours("Mod", [x, y])[0].tolist() == [1, 2, -2, -1, 0]
    assert ours("Mod", [x, y], {"fmod": 1})[0].tolist() == [1, -1, 1, -1, 0]


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_and_bitwise_match_onnx(direction):
    x = rng.integers(0, 255, (9,)).astype(np.uint8)
    y = rng.integers(0, 8, (9,)).astype(np.uint8)
    check(ours("BitShift", [x, y], {"direction": direction}),
          theirs("BitShift", [x, y], {"direction": direction}))
    for optype in ["BitwiseAnd", "BitwiseOr", "BitwiseXor"]:
        check(ours(optype, [x, y]), theirs(optype, [x, y]))
    check(ours("BitwiseNot", [x]), theirs("BitwiseNot", [x]))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint16"])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_integers_match_onnx(dtype, direction):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, (4, 9), endpoint=True, dtype=dtype)
    low = -4 if info.min < 0 else 0
    y = rng.integers(low, info.bits + 4, (9,)).astype(dtype)
    check(ours("BitShift", [x, y], {"direction": direction}),
          theirs("BitShift", [x, y], {"direction": direction}))


def test_float_mod_fmod_0_follows_numpy():
    x = np.array([0.0, -0.0, -3.0, 1.0, np.inf, 1.0, -4.5])
    y = np.array([-2.0, 2.0, np.inf, -np.inf, 2.0, 0.0, 2.0])
    got = ours("Mod", [x, y])[0]
    np.testing.assert_array_equal(got, [-0.0, 0.0, np.inf, -np.inf, np.nan, np.nan, 1.5])
    np.testing.assert_array_equal(np.signbit(got[:2]), [True, False])


def test_bitshift_by_the_width_or_more_is_zero():
    x = np.array([1, 2, 3], np.uint32)
    assert ours("BitShift", [x, np.array([32, 33, 31], np.uint32)],
                {"direction": "LEFT"})[0].tolist() == [0, 0, 1 << 31]


@pytest.mark.parametrize("negative,positive", [(1, 1), (0, 1), (1, 0)])
def test_isinf_isnan_match_onnx(negative, positive):
    x = np.array([1.0, np.inf, -np.inf, np.nan, -2.0], np.float32)
    attrs = {"detect_negative": negative, "detect_positive": positive}
    check(ours("IsInf", [x], attrs), theirs("IsInf", [x], attrs))
    check(ours("IsNaN", [x]), theirs("IsNaN", [x]))
    assert ours("IsNaN", [x])[0].dtype == np.bool_


@pytest.mark.parametrize("optype", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_argmax_options_match_onnx(optype, last, keepdims):
    x = rng.integers(0, 3, (4, 5)).astype(np.float32)
    attrs = {"axis": 1, "keepdims": keepdims, "select_last_index": last}
    (result,) = ours(optype, [x], dict(attrs, dtype="int64"))
    assert result.dtype == np.int64
    check([result], theirs(optype, [x], attrs))


def _builder():
    flow = myelin.Flow()
    return myelin.Builder(flow, "f")


@pytest.mark.parametrize("optype,shapes,attrs,message", [
    ("Pad", [("float32", [3, 4])], {"pads": [1, 2]}, "must have 4 entries"),
    ("Pad", [("float32", [3, 4])], {"pads": [0, 0, 0, 0], "mode": "mirror"}, "mode"),
    ("Pad", [("float32", [3, 4])], {"pads": [-2, 0, -2, 0]}, "crop more"),
    ("Pad", [("float32", [3, 4]), ("float32", [2])], {"pads": [0, 0, 0, 0]}, "scalar"),
    ("Pad", [("float32", [3, 4])], {}, "needs attribute pads"),
    ("Tile", [("float32", [3, 4])], {"repeats": [2]}, "repeats"),
    ("Tile", [("float32", [3, 4])], {"repeats": [2, -1]}, "negative"),
    ("BroadcastTo", [("float32", [3, 4])], {"shape": [3, 5]}, "does not broadcast"),
    ("BroadcastTo", [("float32", [3, 4])], {"shape": [4]}, "does not broadcast"),
    ("Gather", [("float32", [3, 4]), ("int32", [2])], {"axis": 2}, "axis 2"),
    ("Gather", [("float32", [3, 4]), ("int32", [2]), ("float32", [4])], {"axis": 1}, "oov"),
    ("GatherElements", [("float32", [3, 4]), ("int32", [2])], {}, "rank"),
    ("GatherElements", [("float32", [3, 4]), ("int32", [2, 5])], {}, "exceeds"),
    ("GatherElements", [("float32", [3, 4]), ("float32", [2, 4])], {}, "int32 or int64"),
    ("GatherND", [("float32", [3, 4]), ("int32", [2, 3])], {}, "last axis"),
    ("GatherND", [("float32", [3, 4]), ("int32", [2, 1])], {"batch_dims": 2}, "batch_dims"),
    ("GatherND", [("float32", [3, 4]), ("int32", [2, 1])], {"batch_dims": 1}, "differ"),
    ("ScatterElements", [("float32", [3, 4]), ("int32", [2, 4]), ("float32", [2, 3])], {},
     "updates shape"),
    ("ScatterElements", [("float32", [3, 4]), ("int32", [2, 4]), ("float32", [2, 4])],
     {"reduction": "sum"}, "reduction"),
    ("ScatterND", [("float32", [3, 4]), ("int32", [2, 1]), ("float32", [2, 3])], {},
     "updates shape"),
    ("CumSum", [("float32", [3, 4])], {"axis": 2}, "axis 2"),
    ("CumSum", [("bool", [3, 4])], {}, "numeric"),
    ("TopK", [("float32", [3, 4])], {"k": 5}, "k=5"),
    ("TopK", [("float32", [3, 4])], {}, "k=None"),
    ("OneHot", [("int32", [3]), ("float32", [3])], {"depth": 4}, "shape \\[2\\]"),
    ("OneHot", [("int32", [3]), ("float32", [2])], {"depth": 0}, "depth"),
    ("OneHot", [("int32", [3]), ("float32", [2])], {"depth": 4, "axis": 2}, "axis 2"),
    ("Trilu", [("float32", [3])], {}, "rank 2"),
    ("Mod", [("bool", [3]), ("bool", [3])], {}, "numeric"),
    ("Mod", [("int32", [3]), ("int32", [3])], {"fmod": 2}, "fmod=2"),
    ("BitShift", [("float32", [3]), ("float32", [3])], {"direction": "LEFT"}, "integer"),
    ("BitShift", [("uint8", [3]), ("uint8", [3])], {"direction": "UP"}, "direction"),
    ("BitwiseAnd", [("float32", [3]), ("float32", [3])], {}, "integer"),
    ("IsInf", [("int32", [3])], {}, "float"),
    ("ArgMax", [("float32", [3])], {"dtype": "float32"}, "int32 or int64"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_shape_errors_name_the_op(optype, shapes, attrs, message):
    f = _builder()
    inputs = [f.var(f"x{i}", dtype, shape) for i, (dtype, shape) in enumerate(shapes)]
    with pytest.raises(myelin.ShapeError, match=f"f/{optype}.*{message}"):
        f.op(optype, inputs, attrs=attrs)


@pytest.mark.parametrize("optype,attrs,shape,expected", [
    ("Pad", {"pads": [1, 0, 0, 2]}, (3, 4), (4, 6)),
    ("Pad", {"pads": [-1, 1, 0, -3], "mode": "edge"}, (3, 4), (2, 2)),
    ("Tile", {"repeats": [0, 3]}, (3, 4), (0, 12)),
    ("BroadcastTo", {"shape": [2, 3, 4]}, (3, 1), (2, 3, 4)),
    ("CumSum", {"axis": -1}, (3, 4), (3, 4)),
    ("Trilu", {"k": -1}, (2, 3, 4), (2, 3, 4)),
])
def test_output_shapes(optype, attrs, shape, expected):
    f = _builder()
    y = f.op(optype, [f.var("x", "float32", shape)], attrs=attrs)
    assert y.shape == expected and y.dtype == "float32"


def test_multi_output_and_output_types():
    f = _builder()
    values, indices = f.op("TopK", [f.var("x", "float16", [9, 3])], attrs={"k": 4, "axis": 0})
    assert values.shape == indices.shape == (4, 3)
    assert values.dtype == "float16" and indices.dtype == "int64"
    hot = f.op("OneHot", [f.var("i", "int64", [2, 3]), f.var("v", "bool", [2])],
               attrs={"depth": 5, "axis": 1})
    assert hot.shape == (2, 5, 3) and hot.dtype == "bool"
    nd = f.op("GatherND", [f.var("d", "int8", [2, 3, 4, 5]), f.var("j", "int32", [2, 7, 2])],
              attrs={"batch_dims": 1})
    assert nd.shape == (2, 7, 5)
    gathered = f.op("Gather", [f.var("p", "float32", [3, 4, 5]), f.var("k", "int32", [6, 2])],
                    attrs={"axis": 1})
    assert gathered.shape == (3, 6, 2, 5)
    for optype in ["IsNaN", "IsInf"]:
        assert f.op(optype, [f.var(f"z{optype}", "float64", [3])]).dtype == "bool"


def test_zero_tile_reference():
    (y,) = ours("Tile", [rand(3, 4)], {"repeats": [0, 2]})
    assert y.shape == (0, 8)
