"""Compiled GridSample and CumProd against their float64 references (outputs poisoned first):
every GridSample mode, padding and align_corners on 1-D, 2-D and 3-D inputs, float32, float64
and integer nearest, grids reaching outside [-1, 1] and holding NaN, inf and huge values;
CumProd over every axis, exclusive and reverse, float and integer."""

import itertools

import numpy as np
import pytest

import myelin
from jitcheck import PRESETS, random_array, run_and_compare

# (input shape, grid shape): 2-D with odd sizes, a 1x1 and a size-1 axis, 3-D, 1-D, and a
# batch of 3 with one channel.
GRID_SHAPES = [((2, 3, 5, 7), (2, 4, 9, 2)), ((1, 2, 1, 1), (1, 3, 2, 2)),
               ((1, 1, 1, 6), (1, 5, 3, 2)), ((1, 2, 3, 4, 5), (1, 2, 3, 4, 3)),
               ((2, 3, 17), (2, 33, 1)), ((3, 1, 4, 4), (3, 1, 1, 2))]
COMBINATIONS = list(itertools.product(["linear", "nearest", "cubic"],
                                      ["zeros", "border", "reflection"], [False, True]))


def _grid_flow(dtype, grid_dtype, cases, special=False):
    flow, inputs = myelin.Flow(), {}
    rng = np.random.default_rng()
    for i, (shape, grid_shape, attrs) in enumerate(cases):
        f = myelin.Builder(flow, f"f{i}")
        x = f.var("x", dtype, shape)
        grid = f.var("grid", grid_dtype, grid_shape)
        f.op("GridSample", [x, grid], attrs=attrs)
        values = random_array(rng, grid_dtype, grid_shape, -1.7, 1.7)
        if special:
            flat = values.reshape(-1)
            flat[:6] = [np.nan, np.inf, -np.inf, 1e30, -3e7, 5.5][:flat.size]
        inputs[f"f{i}"] = {x: random_array(rng, dtype, shape), grid: values}
    return flow, inputs


def _cases(combinations, shapes=GRID_SHAPES):
    return [(shape, grid_shape, {"mode": mode, "padding_mode": padding, "align_corners": align})
            for mode, padding, align in combinations for shape, grid_shape in shapes]


@pytest.mark.parametrize("features", PRESETS)
def test_grid_sample_float32(features):
    # Float32 coordinates and weights: a cubic sample of 16 inputs around 1 in size that
    # cancel to an output near 0.01 (a grid of one point) keeps only about 1e-4 of it.
    flow, inputs = _grid_flow("float32", "float32", _cases(COMBINATIONS))
    run_and_compare(flow, inputs, 1e-4, features)


def test_grid_sample_float64_and_mixed():
    flow, inputs = _grid_flow("float64", "float64", _cases(COMBINATIONS, GRID_SHAPES[:4]))
    run_and_compare(flow, inputs, 1e-12)
    flow, inputs = _grid_flow("float32", "float64", _cases(COMBINATIONS[::5], GRID_SHAPES[:2]))
    run_and_compare(flow, inputs, 2e-6)


def test_grid_sample_integer_nearest():
    combinations = [c for c in COMBINATIONS if c[0] == "nearest"]
    for dtype in ("int32", "uint8", "int64"):
        flow, inputs = _grid_flow(dtype, "float32", _cases(combinations, GRID_SHAPES[:3]))
        run_and_compare(flow, inputs, 0, exact=True)


def test_grid_sample_nonfinite_grid():
    flow, inputs = _grid_flow("float64", "float64", _cases(COMBINATIONS, GRID_SHAPES[:1]),
                              special=True)
    run_and_compare(flow, inputs, 1e-12)


@pytest.mark.parametrize("features", PRESETS)
def test_cumprod(features):
    flow, inputs = myelin.Flow(), {}
    rng = np.random.default_rng()
    cases = [((7,), 0), ((3, 33), 1), ((4, 5, 6), 0), ((4, 5, 6), 1), ((2, 3, 17), -1)]
    i = 0
    for dtype in ("float32", "float64", "int32", "int64"):
        for (shape, axis), exclusive, reverse in itertools.product(cases, [False, True],
                                                                   [False, True]):
            f = myelin.Builder(flow, f"f{i}")
            x = f.var("x", dtype, shape)
            f.op("CumProd", [x], attrs={"axis": axis, "exclusive": exclusive,
                                        "reverse": reverse})
            inputs[f"f{i}"] = {x: random_array(rng, dtype, shape, -2, 2)}
            i += 1
    run_and_compare(flow, inputs, 1e-6, features)
