"""Scaled dot-product attention (issue 25): the Attention op's reference against attention
written out in NumPy, and the CPU kernel against the reference."""

import math

import numpy as np
import pytest

import myelin
from myelin import reference
from myelin.errors import ShapeError

from jitcheck import PRESETS, poison, relative_error

LOWEST = float(np.finfo(np.float32).min)


def numpy_attention(q, k, v, biases=(), scale=1.0, causal=False):
    """Attention in float64, query by query: the keys a causal query does not see are left
    out, a query that sees none gives NaN."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    for bias in biases:
        scores = scores + bias
    batch = np.broadcast_shapes(scores.shape[:-2], v.shape[:-2])
    scores = np.broadcast_to(scores, batch + scores.shape[-2:])
    v = np.broadcast_to(v, batch + v.shape[-2:])
    sq, skv = scores.shape[-2:]
    out = np.empty(batch + (sq, v.shape[-1]))
    for index in np.ndindex(*batch):
        for query in range(sq):
            seen = query + skv - sq + 1 if causal else skv
            if seen <= 0:
                out[index + (query,)] = math.nan if causal else 0.0
                continue
            s = scores[index + (query,)][:seen]
            with np.errstate(invalid="ignore"):
                w = np.exp(s - s.max())
                out[index + (query,)] = (w / w.sum()) @ v[index][:seen]
    return out


def attention_op(f, shapes, dtype="float32", **attrs):
    """An Attention op of inputs q, k, v, b0, b1, ... of ``shapes`` in function ``f``."""
    names = ["q", "k", "v"] + [f"b{i}" for i in range(len(shapes) - 3)]
    inputs = [f.var(name, dtype, shape) for name, shape in zip(names, shapes)]
    return f.op("Attention", inputs, "y", attrs=attrs), inputs


def random_inputs(rng, inputs):
    return {var: rng.standard_normal(var.shape).astype(var.dtype) for var in inputs}


# The reference.
REFERENCE_CASES = [
    # shapes of q, k, v, biases; attributes
    ([[2, 5, 4], [2, 7, 4], [2, 7, 3]], {}),
    ([[2, 3, 5, 4], [3, 7, 4], [1, 3, 7, 6], [5, 7], [2, 1, 1, 7]], {"scale": 0.3}),
    ([[2, 5, 4], [2, 4, 7], [2, 7, 3]], {"transpose_k": True, "causal": True}),
    ([[7, 4], [5, 4], [5, 3]], {"causal": True}),          # queries 0, 1 see no key
    ([[1, 4], [6, 4], [6, 2], [1, 6]], {"causal": True}),   # one query sees every key
]


@pytest.mark.parametrize("shapes, attrs", REFERENCE_CASES)
def test_reference_is_attention(shapes, attrs):
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    y, inputs = attention_op(f, shapes, **attrs)
    values = random_inputs(rng, inputs)
    got = reference.run(flow, "f", values)[y.name]
    q, k, v, *biases = (values[var] for var in inputs)
    if attrs.get("transpose_k"):
        k = np.swapaxes(k, -1, -2)
    want = numpy_attention(q, k, v, biases, attrs.get("scale", 1.0), attrs.get("causal", False))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_reference_over_no_keys():
    rng = np.random.default_rng()
    for causal, want in ((False, 0.0), (True, math.nan)):
        flow = myelin.Flow()
        f = myelin.Builder(flow, "f")
        y, inputs = attention_op(f, [[3, 4], [0, 4], [0, 2]], causal=causal)
        got = reference.run(flow, "f", random_inputs(rng, inputs))[y.name]
        np.testing.assert_array_equal(got, np.full((3, 2), want))


@pytest.mark.parametrize("shapes, attrs, message", [
    ([[5, 4], [7, 3], [7, 2]], {}, "differ in depth"),
    ([[5, 4], [7, 4], [6, 2]], {}, "differ in keys"),
    ([[5, 4], [4, 7], [6, 2]], {"transpose_k": True}, "differ in keys"),
    ([[2, 5, 4], [3, 7, 4], [7, 2]], {}, "do not broadcast"),
    ([[5, 4], [7, 4], [7, 2], [5, 1, 7]], {}, "does not broadcast to the scores"),
    ([[4], [7, 4], [7, 2]], {}, "rank 2 or more"),
])
def test_shape_errors(shapes, attrs, message):
    f = myelin.Builder(myelin.Flow(), "f")
    with pytest.raises(ShapeError, match=message):
        attention_op(f, shapes, **attrs)


# The kernel.
KERNEL_CASES = [
    # batch, Sq, Skv, D, Dv, attributes, bias shapes
    ([2], 1, 7, 32, 32, {}, []),
    ([1, 4], 128, 128, 64, 64, {"scale": 0.125, "transpose_k": True}, [[1, 1, 128, 128]]),
    ([3], 129, 129, 80, 80, {"causal": True, "scale": 0.1}, []),
    ([2, 2], 7, 129, 33, 17, {"transpose_k": True}, [[2, 1, 7, 1], [129]]),
    ([2], 9, 5, 64, 64, {"causal": True}, []),       # queries 0 to 3 see no key
    ([2], 1, 300, 16, 24, {"causal": True}, [[300]]),    # one query sees every key
    ([], 40, 200, 32, 32, {"scale": 0.2}, [[40, 200]]),
]


def check_kernel(rng, batch, sq, skv, d, dv, attrs, bias_shapes, threads=1, features="host",
                 fill=None, dtype="float32", tolerance=2e-6):
    """Compile an Attention op, compute it on random inputs (``fill(values)`` may change
    them) and compare with the reference."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    k_shape = [d, skv] if attrs.get("transpose_k") else [skv, d]
    shapes = [batch + [sq, d], batch + k_shape, batch + [skv, dv]] + bias_shapes
    y, inputs = attention_op(f, shapes, dtype, **attrs)
    net = myelin.Compiler(threads=threads, features=features).compile(flow)
    data = net.cell("f").instance()
    poison(data)
    values = random_inputs(rng, inputs)
    if fill is not None:
        fill(values)
    for var, value in values.items():
        data[var] = value
    data.compute()
    want = reference.run(flow, "f", values)[y.name]
    got = np.asarray(data[y])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    error = relative_error(got, want)
    assert error < tolerance, f"relative error {error:.3g} [{features}, {threads} threads]"


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", KERNEL_CASES)
def test_kernel_matches_reference(case, threads):
    check_kernel(np.random.default_rng(), *case, threads=threads)


@pytest.mark.parametrize("features", PRESETS)
def test_kernel_under_cpu_features(features):
    check_kernel(np.random.default_rng(), [2], 13, 37, 20, 12, {"causal": True},
                 [[13, 37]], features=features)


def test_kernel_in_float64():
    check_kernel(np.random.default_rng(), [3], 11, 45, 16, 9, {"scale": 0.25}, [[45]],
                 dtype="float64", tolerance=1e-13)


@pytest.mark.parametrize("causal", [False, True])
def test_kernel_masked_rows_infinities_and_nans(causal):
    """Rows masked with -inf everywhere give NaN, rows masked with the lowest float give the
    mean of the values (as the unfused softmax), a row masked in its first block of keys only
    the softmax of the others; a NaN or +inf score makes its row NaN; a NaN key or infinite
    value a causal query does not see stays out of its row."""
    def fill(values):
        q, k, v, mask = values.values()
        mask[...] = 0
        mask[0, 1] = -math.inf
        mask[0, 2] = LOWEST
        mask[1, 3, :128] = -math.inf
        q[1, 4, 0] = math.nan
        q[1, 5, 0] = math.inf
        if causal:
            k[0, 154, :] = math.nan         # seen by query 5 only
            v[1, 153, 0] = math.inf         # seen by queries 4 and 5 only
    for threads in (1, 2):
        check_kernel(np.random.default_rng(), [2], 6, 155, 64, 64, {"causal": causal},
                     [[2, 6, 155]], threads=threads, fill=fill)


def test_kernel_over_no_keys():
    rng = np.random.default_rng()
    for attrs in ({}, {"causal": True}):
        check_kernel(rng, [2], 3, 0, 4, 5, attrs, [])
