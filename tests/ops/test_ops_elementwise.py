"""Element-wise ops built with the Builder and run by the reference interpreter, checked against
independent scalar computations (Python's math module) on fresh random inputs."""

import math
import operator

import numpy as np
import pytest

import myelin
from myelin import reference
from myelin.flow import dtypes

SHAPES = [(), (1,), (3,), (7, 33), (2, 3, 5)]
BROADCAST_PAIRS = [((3,), (3,)), ((7, 33), (33,)), ((2, 1, 5), (3, 1)), ((1,), (4, 7)),
                   ((), (5,)), ((33, 1), (1, 7))]

def _signs(rng, shape):
    return rng.choice([-1.0, 1.0], shape)


# Input domains: where each function is defined and well conditioned.
DOMAINS = {
    "any": lambda rng, shape: rng.uniform(-3, 3, shape),
    "positive": lambda rng, shape: rng.uniform(0.1, 3, shape),
    "nonzero": lambda rng, shape: rng.uniform(0.2, 3, shape) * _signs(rng, shape),
    "unit": lambda rng, shape: rng.uniform(-0.95, 0.95, shape),
    "outside": lambda rng, shape: rng.uniform(1.05, 3, shape) * _signs(rng, shape),
    "above1": lambda rng, shape: rng.uniform(1.05, 3, shape),
    "fraction": lambda rng, shape: rng.uniform(0.05, 0.95, shape),
}


def evaluate(method, *values, **kwargs):
    """Apply Builder method ``method`` to variables holding ``values``; interpret the flow.

    Returns (result array, output variable).
    """
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    args = [f.var(f"in{i}", dtypes.from_numpy(v.dtype), v.shape) for i, v in enumerate(values)]
    out = getattr(f, method)(*args, **kwargs)
    result = reference.run(flow, "f", dict(zip(args, values)))[out.name]
    assert result.shape == out.shape
    return result, out


def scalar_map(fn, *arrays):
    """``fn`` applied to each element (after broadcasting), in Python floats."""
    arrays = np.broadcast_arrays(*[np.asarray(a, dtype=np.float64) for a in arrays])
    flat = [fn(*(float(a) for a in items)) for items in zip(*(a.reshape(-1) for a in arrays))]
    return np.array(flat, dtype=np.float64).reshape(arrays[0].shape)


UNARY = [
    ("neg", lambda v: -v, "any"),
    ("abs", abs, "any"),
    ("sign", lambda v: float((v > 0) - (v < 0)), "any"),
    ("relu", lambda v: max(v, 0.0), "any"),
    ("square", lambda v: v * v, "any"),
    ("sqrt", math.sqrt, "positive"),
    ("rsqrt", lambda v: 1 / math.sqrt(v), "positive"),
    ("rcp", lambda v: 1 / v, "nonzero"),
    ("exp", math.exp, "any"),
    ("log", math.log, "positive"),
    ("sigmoid", lambda v: 1 / (1 + math.exp(-v)), "any"),
    ("tanh", math.tanh, "any"),
    ("erf", math.erf, "any"),
    ("softsign", lambda v: v / (1 + abs(v)), "any"),
    ("softplus", lambda v: math.log1p(math.exp(v)), "any"),
    ("log_sigmoid", lambda v: -math.log1p(math.exp(-v)), "any"),
    ("floor", math.floor, "any"),
    ("ceil", math.ceil, "any"),
    ("round", round, "any"),
    ("trunc", math.trunc, "any"),
    ("sin", math.sin, "any"),
    ("cos", math.cos, "any"),
    ("tan", math.tan, "unit"),
    ("cot", lambda v: math.cos(v) / math.sin(v), "nonzero"),
    ("sec", lambda v: 1 / math.cos(v), "unit"),
    ("csc", lambda v: 1 / math.sin(v), "nonzero"),
    ("asin", math.asin, "unit"),
    ("acos", math.acos, "unit"),
    ("atan", math.atan, "any"),
    ("acot", lambda v: math.atan(1 / v), "nonzero"),
    ("asec", lambda v: math.acos(1 / v), "outside"),
    ("acsc", lambda v: math.asin(1 / v), "outside"),
    ("sinh", math.sinh, "any"),
    ("cosh", math.cosh, "any"),
    ("coth", lambda v: math.cosh(v) / math.sinh(v), "nonzero"),
    ("sech", lambda v: 1 / math.cosh(v), "any"),
    ("csch", lambda v: 1 / math.sinh(v), "nonzero"),
    ("asinh", math.asinh, "any"),
    ("acosh", math.acosh, "above1"),
    ("atanh", math.atanh, "unit"),
    ("acoth", lambda v: math.atanh(1 / v), "outside"),
    ("asech", lambda v: math.acosh(1 / v), "fraction"),
    ("acsch", lambda v: math.asinh(1 / v), "nonzero"),
    ("identity", lambda v: v, "any"),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("method,fn,domain", UNARY, ids=[u[0] for u in UNARY])
def test_unary_float(method, fn, domain, shape, dtype):
    x = np.asarray(DOMAINS[domain](np.random.default_rng(), shape)).astype(dtype)
    result, out = evaluate(method, x)
    assert out.dtype == dtypes.from_numpy(dtype)
    assert result.dtype == np.float64
    np.testing.assert_allclose(result, scalar_map(fn, x), rtol=1e-12, atol=1e-14)


def test_round_is_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.5], np.float64)
    result, _ = evaluate("round", x)
    np.testing.assert_array_equal(result, [0, 2, 2, 0, -2, 4])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_gelu(shape, approximate):
    x = np.asarray(DOMAINS["any"](np.random.default_rng(), shape))
    result, _ = evaluate("gelu", x, approximate=approximate)
    if approximate == "none":
        fn = lambda v: v * (1 + math.erf(v / math.sqrt(2))) / 2  # noqa: E731
    else:
        fn = lambda v: v * (1 + math.tanh(math.sqrt(2 / math.pi)  # noqa: E731
                                          * (v + 0.044715 * v ** 3))) / 2
    np.testing.assert_allclose(result, scalar_map(fn, x), rtol=1e-12, atol=1e-14)


INT_UNARY = [("neg", operator.neg), ("abs", abs), ("sign", lambda v: (v > 0) - (v < 0)),
             ("relu", lambda v: max(v, 0)), ("square", lambda v: v * v),
             ("identity", lambda v: v)]


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
@pytest.mark.parametrize("method,fn", INT_UNARY, ids=[u[0] for u in INT_UNARY])
def test_unary_integer(method, fn, dtype):
    x = np.random.default_rng().integers(-9, 10, (7, 3)).astype(dtype)
    result, out = evaluate(method, x)
    assert result.dtype == dtype and out.dtype == dtypes.from_numpy(dtype)
    np.testing.assert_array_equal(result, [[fn(int(v)) for v in row] for row in x])


BINARY = [
    ("add", operator.add, "any"),
    ("sub", operator.sub, "any"),
    ("mul", operator.mul, "any"),
    ("div", operator.truediv, "nonzero"),
    ("minimum", min, "any"),
    ("maximum", max, "any"),
    ("pow", math.pow, "any"),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=str)
@pytest.mark.parametrize("method,fn,domain", BINARY, ids=[b[0] for b in BINARY])
def test_binary_float(method, fn, domain, shapes, dtype):
    rng = np.random.default_rng()
    x_domain = "positive" if method == "pow" else "any"
    x = np.asarray(DOMAINS[x_domain](rng, shapes[0])).astype(dtype)
    y = np.asarray(DOMAINS[domain](rng, shapes[1])).astype(dtype)
    result, out = evaluate(method, x, y)
    assert out.shape == np.broadcast_shapes(*shapes)
    np.testing.assert_allclose(result, scalar_map(fn, x, y), rtol=1e-12, atol=1e-14)


INT_BINARY = [
    ("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
    ("div", lambda a, b: int(a / b)), ("minimum", min), ("maximum", max),
]


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int16])
@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=str)
@pytest.mark.parametrize("method,fn", INT_BINARY, ids=[b[0] for b in INT_BINARY])
def test_binary_integer(method, fn, shapes, dtype):
    rng = np.random.default_rng()
    x = rng.integers(-50, 51, shapes[0]).astype(dtype)
    y = rng.integers(1, 12, shapes[1]) * rng.choice([-1, 1], shapes[1])
    y = np.asarray(y).astype(dtype)
    result, _ = evaluate(method, x, y)
    assert result.dtype == dtype
    xb, yb = np.broadcast_arrays(x, y)
    expected = [fn(int(a), int(b)) for a, b in zip(xb.reshape(-1), yb.reshape(-1))]
    np.testing.assert_array_equal(result.reshape(-1), expected)


def test_integer_division_truncates_toward_zero():
    x = np.array([7, -7, 7, -7, 6, -1], np.int32)
    y = np.array([2, 2, -2, -2, 3, 5], np.int32)
    result, _ = evaluate("div", x, y)
    np.testing.assert_array_equal(result, [3, -3, -3, 3, 2, 0])


COMPARISONS = [("equal", operator.eq), ("not_equal", operator.ne), ("less", operator.lt),
               ("less_equal", operator.le), ("greater", operator.gt),
               ("greater_equal", operator.ge)]


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=str)
@pytest.mark.parametrize("method,fn", COMPARISONS, ids=[c[0] for c in COMPARISONS])
def test_comparison(method, fn, shapes, dtype):
    rng = np.random.default_rng()
    # Few distinct values, so that ties occur.
    x = rng.integers(-2, 3, shapes[0]).astype(dtype)
    y = rng.integers(-2, 3, shapes[1]).astype(dtype)
    result, out = evaluate(method, x, y)
    assert out.dtype == "bool" and result.dtype == np.bool_
    xb, yb = np.broadcast_arrays(x, y)
    expected = [fn(a, b) for a, b in zip(xb.reshape(-1).tolist(), yb.reshape(-1).tolist())]
    np.testing.assert_array_equal(result.reshape(-1), expected)


LOGIC = [("logical_and", lambda a, b: a and b), ("logical_or", lambda a, b: a or b),
         ("logical_xor", lambda a, b: a != b)]


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=str)
@pytest.mark.parametrize("method,fn", LOGIC, ids=[c[0] for c in LOGIC])
def test_logic(method, fn, shapes):
    rng = np.random.default_rng()
    x, y = rng.random(shapes[0]) < 0.5, rng.random(shapes[1]) < 0.5
    result, out = evaluate(method, x, y)
    assert out.dtype == "bool"
    xb, yb = np.broadcast_arrays(x, y)
    expected = [fn(a, b) for a, b in zip(xb.reshape(-1).tolist(), yb.reshape(-1).tolist())]
    np.testing.assert_array_equal(result.reshape(-1), expected)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_logical_not(shape):
    x = np.asarray(np.random.default_rng().random(shape) < 0.5)
    result, _ = evaluate("logical_not", x)
    np.testing.assert_array_equal(result.reshape(-1), [not v for v in x.reshape(-1).tolist()])


@pytest.mark.parametrize("shapes", [((7, 3), (7, 3), (7, 3)), ((7, 1), (3,), (1, 3)),
                                    ((), (5,), (5,)), ((2, 1, 4), (3, 1), (4,))], ids=str)
def test_cond_and_select(shapes):
    rng = np.random.default_rng()
    c = np.asarray(rng.random(shapes[0]) < 0.5)
    x, y = rng.uniform(-3, 3, shapes[1]), rng.uniform(-3, 3, shapes[2])
    cond, _ = evaluate("cond", c, x, y)
    cb, xb, yb = np.broadcast_arrays(c, x, y)
    expected = [a if k else b for k, a, b in zip(cb.reshape(-1), xb.reshape(-1), yb.reshape(-1))]
    np.testing.assert_array_equal(cond.reshape(-1), expected)
    select, _ = evaluate("select", c, x)
    cb, xb = np.broadcast_arrays(c, x)
    expected = [a if k else 0.0 for k, a in zip(cb.reshape(-1), xb.reshape(-1))]
    np.testing.assert_array_equal(select.reshape(-1), expected)


@pytest.mark.parametrize("source,target,fn", [
    (np.float32, "int32", math.trunc), (np.float64, "int64", math.trunc),
    (np.int32, "float32", float), (np.float64, "bool", bool), (np.bool_, "float64", float),
    (np.float32, "float64", float)])
def test_cast(source, target, fn):
    rng = np.random.default_rng()
    x = (rng.uniform(-9, 9, (3, 7)) * (rng.random((3, 7)) < 0.8)).astype(source)
    result, out = evaluate("cast", x, dtype=target)
    assert out.dtype == target
    expected = np.array([fn(v) for v in x.reshape(-1).tolist()]).reshape(x.shape)
    np.testing.assert_array_equal(result, expected)


def _build(*specs):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    return flow, f, [f.var(f"v{i}", dtype, shape) for i, (dtype, shape) in enumerate(specs)]


def test_broadcast_error_names_op_and_shapes():
    flow, f, (x, y) = _build(("float32", [3, 4]), ("float32", [5]))
    before = (len(flow.ops), len(flow.vars))
    with pytest.raises(myelin.ShapeError) as info:
        f.add(x, y)
    message = str(info.value)
    assert "f/Add" in message and "[3, 4]" in message and "[5]" in message
    assert (len(flow.ops), len(flow.vars)) == before  # the failed op was rolled back


def test_mixed_types_are_an_error():
    _, f, (x, y) = _build(("float32", [3]), ("int32", [3]))
    with pytest.raises(myelin.ShapeError, match=r"f/Mul.*float32\[3\].*int32\[3\]"):
        f.mul(x, y)


@pytest.mark.parametrize("method", ["exp", "sqrt", "sin", "rcp", "erf", "gelu", "floor"])
def test_float_only_ops_reject_integers(method):
    _, f, (x,) = _build(("int32", [3]))
    with pytest.raises(myelin.ShapeError, match="float"):
        getattr(f, method)(x)


def test_type_domain_errors():
    _, f, (b, x) = _build(("bool", [2]), ("float32", [2]))
    with pytest.raises(myelin.ShapeError, match="bool"):
        f.logical_not(x)
    with pytest.raises(myelin.ShapeError, match="numeric"):
        f.add(b, b)
    with pytest.raises(myelin.ShapeError, match="bool"):
        f.cond(x, x, x)
    with pytest.raises(myelin.ShapeError, match="approximate"):
        f.gelu(x, approximate="fast")
    with pytest.raises(myelin.ShapeError, match="dtype"):
        f.cast(x, "float17")
