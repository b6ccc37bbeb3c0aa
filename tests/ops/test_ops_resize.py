"""The Resize op's shape rule and float64 reference, checked against ONNX's reference
implementation on every case of ONNX's own Resize (and Upsample) node tests, plus bad
attributes."""

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx.backend.test.case.node import resize as onnx_resize_cases
from onnx.backend.test.case.node import upsample as onnx_upsample_cases
from onnx.reference import ReferenceEvaluator

import myelin
import myelin.onnx
from myelin import reference
from myelin.errors import ShapeError


def _collect(module, cls_name):
    """(name, node, inputs, outputs) of every case ONNX's node-test generator ``module`` makes."""
    cases = []
    original = module.expect

    def capture(node, inputs, outputs, name, **kwargs):
        cases.append((name, node, inputs, outputs))

    module.expect = capture
    try:
        for attr in sorted(vars(getattr(module, cls_name))):
            if attr.startswith("export"):
                getattr(getattr(module, cls_name), attr)()
    finally:
        module.expect = original
    return cases


ONNX_CASES = _collect(onnx_resize_cases, "Resize")
UPSAMPLE_CASES = _collect(onnx_upsample_cases, "Upsample")


def _imported_attributes(node, inputs, opset):
    """The attributes of the myelin Resize the ONNX importer makes of ``node`` (an ONNX Resize
    or Upsample) whose inputs after the first are constants."""
    x = inputs[0]
    names = [name for name in node.input if name]
    constants = [numpy_helper.from_array(value, name)
                 for name, value in zip(names[1:], inputs[1:])]
    elem_type = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info(names[0], elem_type, x.shape)],
                              [helper.make_tensor_value_info(node.output[0], elem_type, None)],
                              constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    flow = myelin.onnx.import_model(model, shapes={names[0]: x.shape}).flow
    (op,) = [op for op in flow.ops.values() if op.type == "Resize"]
    return dict(op.attrs)


def onnx_attributes(node, inputs):
    """Our Resize's attributes for ONNX Resize ``node`` (opset 19) with constant inputs."""
    return _imported_attributes(node, inputs, 19)


def upsample_attributes(node, inputs):
    """Our Resize's attributes for ONNX Upsample ``node`` (opset 9)."""
    return _imported_attributes(node, inputs, 9)


def build(dtype, shape, attrs):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", dtype, shape)
    y = f.op("Resize", [x], attrs=attrs)
    return flow, x, y


def run_reference(x_value, attrs):
    flow, x, y = build(str(x_value.dtype), x_value.shape, attrs)
    result = reference.run(flow, "f", {x: x_value})[y.name]
    assert result.shape == y.shape
    return result


@pytest.mark.parametrize("case", ONNX_CASES, ids=[c[0] for c in ONNX_CASES])
def test_reference_matches_onnx(case):
    name, node, inputs, outputs = case
    attrs = onnx_attributes(node, inputs)
    feeds = dict(zip([n for n in node.input if n], inputs))
    want = ReferenceEvaluator(node).run(None, feeds)[0]
    got = run_reference(inputs[0], attrs)
    assert got.shape == want.shape
    # ReferenceEvaluator computes cubic weights in float32 (cubic_coeff_a is an np.float32);
    # the generator's expected outputs come from float64 weights.
    np.testing.assert_allclose(got, want, rtol=_rtol(attrs), atol=1e-6, err_msg=name)
    np.testing.assert_allclose(got, outputs[0], rtol=1e-6, atol=1e-5, err_msg=name)


def _rtol(attrs):
    return 2e-5 if attrs.get("mode") == "cubic" else 1e-6


@pytest.mark.parametrize("case", UPSAMPLE_CASES, ids=[c[0] for c in UPSAMPLE_CASES])
def test_reference_matches_onnx_upsample(case):
    name, node, inputs, outputs = case
    got = run_reference(inputs[0], upsample_attributes(node, inputs))
    np.testing.assert_array_equal(got, outputs[0], err_msg=name)


def _onnx_run(x, attrs):
    """ONNX's reference Resize with our attributes (sizes and roi as inputs)."""
    rank = x.ndim
    onnx_attrs = {k: v for k, v in attrs.items() if k not in ("sizes", "scales", "roi")}
    node = helper.make_node("Resize", ["X", "roi", "scales"], ["Y"], **onnx_attrs)
    roi = np.array(attrs.get("roi", [0.0] * rank + [1.0] * rank), np.float64)
    scales = np.array(attrs["scales"], np.float32)
    return ReferenceEvaluator(node).run(None, {"X": x, "roi": roi, "scales": scales})[0]


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("transform", ["half_pixel", "half_pixel_symmetric", "align_corners",
                                       "asymmetric", "pytorch_half_pixel", "tf_crop_and_resize"])
def test_reference_matches_onnx_random(mode, transform):
    rng = np.random.default_rng()
    cases = [((2, 3, 5, 7), [1.0, 1.0, 2.0, 0.45]), ((1, 2, 9, 4), [1.0, 1.0, 0.75, 2.5]),
             ((11,), [1.6]), ((2, 5, 4, 6), [1.0, 1.0, 1.0, 1.5]), ((3, 5, 6), [1.5, 0.8, 2.0])]
    for shape, scales in cases:
        x = rng.uniform(-3, 3, shape).astype(np.float32)
        scales32 = [float(np.float32(s)) for s in scales]
        attrs = {"mode": mode, "coordinate_transformation_mode": transform, "scales": scales32,
                 "sizes": [int(v) for v in np.array(scales32) * np.array(shape)]}
        if transform == "tf_crop_and_resize":
            attrs["roi"] = ([0.0] * (len(shape) - 2) + [-0.1, 0.2])[-len(shape):] + \
                           ([1.0] * (len(shape) - 2) + [0.9, 1.3])[-len(shape):]
            attrs["extrapolation_value"] = 2.5
        for extra in ({}, {"exclude_outside": 1, "cubic_coeff_a": -0.5},
                      {"antialias": 1} if mode != "nearest" else {"nearest_mode": "ceil"}):
            if transform == "pytorch_half_pixel" and mode == "cubic" and 1 in attrs["sizes"]:
                continue    # ONNX's code and its text differ for a length-1 output there
            full = dict(attrs, **extra)
            if mode == "nearest" and "exclude_outside" in full:
                del full["exclude_outside"]
            np.testing.assert_allclose(run_reference(x, full), _onnx_run(x, full), rtol=_rtol(full),
                                       atol=_rtol(full), err_msg=f"{shape} {full}")


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32", "int64"])
def test_nearest_integers(dtype):
    x = np.arange(2 * 3 * 4, dtype=dtype).reshape(2, 3, 4)
    attrs = {"mode": "nearest", "sizes": [2, 6, 6], "scales": [1.0, 2.0, 1.5]}
    got = run_reference(x, attrs)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, _onnx_run(x, attrs))


def test_defaults_and_derived_attributes():
    x = np.arange(4.0).reshape(1, 4)
    # Scales alone: sizes = floor(input * scale); sizes alone: scales = sizes / input.
    np.testing.assert_array_equal(run_reference(x, {"scales": [1.0, 2.0]}),
                                  [[0, 0, 1, 1, 2, 2, 3, 3]])
    np.testing.assert_array_equal(run_reference(x, {"sizes": [1, 2], "mode": "nearest"}),
                                  [[0, 2]])   # half_pixel: x = 0.5, 2.5 round down
    assert myelin.ops.lookup("Resize").kind == myelin.ops.Kind.OPAQUE
    assert myelin.ops.lookup("Resize").attrs["coordinate_transformation_mode"] == "half_pixel"


def test_float_list_attribute():
    flow, x, y = build("float32", (2, 3), {"sizes": [4, 3], "scales": [2.0, 1.0],
                                           "roi": [0.0, 0.25, 1.0, 1.0]})
    assert y.producer.attrs.get_floats("roi") == [0.0, 0.25, 1.0, 1.0]
    assert y.producer.attrs.get_floats("missing", [1.5]) == [1.5]


@pytest.mark.parametrize("dtype,shape,attrs,message", [
    ("float32", (2, 3), {"sizes": [4, 6], "mode": "area"}, "mode"),
    ("float32", (2, 3), {"sizes": [4, 6], "coordinate_transformation_mode": "tf_half"},
     "coordinate_transformation_mode"),
    ("float32", (2, 3), {"sizes": [4, 6], "nearest_mode": "round"}, "nearest_mode"),
    ("float32", (2, 3), {"sizes": [4, 6, 1]}, "sizes"),
    ("float32", (2, 3), {"sizes": [4, -6]}, "sizes"),
    ("float32", (2, 3), {"sizes": [4, 6], "scales": [2.0]}, "scales"),
    ("float32", (2, 3), {"sizes": [4, 6], "scales": [2.0, 0.0]}, "scales"),
    ("float32", (2, 3), {"sizes": [4, 6], "roi": [0.0, 1.0]}, "roi"),
    ("float32", (2, 3), {}, "sizes or scales"),
    ("float32", (2, 3), {"sizes": [4, 6], "antialias": 1}, "antialias"),
    ("int32", (2, 3), {"sizes": [4, 6], "mode": "linear"}, "float"),
    ("bool", (2, 3), {"sizes": [4, 6]}, "numeric"),
    ("float32", (), {"sizes": []}, "scalar"),
])
def test_bad_attributes(dtype, shape, attrs, message):
    with pytest.raises(ShapeError, match=message) as info:
        build(dtype, shape, attrs)
    assert "(Resize)" in str(info.value)
