"""Reductions built with the Builder and run by the reference interpreter, checked against
reductions computed row by row in plain Python on fresh random inputs."""

import math

import numpy as np
import pytest

import myelin
from myelin import reference
from myelin.flow import dtypes

# (shape, axis attribute)
CASES = [((7,), None), ((1,), 0), ((3, 33), 1), ((3, 33), -1), ((33, 3), 0), ((2, 3, 5), [0, 2]),
         ((2, 3, 5), None), ((2, 3, 5), [-1, 1]), ((4, 1, 7), [1])]


def evaluate(method, x, *args, **kwargs):
    """Apply Builder method ``method`` to a variable holding ``x``; interpret the flow."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    var = f.var("x", dtypes.from_numpy(x.dtype), x.shape)
    out = getattr(f, method)(var, *args, **kwargs)
    result = reference.run(flow, "f", {var: x})[out.name]
    assert result.shape == out.shape
    return result, out


def reduce_rows(x, axis, keepdims, fn):
    """``fn`` (a function of a Python list) over the axes in ``axis`` (None: all)."""
    axes = sorted(a % x.ndim for a in ([axis] if isinstance(axis, int) else axis)) \
        if axis is not None else list(range(x.ndim))
    kept = [i for i in range(x.ndim) if i not in axes]
    rows = np.transpose(x, kept + axes).reshape(-1, math.prod(x.shape[i] for i in axes))
    values = np.array([fn(row.tolist()) for row in rows])
    if keepdims:
        return values.reshape([1 if i in axes else d for i, d in enumerate(x.shape)])
    return values.reshape([x.shape[i] for i in kept])


FLOAT_REDUCTIONS = [
    ("sum", math.fsum), ("product", math.prod), ("max", max), ("min", min),
    ("mean", lambda row: math.fsum(row) / len(row)),
]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axis", CASES, ids=str)
@pytest.mark.parametrize("method,fn", FLOAT_REDUCTIONS, ids=[r[0] for r in FLOAT_REDUCTIONS])
def test_float_reduction(method, fn, shape, axis, keepdims):
    rng = np.random.default_rng()
    x = rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)
    result, out = evaluate(method, x, axis, keepdims)
    assert out.dtype == "float64"
    # A sum of terms of mixed sign may cancel to near zero, where float64
    # rounding (about n * eps * sum |x|) is large relative to the exact result.
    atol = 1e-13 * x.size if method in ("sum", "mean") else 0
    np.testing.assert_allclose(result, reduce_rows(x, axis, keepdims, fn), rtol=1e-12, atol=atol)


@pytest.mark.parametrize("shape,axis", CASES, ids=str)
@pytest.mark.parametrize("method,fn", [("sum", sum), ("max", max), ("min", min)])
def test_integer_reduction(method, fn, shape, axis):
    x = np.random.default_rng().integers(-100, 100, shape).astype(np.int32)
    result, out = evaluate(method, x, axis)
    assert out.dtype == "int32" and result.dtype == np.int32
    np.testing.assert_array_equal(result, reduce_rows(x, axis, False, fn))


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axis", CASES, ids=str)
@pytest.mark.parametrize("method,fn", [("all", all), ("any", any)])
def test_bool_reduction(method, fn, shape, axis, keepdims):
    x = np.random.default_rng().random(shape) < 0.8
    result, out = evaluate(method, x, axis, keepdims)
    assert out.dtype == "bool"
    np.testing.assert_array_equal(result, reduce_rows(x, axis, keepdims, fn))


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("shape,axis", CASES, ids=str)
def test_count(shape, axis, dtype):
    x = np.random.default_rng().random(shape) < 0.5
    result, out = evaluate("count", x, axis, dtype, name="n")
    assert out.name == "f/n" and out.dtype == dtype
    np.testing.assert_array_equal(result, reduce_rows(x, axis, False, sum))


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axis", [(s, a) for s, a in CASES if not isinstance(a, list)],
                         ids=str)
@pytest.mark.parametrize("method,pick", [("argmax", max), ("argmin", min)])
def test_arg_reduction(method, pick, shape, axis, keepdims):
    x = np.random.default_rng().uniform(-3, 3, shape).astype(np.float32)
    result, out = evaluate(method, x, axis=axis, keepdims=keepdims)
    assert out.dtype == "int32" and result.dtype == np.int32
    first_index = lambda row: row.index(pick(row))  # noqa: E731
    np.testing.assert_array_equal(result, reduce_rows(x, axis, keepdims, first_index))


def test_argmax_without_axis_is_a_scalar_over_the_flattened_input():
    x = np.random.default_rng().uniform(-3, 3, (3, 7))
    result, out = evaluate("argmax", x)
    assert out.shape == () and int(result) == x.reshape(-1).tolist().index(x.max())


def test_argmax_ties_pick_the_first():
    result, _ = evaluate("argmax", np.array([1.0, 3.0, 3.0, 2.0]))
    assert int(result) == 1


def test_reduction_errors():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [3, 4])
    i = f.var("i", "int32", [3, 4])
    b = f.var("b", "bool", [3, 4])
    with pytest.raises(myelin.ShapeError, match=r"f/Sum.*axis 2 is out of range for rank 2"):
        f.sum(x, 2)
    with pytest.raises(myelin.ShapeError, match="twice"):
        f.max(x, [1, -1])
    with pytest.raises(myelin.ShapeError, match="float"):
        f.mean(i)
    with pytest.raises(myelin.ShapeError, match="numeric"):
        f.sum(b)
    with pytest.raises(myelin.ShapeError, match="bool"):
        f.all(x)
    with pytest.raises(myelin.ShapeError, match="single axis"):
        f.argmax(x, axis=[0, 1])
