"""Compiled matrix products against the float64 reference: sizes, transposes, batches."""

import itertools

import numpy as np
import pytest

import myelin
from jitcheck import PRESETS, random_array, run_and_compare

DIMS = [1, 2, 3, 5, 8, 16, 17, 33, 64]
TOLERANCE = {"float32": 3e-5, "float64": 1e-12}   # norm-wise; random data can cancel


def _flow(dtype, transpose_a, transpose_b, shapes):
    flow = myelin.Flow()
    for i, (m, k, n, batch_a, batch_b) in enumerate(shapes):
        f = myelin.Builder(flow, f"f{i}")
        a_shape = batch_a + ((k, m) if transpose_a else (m, k))
        b_shape = batch_b + ((n, k) if transpose_b else (k, n))
        f.matmul(f.var("a", dtype, a_shape), f.var("b", dtype, b_shape),
                 transpose_a=transpose_a, transpose_b=transpose_b)
    return flow


def _inputs(flow, dtype, rng):
    return {name: {var: random_array(rng, dtype, var.shape, -2, 2) for var in func.ops[0].inputs}
            for name, func in flow.funcs.items()}


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("transpose_a,transpose_b", list(itertools.product([False, True], repeat=2)))
def test_matmul_sizes(transpose_a, transpose_b, dtype, features):
    rng = np.random.default_rng()
    shapes = [(m, k, n, (), ()) for m, k, n in itertools.product(DIMS, repeat=3)
              if rng.random() < 0.25 or (m, k, n) in ((1, 64, 64), (33, 17, 5), (64, 64, 64))]
    flow = _flow(dtype, transpose_a, transpose_b, shapes)
    run_and_compare(flow, _inputs(flow, dtype, rng), TOLERANCE[dtype], features)


@pytest.mark.parametrize("features", ["host", "sse"])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_batched_matmul(transpose_b, features):
    rng = np.random.default_rng()
    shapes = [(5, 7, 9, (8,), (8,)), (3, 16, 17, (2, 4), (2, 4)), (4, 8, 33, (3,), ()),
              (2, 5, 6, (), (4,)), (6, 3, 2, (2, 1), (1, 3))]
    flow = _flow("float32", False, transpose_b, shapes)
    run_and_compare(flow, _inputs(flow, "float32", rng), TOLERANCE["float32"], features)


def test_int_matmul():
    rng = np.random.default_rng()
    flow = _flow("int32", False, False, [(3, 17, 9, (), ()), (8, 8, 33, (), ())])
    run_and_compare(flow, _inputs(flow, "int32", rng), 0, exact=True)


def test_large_matmul():
    rng = np.random.default_rng()
    flow = _flow("float32", False, False, [(200, 300, 257, (), ())])
    run_and_compare(flow, _inputs(flow, "float32", rng), 3e-5)
