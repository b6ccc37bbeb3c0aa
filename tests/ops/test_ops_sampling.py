"""GridSample and CumProd registry entries: shape rules, errors, and the float64 references
against ONNX's reference implementation (onnx.reference) on random inputs."""

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import myelin
from myelin import reference
from myelin.errors import ShapeError


def _run(op_type, arrays, attrs):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    variables = [f.var(f"in{i}", str(a.dtype), a.shape) for i, a in enumerate(arrays)]
    f.op(op_type, variables, attrs=attrs)
    result = reference.run(flow, "f", dict(zip(variables, arrays)))
    return list(result.values())[0]


def _onnx(op_type, arrays, attrs, opset, extra_inputs=()):
    names = [f"in{i}" for i in range(len(arrays))]
    node = helper.make_node(op_type, names + [n for n, _ in extra_inputs], ["y"], **attrs)
    inits = [helper.make_tensor(n, TensorProto.INT64, [], [v]) for n, v in extra_inputs]
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in zip(names, arrays)],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, arrays)))[0]


GRID_CASES = [((2, 3, 5, 6), (2, 4, 7, 2)), ((1, 2, 3, 4, 5), (1, 2, 3, 4, 3)),
              ((1, 1, 1, 4), (1, 3, 2, 2))]


@pytest.mark.parametrize("mode,padding,align",
                         list(itertools.product(["linear", "nearest", "cubic"],
                                                ["zeros", "border", "reflection"], [0, 1])))
def test_grid_sample_matches_onnx_reference(mode, padding, align):
    rng = np.random.default_rng(7)
    for shape, grid_shape in GRID_CASES:
        if mode == "cubic" and len(shape) == 5:
            continue   # ONNX's reference is too slow for 3-D cubic; the JIT tests cover it
        if mode == "cubic" and padding == "border":
            continue   # we follow PyTorch and ONNX Runtime (test_convert_sampling.py)
        if padding == "reflection" and align and 1 in shape[2:]:
            continue   # ONNX's reference divides by zero (we map to 0, as PyTorch does)
        x = rng.standard_normal(shape).astype(np.float32)
        grid = rng.uniform(-1.6, 1.6, grid_shape).astype(np.float32)
        attrs = {"mode": mode, "padding_mode": padding, "align_corners": bool(align)}
        got = _run("GridSample", [x, grid], attrs)
        want = _onnx("GridSample", [x, grid], {"mode": mode, "padding_mode": padding,
                                               "align_corners": align}, 22)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_grid_sample_shape_rule_and_errors():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", (2, 3, 4, 5))
    y = f.op("GridSample", [x, f.var("g", "float32", (2, 6, 7, 2))])
    assert y.shape == (2, 3, 6, 7) and y.dtype == "float32"
    with pytest.raises(ShapeError, match="grid"):
        f.op("GridSample", [x, f.var("g2", "float32", (2, 6, 7, 3))])
    with pytest.raises(ShapeError, match="mode"):
        f.op("GridSample", [x, f.var("g3", "float32", (2, 6, 7, 2))], attrs={"mode": "area"})
    with pytest.raises(ShapeError, match="float"):
        f.op("GridSample", [f.var("xi", "int32", (2, 3, 4, 5)),
                            f.var("g4", "float32", (2, 6, 7, 2))])
    f.op("GridSample", [f.var("xn", "int32", (2, 3, 4, 5)), f.var("g5", "float32", (2, 6, 7, 2))],
         attrs={"mode": "nearest"})


def test_grid_sample_nonfinite_grid_is_safe():
    x = np.arange(12, dtype=np.float64).reshape(1, 1, 3, 4)
    grid = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0], dtype=np.float64)
    grid = np.stack([grid, grid[::-1]], axis=-1).reshape(1, 1, 6, 2)
    for mode, padding in itertools.product(["linear", "nearest", "cubic"],
                                           ["zeros", "border", "reflection"]):
        got = _run("GridSample", [x, grid], {"mode": mode, "padding_mode": padding})
        assert got.shape == (1, 1, 1, 6)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_cumprod_matches_onnx_reference(exclusive, reverse, dtype):
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, (3, 4, 5)).astype(dtype)
    if dtype == np.int64:
        x = rng.integers(-3, 4, (3, 4, 5)).astype(dtype)
    for axis in (0, 1, -1):
        got = _run("CumProd", [x], {"axis": axis, "exclusive": bool(exclusive),
                                    "reverse": bool(reverse)})
        want = _onnx("CumProd", [x], {"exclusive": exclusive, "reverse": reverse}, 26,
                     [("axis", axis)])
        np.testing.assert_allclose(got, want, rtol=1e-5)
