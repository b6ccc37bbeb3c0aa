"""Compiled reductions against the float64 reference: all axes, some axes, keepdims."""

import numpy as np
import pytest

import myelin
from jitcheck import PRESETS, random_array, run_and_compare

SHAPES = [(1,), (7,), (33,), (256,), (3, 5), (4, 33), (17, 8), (2, 3, 127), (2, 9, 4, 5)]
FLOAT_OPS = ["Sum", "Product", "Max", "Min", "Mean"]
TOLERANCE = {"float32": 3e-6, "float64": 1e-12}


def _axes_cases(rank):
    cases = [None]
    for axis in range(rank):
        cases.append(axis)
    cases.append(-1)
    if rank >= 3:
        cases.append([0, 2])
        cases.append([1, rank - 1])
    return cases


def _flow(op_type, dtype, keepdims):
    flow, count = myelin.Flow(), 0
    for shape in SHAPES:
        for axis in _axes_cases(len(shape)):
            f = myelin.Builder(flow, f"f{count}")
            count += 1
            x = f.var("x", dtype, shape)
            f.reduce(op_type, x, axis=axis, keepdims=keepdims if axis is not None else None)
    return flow


def _inputs(flow, dtype, low, high, rng):
    return {name: {var: random_array(rng, dtype, var.shape, low, high)
                   for var in func.ops[0].inputs}
            for name, func in flow.funcs.items()}


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("op_type", FLOAT_OPS)
def test_float_reductions(op_type, dtype, keepdims, features):
    rng = np.random.default_rng()
    flow = _flow(op_type, dtype, keepdims)
    # Products stay near 1; sums of positive values are well conditioned, so a relative
    # tolerance is meaningful (mixed signs can cancel to nearly zero). Their rounding errors
    # walk: a float32 product of 762 terms is off by about 1e-6 (rms), so 3e-6 failed about
    # one run in a few hundred.
    low, high = {"Product": (0.9, 1.1), "Sum": (0.5, 3), "Mean": (0.5, 3)}.get(op_type, (-3, 3))
    tolerance = TOLERANCE[dtype] * (4 if op_type in ("Sum", "Mean", "Product") else 1)
    run_and_compare(flow, _inputs(flow, dtype, low, high, rng), tolerance, features)


@pytest.mark.parametrize("features", ["host", "sse"])
@pytest.mark.parametrize("op_type", ["Sum", "Max", "Min", "Product"])
def test_int_reductions(op_type, features):
    rng = np.random.default_rng()
    flow = _flow(op_type, "int32", False)
    low, high = (-2, 2) if op_type == "Product" else (-1000, 1000)
    run_and_compare(flow, _inputs(flow, "int32", low, high, rng), 0, features, exact=True)


@pytest.mark.parametrize("features", ["host", "sse"])
@pytest.mark.parametrize("op_type", ["All", "Any", "Count"])
def test_bool_reductions(op_type, features):
    rng = np.random.default_rng()
    flow = _flow(op_type, "bool", False)
    inputs = {name: {var: rng.random(var.shape) < (0.9 if op_type == "All" else 0.1)
                     for var in func.ops[0].inputs}
              for name, func in flow.funcs.items()}
    run_and_compare(flow, inputs, 0, features, exact=True)


@pytest.mark.parametrize("features", ["host", "sse"])
@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_arg_reductions(op_type, dtype, features):
    rng = np.random.default_rng()
    flow, count = myelin.Flow(), 0
    for shape in SHAPES:
        for axis in [None] + list(range(len(shape))):
            f = myelin.Builder(flow, f"f{count}")
            count += 1
            x = f.var("x", dtype, shape)
            (f.argmax if op_type == "ArgMax" else f.argmin)(x, axis=axis)
    run_and_compare(flow, _inputs(flow, dtype, -1000, 1000, rng), 0, features, exact=True)
