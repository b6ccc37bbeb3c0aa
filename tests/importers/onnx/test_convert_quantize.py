"""Quantization converters against ONNX Runtime (or ONNX's reference evaluator where ONNX
Runtime lacks the case); integer outputs must be exact."""

import numpy as np
import onnxruntime
import pytest
from onnx import helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

import myelin.onnx
from graph_inputs import graph_inputs

RNG = np.random.default_rng(0)


def _model(op, inputs, outputs=("y",), opset=13, initializers=(), **attrs):
    """A one-node model; ``inputs`` is a list of (name, array) (None for an absent optional
    input); names in ``initializers`` become initializers, the others graph inputs."""
    names, infos, inits, feeds = graph_inputs(inputs, initializers)
    node = helper.make_node(op, names, list(outputs), **attrs)
    graph = helper.make_graph([node], "g", infos,
                              [helper.make_value_info(o, helper.TypeProto()) for o in outputs],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    # Output types from shape inference (the importer checks them).
    inferred = shape_inference.infer_shapes(model)
    types = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    del model.graph.output[:]
    for o in outputs:
        info = types[o]
        model.graph.output.append(helper.make_tensor_value_info(
            o, info.type.tensor_type.elem_type, None))
    return model, feeds


def _expected(model, feeds, reference=False):
    if reference:
        return ReferenceEvaluator(model).run(None, feeds)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _check(model, feeds, reference=False, rtol=0.0, expected=None):
    expected = expected if expected is not None else _expected(model, feeds, reference)
    actual = myelin.onnx.load(model).run(feeds)
    for a, e in zip(actual, expected):
        e = np.asarray(e)
        assert a.dtype == e.dtype and a.shape == e.shape
        if a.dtype.kind in "iub" or rtol == 0:
            np.testing.assert_array_equal(a, e)
        else:
            np.testing.assert_allclose(a, e, rtol=rtol)


def _float_input(shape, scale=1.0):
    """Random floats with ties (k + 0.5) * scale, zeros and values past the int ranges."""
    x = RNG.standard_normal(shape).astype(np.float32) * 60 * scale
    flat = x.reshape(-1)
    n = flat.size
    flat[: n // 4] = (RNG.integers(-20, 20, n // 4) + 0.5) * scale
    flat[n // 4] = 0
    flat[n // 4 + 1] = 1e4 * scale
    flat[n // 4 + 2] = -1e4 * scale
    return x


# QuantizeLinear.
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_quantize_per_tensor(dtype):
    x = _float_input((3, 5, 7), 0.25)
    zero = np.array(3 if dtype == np.uint8 else -4, dtype)
    _check(*_model("QuantizeLinear", [("x", x), ("s", np.float32(0.25)), ("z", zero)]))
    # Without a zero point the output is uint8; the scale may be a one-element vector.
    _check(*_model("QuantizeLinear", [("x", x), ("s", np.array([0.5], np.float32))],
                   opset=10))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_per_axis(axis):
    x = _float_input((4, 6, 5), 0.5)
    n = x.shape[axis]
    scale = RNG.uniform(0.1, 1.0, n).astype(np.float32)
    zero = RNG.integers(-20, 20, n).astype(np.int8)
    _check(*_model("QuantizeLinear", [("x", x), ("s", scale), ("z", zero)], axis=axis,
                   initializers={"s"}))


@pytest.mark.parametrize("dtype", [np.uint16, np.int16])
def test_quantize_16_bit(dtype):
    x = _float_input((5, 9), 0.01) * 100
    zero = np.array(1000 if dtype == np.uint16 else -300, dtype)
    _check(*_model("QuantizeLinear", [("x", x), ("s", np.float32(0.02)), ("z", zero)],
                   opset=21))


def test_quantize_blocked_and_output_dtype():
    x = _float_input((4, 10), 0.3)
    scale = RNG.uniform(0.1, 1.0, (4, 3)).astype(np.float32)   # blocks of 4: 4 + 4 + 2
    zero = RNG.integers(-5, 5, (4, 3)).astype(np.int8)
    _check(*_model("QuantizeLinear", [("x", x), ("s", scale), ("z", zero)], opset=21,
                   axis=1, block_size=4), reference=True)
    scale = RNG.uniform(0.1, 1.0, (2, 10)).astype(np.float32)   # axis 0, blocks of 2
    _check(*_model("QuantizeLinear", [("x", x), ("s", scale)], opset=21, axis=0,
                   block_size=2, output_dtype=helper.np_dtype_to_tensor_dtype(
                       np.dtype(np.int8))), reference=True)


def test_quantize_float16_and_constant_input():
    x = _float_input((6, 7), 0.125).astype(np.float16)
    _check(*_model("QuantizeLinear", [("x", x), ("s", np.float16(0.125)),
                                      ("z", np.int8(-3))], opset=19), reference=True)
    # All inputs constant: folded while importing (float64 reference arithmetic).
    x = _float_input((6, 7), 0.1)
    model, _ = _model("QuantizeLinear", [("x", x), ("s", np.float32(0.1)),
                                         ("z", np.uint8(9))], initializers={"x", "s", "z"})
    _check(model, {})


# DequantizeLinear.
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint16, np.int32])
def test_dequantize_per_tensor(dtype):
    info = np.iinfo(dtype)
    low, high = max(info.min, -100000), min(info.max, 100000)
    x = RNG.integers(low, high, (3, 4, 5), endpoint=True).astype(dtype)
    zero = np.array(0 if dtype == np.int32 else (low + high) // 3, dtype)
    opset = 21 if dtype in (np.int16, np.uint16) else 13
    _check(*_model("DequantizeLinear", [("x", x), ("s", np.float32(0.037)), ("z", zero)],
                   opset=opset), rtol=1e-6)
    _check(*_model("DequantizeLinear", [("x", x), ("s", np.float32(0.5))], opset=opset),
           rtol=1e-6)


def test_dequantize_per_axis_and_blocked():
    x = RNG.integers(0, 256, (2, 6, 5)).astype(np.uint8)
    scale = RNG.uniform(0.01, 1, 6).astype(np.float32)
    zero = RNG.integers(0, 256, 6).astype(np.uint8)
    _check(*_model("DequantizeLinear", [("x", x), ("s", scale), ("z", zero)]), rtol=1e-6)
    x = RNG.integers(-128, 128, (6, 7)).astype(np.int8)
    scale = RNG.uniform(0.01, 1, (6, 3)).astype(np.float32)
    zero = RNG.integers(-128, 128, (6, 3)).astype(np.int8)
    _check(*_model("DequantizeLinear", [("x", x), ("s", scale), ("z", zero)], opset=21,
                   axis=-1, block_size=3), reference=True, rtol=1e-6)


def test_dequantize_float16_scale():
    x = RNG.integers(0, 256, (4, 5)).astype(np.uint8)
    _check(*_model("DequantizeLinear", [("x", x), ("s", np.float16(0.0625)),
                                        ("z", np.uint8(128))], opset=19), rtol=1e-3)


# DynamicQuantizeLinear.
@pytest.mark.parametrize("kind", ["mixed", "positive", "negative", "zero"])
def test_dynamic_quantize(kind):
    x = RNG.standard_normal((3, 17)).astype(np.float32) * 4
    if kind == "positive":
        x = np.abs(x) + 1
    elif kind == "negative":
        x = -np.abs(x) - 1
    elif kind == "zero":
        x = np.zeros_like(x)
    _check(*_model("DynamicQuantizeLinear", [("x", x)], outputs=("y", "scale", "zero"),
                   opset=11))


# MatMulInteger and QLinearMatMul.
def _ints(dtype, shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.uint8), (np.int8, np.int8),
                                           (np.uint8, np.int8)])
def test_matmul_integer(a_type, b_type):
    a, b = _ints(a_type, (4, 7)), _ints(b_type, (7, 5))
    # ONNX Runtime's uint8 x int8 kernel saturates pairs of products to int16 (AVX2
    # vpmaddubsw): compare mixed signs with the reference.
    mixed = a_type != b_type
    _check(*_model("MatMulInteger", [("a", a), ("b", b), ("az", _ints(a_type, ())),
                                     ("bz", _ints(b_type, ()))], opset=10), reference=mixed)
    # Per-row and per-column zero points (neither ONNX Runtime nor the reference has them),
    # batches, no zero points.
    az, bz = _ints(a_type, (4,)), _ints(b_type, (5,))
    expected = (a.astype(np.int32) - az[:, None]) @ (b.astype(np.int32) - bz)
    _check(*_model("MatMulInteger", [("a", a), ("b", b), ("az", az), ("bz", bz)], opset=10),
           expected=[expected])
    _check(*_model("MatMulInteger", [("a", _ints(a_type, (2, 3, 6))),
                                     ("b", _ints(b_type, (6, 4)))], opset=10),
           reference=mixed)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("batch", [(), (2,)])
def test_qlinear_matmul(dtype, batch):
    a, b = _ints(dtype, batch + (3, 9)), _ints(dtype, batch + (9, 4))
    inputs = [("a", a), ("as", np.float32(0.02)), ("az", _ints(dtype, ())),
              ("b", b), ("bs", np.float32(0.011)), ("bz", _ints(dtype, ())),
              ("ys", np.float32(0.35)), ("yz", _ints(dtype, ()))]
    _check(*_model("QLinearMatMul", inputs, opset=10, initializers={"bs", "b"}))


# ConvInteger and QLinearConv.
@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 0, 1, 2], "strides": [2, 1]},
                                   {"group": 2, "dilations": [1, 2]}])
def test_conv_integer(attrs):
    group = attrs.get("group", 1)
    x = _ints(np.uint8, (2, 4, 7, 8))
    w = _ints(np.uint8, (6, 4 // group, 3, 3))
    _check(*_model("ConvInteger", [("x", x), ("w", w), ("xz", np.uint8(7)),
                                   ("wz", np.uint8(130))], opset=10, **attrs))
    # Per output channel weight zero points (ONNX Runtime: only for int8 weights here).
    _check(*_model("ConvInteger", [("x", x), ("w", w), ("xz", np.uint8(7)),
                                   ("wz", _ints(np.uint8, (6,)))], opset=10, **attrs),
           reference=True)


@pytest.mark.parametrize("dtype,per_channel,bias", [(np.uint8, False, True),
                                                    (np.int8, True, True),
                                                    (np.uint8, True, False)])
def test_qlinear_conv(dtype, per_channel, bias):
    x = _ints(dtype, (1, 3, 6, 7))
    w = _ints(np.int8, (4, 3, 3, 3))
    w_scale = RNG.uniform(0.001, 0.01, 4).astype(np.float32) if per_channel \
        else np.float32(0.004)
    w_zero = np.zeros(4, np.int8) if per_channel else np.int8(0)
    inputs = [("x", x), ("xs", np.float32(0.05)), ("xz", _ints(dtype, ())),
              ("w", w), ("ws", w_scale), ("wz", w_zero),
              ("ys", np.float32(0.2)), ("yz", _ints(dtype, ()))]
    if bias:
        inputs.append(("b", RNG.integers(-2000, 2000, 4).astype(np.int32)))
    # ONNX Runtime saturates uint8 x int8 products pairwise to int16: the reference then.
    _check(*_model("QLinearConv", inputs, opset=10, initializers={"w", "ws", "wz"},
                   pads=[1, 1, 0, 1], strides=[1, 2]), reference=dtype == np.uint8)


@pytest.mark.parametrize("conv_is_output", [False, True])
@pytest.mark.parametrize("depthwise", [True, False])
def test_quantize_after_conv_rounds_ties_to_even_in_fused_code(depthwise, conv_is_output):
    """Conv -> Clip -> QuantizeLinear -> DequantizeLinear, with integer weights and inputs
    in quarters so that x / scale lands exactly on ties (k + 0.5) in many places: fused into
    the convolution or not, each must round half to even as the spec says."""
    channels, scale = 24, np.float32(0.5)
    groups = channels if depthwise else 1
    weights = RNG.integers(-2, 3, (channels, channels // groups, 3, 3)).astype(np.float32)
    x = (RNG.integers(-12, 13, (1, channels, 11, 13)) / 4).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], group=groups, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "low", "high"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    inits = [numpy_helper.from_array(weights, "w"),
             numpy_helper.from_array(np.float32(-20), "low"),
             numpy_helper.from_array(np.float32(20), "high"),
             numpy_helper.from_array(scale, "s"), numpy_helper.from_array(np.int8(3), "z")]
    outputs = [helper.make_tensor_value_info("y", 1, None)]
    if conv_is_output:
        outputs.append(helper.make_tensor_value_info("c", 1, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, x.shape)],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    conv = np.clip(_conv(x, weights, groups), -20, 20)
    assert np.mean(conv / scale % 1 == 0.5) > 0.2          # many ties
    want = (np.clip(np.round(conv / scale) + 3, -128, 127) - 3) * scale
    got = myelin.onnx.load(model).run({"x": x})[0]
    np.testing.assert_array_equal(got, want)


def _conv(x, weights, groups):
    """A 3x3 convolution with padding 1 in float64 (exact for these small integers)."""
    _, channels, height, width = x.shape
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    per_group = channels // groups
    out = np.zeros((1, weights.shape[0], height, width))
    for o in range(weights.shape[0]):
        first = o // (weights.shape[0] // groups) * per_group
        for i in range(per_group):
            for dy in range(3):
                for dx in range(3):
                    out[0, o] += weights[o, i, dy, dx] * padded[0, first + i, dy:dy + height,
                                                                 dx:dx + width]
    return out
