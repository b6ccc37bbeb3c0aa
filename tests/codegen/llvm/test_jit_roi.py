"""Compiled RoiAlign against its float64 reference (outputs poisoned first), under the CPU
feature presets: both modes and coordinate modes, sampling ratios 0, 1 and 2, odd sizes,
ROIs partly outside the map, of negative extent, NaN, infinite and huge; float32, float64
and float16; the ROIs split among threads; batch indices out of range."""

import itertools

import numpy as np
import pytest

import myelin
from jitcheck import PRESETS, computed, poison, run_and_compare
from myelin import reference
from myelin.errors import InputError
from test_ops_roi import random_rois

# (x shape, ROIs, output height and width, spatial scale)
SHAPES = [((2, 3, 7, 9), 6, (3, 2), 0.5), ((1, 5, 1, 6), 4, (2, 3), 1.0),
          ((3, 1, 5, 5), 3, (1, 1), 0.25), ((1, 300, 4, 3), 2, (2, 2), 1.0)]


def _roi_flow(dtype, cases, special=False):
    flow, inputs = myelin.Flow(), {}
    rng = np.random.default_rng()
    for i, (shape, count, (height, width), scale, attrs) in enumerate(cases):
        f = myelin.Builder(flow, f"f{i}")
        x = f.var("x", dtype, shape)
        rois = f.var("rois", dtype, (count, 4))
        batch = f.var("batch", "int64", (count,))
        f.op("RoiAlign", [x, rois, batch], attrs=dict(attrs, output_height=height,
                                                      output_width=width,
                                                      spatial_scale=scale))
        boxes, indices = random_rois(rng, count, shape[2], shape[3], shape[0], scale)
        if special:
            boxes[:3] = [[np.nan, 0, 4, 4], [0, 0, np.inf, 3], [-1e30, -1e30, 1e30, 1e30]][:count]
        inputs[f"f{i}"] = {x: rng.standard_normal(shape).astype(dtype),
                           rois: boxes.astype(dtype), batch: indices}
    return flow, inputs


def _cases(shapes=SHAPES, ratios=(0, 1, 2)):
    return [(shape, count, out, scale, {"mode": mode, "coordinate_transformation_mode": cm,
                                        "sampling_ratio": ratio})
            for mode, cm, ratio in itertools.product(["avg", "max"],
                                                     ["half_pixel", "output_half_pixel"],
                                                     ratios)
            for shape, count, out, scale in shapes]


@pytest.mark.parametrize("features", PRESETS)
def test_roi_align_float32(features):
    """Each output sums weighted samples that may cancel (a one-channel bin of a few samples
    can come out near zero, where a norm-relative error is float32 rounding magnified), so
    each is held to 2e-5 of the samples' magnitudes (the reference computed on |x|), plus
    what float32 sample positions move between neighbours: a position a few ulps off a
    whole pixel (about 1e-6 here) gives the next pixel that weight, which the float64
    reference gives none, so 1e-5 of the largest |x| on top."""
    flow, inputs = _roi_flow("float32", _cases(SHAPES[:2]) + _cases(SHAPES[2:], ratios=(0,)))
    net = myelin.Compiler(features=features).compile(flow)
    for name, feeds, output, got, want in computed(net, flow, inputs):
        x = next(iter(feeds))
        scale = reference.run(flow, name, {**feeds, x: np.abs(feeds[x])})[output]
        allowed = 2e-5 * scale + 1e-5 * np.abs(feeds[x]).max()
        error = np.abs(got.astype(np.float64) - want)
        worst = np.argmax(error - allowed)
        assert np.all(error <= allowed), (
            f"{name}: {output} [{features}] off by {error.flat[worst]:.3g} where the "
            f"samples' magnitudes sum to {scale.flat[worst]:.3g}")


def test_roi_align_float64_and_float16():
    flow, inputs = _roi_flow("float64", _cases(SHAPES[:2]))
    run_and_compare(flow, inputs, 1e-12)
    flow, inputs = _roi_flow("float16", _cases(SHAPES[:2], ratios=(0, 2)))
    run_and_compare(flow, inputs, 2e-3)


def test_roi_align_nonfinite_and_huge_rois():
    flow, inputs = _roi_flow("float64", _cases(SHAPES[:1], ratios=(0, 2)), special=True)
    run_and_compare(flow, inputs, 1e-12)


def test_roi_align_split_among_threads():
    cases = [((2, 16, 12, 10), 200, (5, 4), 0.5, {"sampling_ratio": 2})]
    flow, inputs = _roi_flow("float32", cases)
    net = run_and_compare(flow, inputs, 2e-5, threads=4)
    data = net.cell("f0").instance()
    for var, value in inputs["f0"].items():
        data[var] = value
    data.compute()
    first = np.array(data[flow.funcs["f0"].ops[0].outputs[0]])
    for _ in range(20):
        poison(data)
        for var, value in inputs["f0"].items():
            data[var] = value
        data.compute()
        np.testing.assert_array_equal(data[flow.funcs["f0"].ops[0].outputs[0]], first)


def test_roi_align_batch_index_out_of_range_at_run_time():
    flow, inputs = _roi_flow("float32", [((2, 2, 4, 4), 3, (2, 2), 1.0, {})])
    data = myelin.Compiler().compile(flow).cell("f0").instance()
    for var, value in inputs["f0"].items():
        data[var] = value
    batch = next(var for var in inputs["f0"] if var.dtype == "int64")
    data[batch] = np.array([0, 2, 1])
    with pytest.raises(InputError, match="RoiAlign"):
        data.compute()


def test_the_cuda_back_end_says_it_has_no_roi_align_kernel():
    from myelin.codegen.cuda import planner
    flow, _ = _roi_flow("float32", [((1, 2, 4, 4), 3, (2, 2), 1.0, {})])
    with pytest.raises(myelin.UnsupportedOpError, match="RoiAlign: no CUDA kernel supports"):
        planner.plan(flow)
