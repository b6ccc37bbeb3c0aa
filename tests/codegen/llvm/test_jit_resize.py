"""Compiled Resize against the float64 reference: every mode and coordinate transformation,
upsampling and downsampling with odd sizes, 1-D to 3-D resizes, integer nearest, antialias,
tf_crop_and_resize extrapolation, and every case of ONNX's own Resize node tests."""

import numpy as np
import pytest

import myelin
from jitcheck import PRESETS, random_array, run_and_compare
from test_ops_resize import ONNX_CASES, UPSAMPLE_CASES, onnx_attributes, upsample_attributes

TRANSFORMS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
              "asymmetric", "tf_crop_and_resize"]

# (input shape, output sizes): NCHW up and down with odd sizes, 1-D, 3-D, NHWC-like (inner
# axis kept), one axis only, mixed up/down, and outputs of length 1 and wider than a vector.
SHAPES = [
    ((1, 2, 5, 7), (1, 2, 9, 13)),
    ((2, 3, 9, 11), (2, 3, 4, 5)),
    ((1, 1, 4, 6), (1, 1, 7, 3)),
    ((13,), (33,)),
    ((33,), (7,)),
    ((2, 3, 4, 5, 6), (2, 3, 7, 3, 11)),
    ((1, 6, 5, 3), (1, 11, 2, 3)),
    ((3, 17), (3, 40)),
    ((5, 4), (9, 4)),
    ((1, 3, 8, 8), (1, 3, 1, 1)),
]


def _flow(dtype, cases):
    """A flow with one function per (shape, attrs) case; returns (flow, inputs by function)."""
    flow, inputs = myelin.Flow(), {}
    rng = np.random.default_rng()
    for i, (shape, attrs) in enumerate(cases):
        f = myelin.Builder(flow, f"f{i}")
        x = f.var("x", dtype, shape)
        f.op("Resize", [x], attrs=attrs)
        inputs[f"f{i}"] = {x: random_array(rng, dtype, shape)}
    return flow, inputs


def _attrs(shape, sizes, **extra):
    attrs = {"sizes": list(sizes), "scales": [s / d for s, d in zip(sizes, shape)]}
    if extra.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        rank = len(shape)
        attrs["roi"] = [0.1 if a % 2 else -0.2 for a in range(rank)] + \
                       [0.8 if a % 2 else 1.25 for a in range(rank)]
        attrs["extrapolation_value"] = -7.5
    attrs.update(extra)
    return attrs


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_interpolating_modes(mode, features):
    cases = [(shape, _attrs(shape, sizes, mode=mode, coordinate_transformation_mode=t))
             for t in TRANSFORMS for shape, sizes in SHAPES]
    flow, inputs = _flow("float32", cases)
    run_and_compare(flow, inputs, 2e-6, features)


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8", "int8", "int32", "int64"])
def test_nearest(dtype, features):
    cases = [(shape, _attrs(shape, sizes, mode="nearest", coordinate_transformation_mode=t,
                            nearest_mode=n))
             for t, n in zip(TRANSFORMS, ["round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil", "floor", "round_prefer_ceil"])
             for shape, sizes in SHAPES]
    flow, inputs = _flow(dtype, cases)
    run_and_compare(flow, inputs, 0, features, exact=True)


@pytest.mark.parametrize("features", ["host", "sse"])
def test_options_and_float64(features):
    cases = []
    for shape, sizes in SHAPES:
        cases.append((shape, _attrs(shape, sizes, mode="cubic", exclude_outside=1,
                                    cubic_coeff_a=-0.5)))
        cases.append((shape, _attrs(shape, sizes, mode="linear", antialias=1)))
        cases.append((shape, _attrs(shape, sizes, mode="cubic", antialias=1,
                                    coordinate_transformation_mode="align_corners")))
    # Strong downsampling with antialias: wide filters (more taps than are unrolled).
    cases.append(((1, 2, 40, 50), _attrs((1, 2, 40, 50), (1, 2, 3, 4), mode="cubic",
                                         antialias=1)))
    cases.append(((2, 64), _attrs((2, 64), (2, 5), mode="linear", antialias=1)))
    for dtype in ["float32", "float64"]:
        flow, inputs = _flow(dtype, cases)
        # Errors against an output norm of at least 1: an 8 x 8 plane averaged to one pixel
        # is a mean of 64 random values of order 1, whose rounding does not shrink with it.
        run_and_compare(flow, inputs, 2e-6 if dtype == "float32" else 1e-13, features,
                        floor=1.0)


@pytest.mark.parametrize("features", ["host", "sse"])
def test_identity_and_scales_only(features):
    cases = [((3, 5), {"scales": [1.0, 1.0]}),
             ((2, 3, 4), {"scales": [1.0, 2.5, 1.0], "mode": "linear"}),
             ((7, 9), {"scales": [0.6, 1.7], "mode": "cubic",
                       "coordinate_transformation_mode": "asymmetric"})]
    flow, inputs = _flow("float32", cases)
    run_and_compare(flow, inputs, 2e-6, features)


def test_onnx_cases():
    """Every case of ONNX's Resize and Upsample node tests, compiled."""
    cases = [(inputs[0].shape, onnx_attributes(node, inputs)) for _, node, inputs, _ in ONNX_CASES]
    cases += [(inputs[0].shape, upsample_attributes(node, inputs))
              for _, node, inputs, _ in UPSAMPLE_CASES]
    flow, inputs = _flow("float32", cases)
    net = run_and_compare(flow, inputs, 2e-6)
    # And on the generators' own data, against their expected outputs.
    for i, (_, _, onnx_inputs, outputs) in enumerate(ONNX_CASES + UPSAMPLE_CASES):
        data = net.cell(f"f{i}").instance()
        data[f"f{i}/x"] = onnx_inputs[0]
        data.compute()
        np.testing.assert_allclose(data[f"f{i}/Resize:0"], outputs[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 3])
def test_large_resizes_split_over_threads(threads):
    """Resizes big enough to be split into tasks along their outermost axis (an uneven last
    task), as segmentation heads upsample their logits."""
    cases = [((1, 21, 28, 28), _attrs((1, 21, 28, 28), (1, 21, 224, 224), mode="linear")),
             ((2, 5, 40, 30), _attrs((2, 5, 40, 30), (2, 5, 160, 120), mode="nearest")),
             ((3, 64, 96), _attrs((3, 64, 96), (3, 64, 500), mode="cubic"))]
    flow, inputs = _flow("float32", cases)
    run_and_compare(flow, inputs, 2e-6, threads=threads)
