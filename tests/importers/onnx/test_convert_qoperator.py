"""ONNX Runtime's quantized com.microsoft ops (QOperator format) against ONNX Runtime itself:
float outputs close, quantized ones within one quantization step (ONNX Runtime computes some
with fixed-point multipliers and lookup tables) and almost all equal."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import myelin
import myelin.onnx
from graph_inputs import graph_inputs

RNG = np.random.default_rng(0)
MS = "com.microsoft"


def _model(op, inputs, out_type, initializers=(), model_opset=17, **attrs):
    """A one-node model of com.microsoft ``op``; ``inputs`` (name, array or None), those named
    in ``initializers`` constant; output "y" of ONNX element type ``out_type``."""
    names, infos, inits, feeds = graph_inputs(inputs, initializers)
    node = helper.make_node(op, names, ["y"], domain=MS, **attrs)
    graph = helper.make_graph([node], "g", infos,
                              [helper.make_tensor_value_info("y", out_type, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", model_opset),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model, feeds


def _check(model, feeds, rtol=1e-5, expected=None):
    if expected is None:
        session = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=["CPUExecutionProvider"])
        (expected,) = session.run(None, feeds)
    (actual,) = myelin.onnx.load(model).run(feeds)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if expected.dtype.kind == "f":
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * np.abs(expected).max())
        return
    difference = np.abs(actual.astype(np.int32) - expected.astype(np.int32))
    assert difference.max() <= 1, difference.max()
    assert (difference == 0).mean() >= 0.97


def _q(shape, dtype=np.uint8):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _weights(shape):
    """int8 weights in [-64, 63], as ONNX Runtime's quantizer makes them for CPUs without
    VNNI (reduce_range): its uint8 x int8 products there add pairs in saturating int16, which
    full-range weights overflow (so it gives other sums than the exact ones myelin computes)."""
    return RNG.integers(-64, 64, shape).astype(np.int8)


def _scale():
    return np.array(RNG.uniform(0.005, 0.05), np.float32)


def _zero(dtype=np.uint8):
    return np.array(RNG.integers(100, 150) if dtype == np.uint8 else RNG.integers(-20, 20),
                    dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary(op, dtype):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    for a_shape, b_shape in [((2, 3, 8, 8), (2, 3, 8, 8)), ((1, 16, 5, 5), (1, 16, 1, 1)),
                             ((4, 7), ())]:
        model, feeds = _model(op, [("a", _q(a_shape, dtype)), ("as", _scale()),
                                   ("az", _zero(dtype)), ("b", _q(b_shape, dtype)),
                                   ("bs", _scale()), ("bz", _zero(dtype)), ("cs", _scale()),
                                   ("cz", _zero(dtype))], elem,
                              initializers=("as", "az", "bs", "bz", "cs", "cz"))
        _check(model, feeds)


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}),
                                      ("QLinearLeakyRelu", {"alpha": 0.1})])
def test_activations(op, attrs):
    model, feeds = _model(op, [("x", _q((2, 40, 9))), ("xs", _scale()), ("xz", _zero()),
                               ("ys", np.array(1 / 256, np.float32)),
                               ("yz", np.array(0, np.uint8))],
                          TensorProto.UINT8, initializers=("xs", "xz", "ys", "yz"), **attrs)
    _check(model, feeds)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_pools(channels_last):
    x = _q((2, 6, 7, 16) if channels_last else (2, 16, 6, 7))
    params = [("xs", _scale()), ("xz", _zero()), ("ys", _scale()), ("yz", _zero())]
    model, feeds = _model("QLinearGlobalAveragePool", [("x", x)] + params, TensorProto.UINT8,
                          initializers=("xs", "xz", "ys", "yz"), channels_last=channels_last)
    _check(model, feeds)
    model, feeds = _model("QLinearAveragePool", [("x", x)] + params, TensorProto.UINT8,
                          initializers=("xs", "xz", "ys", "yz"), channels_last=channels_last,
                          kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    _check(model, feeds)


def test_concat_softmax_reduce_mean_and_where():
    ys, yz = _scale(), _zero()
    parts = []
    for i in range(3):
        parts += [(f"x{i}", _q((1, 4 + i, 5))), (f"s{i}", _scale()), (f"z{i}", _zero())]
    model, feeds = _model("QLinearConcat", [("ys", ys), ("yz", yz)] + parts, TensorProto.UINT8,
                          initializers=("ys", "yz", "s0", "z0", "s1", "z1", "s2", "z2"),
                          axis=1)
    _check(model, feeds)
    x = _q((3, 10))
    model, feeds = _model("QLinearSoftmax", [("x", x), ("xs", _scale()), ("xz", _zero()),
                                             ("ys", np.array(1 / 256, np.float32)),
                                             ("yz", np.array(0, np.uint8))],
                          TensorProto.UINT8, initializers=("xs", "xz", "ys", "yz"),
                          axis=-1, opset=13)
    _check(model, feeds)
    # ONNX Runtime declares QLinearReduceMean but has no CPU kernel: the float64 formula.
    x, xs, xz, ys, yz = _q((2, 8, 6)), _scale(), _zero(), _scale(), _zero()
    model, feeds = _model("QLinearReduceMean", [("x", x), ("xs", xs), ("xz", xz), ("ys", ys),
                                                ("yz", yz)],
                          TensorProto.UINT8, initializers=("xs", "xz", "ys", "yz"),
                          axes=[1], keepdims=1)
    mean = ((x.astype(np.float64) - xz) * xs).mean(1, keepdims=True)
    _check(model, feeds, expected=np.clip(np.round(mean / ys) + yz, 0, 255).astype(np.uint8))
    model, feeds = _model("QLinearWhere", [("c", RNG.random((4, 6)) < 0.5), ("t", _q((4, 6))),
                                           ("ts", _scale()), ("tz", _zero()),
                                           ("f", _q((4, 6))), ("fs", _scale()),
                                           ("fz", _zero()), ("zs", _scale()),
                                           ("zz", _zero())],
                          TensorProto.UINT8,
                          initializers=("ts", "tz", "fs", "fz", "zs", "zz"))
    _check(model, feeds)


@pytest.mark.parametrize("per_column", [False, True])
def test_products(per_column):
    a, b = _q((5, 32)), _weights((32, 12))
    b_scale = RNG.uniform(0.01, 0.05, 12).astype(np.float32) if per_column else _scale()
    b_zero = np.zeros(12, np.int8) if per_column else np.array(3, np.int8)
    bias = RNG.standard_normal(12).astype(np.float32)
    model, feeds = _model("MatMulIntegerToFloat",
                          [("a", a), ("b", b), ("as", _scale()), ("bs", b_scale),
                           ("az", _zero()), ("bz", b_zero), ("bias", bias)],
                          TensorProto.FLOAT, initializers=("b", "as", "bs", "az", "bz", "bias"))
    _check(model, feeds)
    model, feeds = _model("DynamicQuantizeMatMul",
                          [("a", RNG.standard_normal((5, 32)).astype(np.float32)), ("b", b),
                           ("bs", b_scale), ("bz", b_zero), ("bias", bias)],
                          TensorProto.FLOAT, initializers=("b", "bs", "bz", "bias"))
    _check(model, feeds)


@pytest.mark.parametrize("quantized_output", [False, True])
def test_qgemm(quantized_output):
    a, b = _q((6, 20)), _weights((12, 20))
    inputs = [("a", a), ("as", _scale()), ("az", _zero()), ("b", b), ("bs", _scale()),
              ("bz", np.array(0, np.int8)), ("c", RNG.integers(-500, 500, 12).astype(np.int32))]
    if quantized_output:
        inputs += [("ys", np.array(0.5, np.float32)), ("yz", _zero())]
    model, feeds = _model("QGemm", inputs,
                          TensorProto.UINT8 if quantized_output else TensorProto.FLOAT,
                          initializers=("as", "az", "b", "bs", "bz", "c", "ys", "yz"),
                          transB=1, alpha=0.5)
    _check(model, feeds)


def test_supported_and_checked_like_onnx_ops():
    assert {"com.microsoft.QLinearAdd", "com.microsoft.QGemm"} <= set(
        myelin.onnx.supported_ops())
    model, _ = _model("QLinearAdd", [("a", _q((2, 2))), ("as", _scale())], TensorProto.UINT8)
    with pytest.raises(myelin.ShapeError, match="has 2 inputs, the op takes 7 to 8"):
        myelin.onnx.load(model)
    model, _ = _model("QLinearConcat", [("ys", _scale()), ("yz", _zero()),
                                        ("x", _q((2, 2)))], TensorProto.UINT8, axis=0)
    with pytest.raises(myelin.ShapeError, match="triples"):
        myelin.onnx.load(model).run({"ys": _scale(), "yz": _zero(), "x": _q((2, 2))})


@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_quantize_lstm(per_column):
    """The float LSTM of the dequantized weights (ONNX Runtime's own LSTM on them agrees to
    1e-5); ONNX Runtime's DynamicQuantizeLSTM also rounds X and the hidden state to 8 bits."""
    hidden, size = 6, 8
    x = RNG.standard_normal((5, 2, size)).astype(np.float32)
    w, r = _weights((1, size, 4 * hidden)), _weights((1, hidden, 4 * hidden))
    scales = [(RNG.uniform(0.01, 0.03, (1, 4 * hidden)) if per_column
               else RNG.uniform(0.01, 0.03, (1,))).astype(np.float32) for _ in range(2)]
    zeros = [np.zeros(s.shape, np.int8) for s in scales]
    bias = RNG.standard_normal((1, 8 * hidden)).astype(np.float32)
    inputs = [("x", x), ("w", w), ("r", r), ("b", bias), ("lens", None), ("h0", None),
              ("c0", None), ("p", None), ("ws", scales[0]), ("wz", zeros[0]),
              ("rs", scales[1]), ("rz", zeros[1])]
    model, feeds = _model("DynamicQuantizeLSTM", inputs, TensorProto.FLOAT,
                          initializers=("w", "r", "b", "ws", "wz", "rs", "rz"),
                          hidden_size=hidden)
    (actual,) = myelin.onnx.load(model).run(feeds)
    # ONNX's LSTM of the dequantized weights, [directions, 4 hidden, input].
    float_weights = [(q.astype(np.float32) * s[:, None, :] if per_column
                      else q.astype(np.float32) * s[:, None, None]).transpose(0, 2, 1)
                     for q, s in ((w, scales[0]), (r, scales[1]))]
    node = helper.make_node("LSTM", ["x", "w", "r", "b"], ["y"], hidden_size=hidden)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, n) for n, v in zip("wrb", float_weights + [bias])])
    reference = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (expected,) = onnxruntime.InferenceSession(
        reference.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    (quantized,) = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert np.abs(actual - quantized).max() <= 0.05 * np.abs(quantized).max()
