"""Integer convolutions of QDQ models (issue 27): the fuse_integer_conv pass, the ConvInteger
op and its kernel (an implicit im2col of the bytes: vpdpbusd on four channels where the CPU
has VNNI and the weights are int8, pmaddwd on pairs of channels elsewhere).

The int32 sums are exact, so results equal the float convolution's wherever its rounding
does not move a value across a quantization boundary, and ONNX Runtime's where it computes
exactly: on AVX2 its uint8 x int8 kernel adds pairs of products in int16 with saturation,
so the comparisons with its optimized graph use weights of 7 bits (its ``reduce_range``);
full-range weights are compared with its graph run as the spec says (optimizations off)."""

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_static,
)

import myelin
import myelin.onnx
from myelin.errors import ShapeError
from myelin.ops import registry
from myelin.optimize.quantized_conv import integer_weights

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(2027)


def _qdq_conv(x_shape, cout, kernel, top=64, per_channel=True, relu=True, bias=True,
              group=1, **attrs):
    """A QDQ model: x quantized to uint8 and back, a Conv by int8 weights (largest magnitude
    ``top``, per output channel or per tensor) dequantized, optionally a Relu, and the
    output quantized and dequantized."""
    cin = x_shape[1]
    w = RNG.standard_normal((cout, cin // group) + tuple(kernel)).astype(np.float32)
    rows = np.abs(w).reshape(cout, -1).max(axis=1)
    w_scale = (rows / top if per_channel else np.float32(rows.max() / top)).astype(np.float32)
    shape = (-1,) + (1,) * (len(kernel) + 1) if per_channel else ()
    w_q = np.clip(np.round(w / np.reshape(w_scale, shape)), -top, top).astype(np.int8)
    x_scale, y_scale = np.float32(0.02), np.float32(0.05)
    inits = {"xs": x_scale, "xz": np.uint8(128), "wq": w_q, "ws": w_scale,
             "wz": np.zeros(cout if per_channel else (), np.int8),
             "ys": y_scale, "yz": np.uint8(0 if relu else 128)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0)]
    conv_inputs = ["xd", "wd"]
    if bias:
        b_scale = (x_scale * np.broadcast_to(w_scale, (cout,))).astype(np.float32)
        inits.update(bq=np.round(RNG.standard_normal(cout) / b_scale).astype(np.int32),
                     bs=b_scale, bz=np.zeros(cout, np.int32))
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"], axis=0))
        conv_inputs.append("bd")
    nodes.append(helper.make_node("Conv", conv_inputs, ["c"], group=group, **attrs))
    last = "c"
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        last = "r"
    nodes += [helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    return _model(nodes, x_shape, TensorProto.FLOAT, inits, TensorProto.FLOAT)


def _model(nodes, x_shape, x_type, inits, y_type):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", x_type, list(x_shape))],
        [helper.make_tensor_value_info("y", y_type, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _ort(model, feeds, optimize=True):
    options = onnxruntime.SessionOptions()
    if not optimize:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onnxruntime.InferenceSession(model.SerializeToString(), options,
                                        providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _kernels(model):
    return [line.split("= ", 1)[1].split("(")[0] for line in
            str(model.network().cell("main")).splitlines() if " = " in line]


def _image(shape):
    return (RNG.standard_normal(shape) * 1.5).astype(np.float32)


@pytest.mark.parametrize("x_shape, cout, kernel, options", [
    ((1, 8, 10, 10), 16, (3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 64, 7, 9), 24, (1, 1), {}),
    ((1, 7, 13, 13), 5, (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 3, 9, 11), 8, (5, 5), {"pads": [2, 1, 2, 0], "per_channel": False, "relu": False}),
    ((1, 6, 12, 12), 9, (3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2], "bias": False}),
    ((1, 5, 40), 12, (3,), {"strides": [3], "pads": [1, 1]}),
    ((1, 32, 9, 9), 48, (3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ((2, 18, 7, 7), 16, (3, 3), {"group": 2, "strides": [2, 2], "per_channel": False}),
])
def test_qdq_convolutions_match_onnx_runtime(x_shape, cout, kernel, options):
    model = _qdq_conv(x_shape, cout, kernel, **options)
    x = _image(x_shape)
    compiled = myelin.onnx.load(model)
    (y,) = compiled.run({"x": x})
    assert any(k.startswith("ConvInteger") for k in _kernels(compiled))
    np.testing.assert_array_equal(y, _ort(model, {"x": x}))
    # The float Conv's rounding may move a value at a boundary by one step (0.05).
    (floats,) = myelin.onnx.load(model, disable_passes=("fuse_integer_conv",)).run({"x": x})
    assert np.abs(y - floats).max() <= 0.0501 and np.mean(y != floats) < 0.01


class _Images(CalibrationDataReader):
    def __init__(self, shape):
        self.images = iter([{"x": _image(shape)} for _ in range(4)])

    def get_next(self):
        return next(self.images, None)


def _residual_block(tmp_path, activations):
    """A float residual block (3x3 Conv with bias, ReLU, 1x1 Conv, the input added, ReLU)
    quantized by ONNX Runtime's quantize_static to QDQ, 7-bit per-channel weights."""
    w1 = (RNG.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)
    w2 = (RNG.standard_normal((8, 16, 1, 1)) * 0.2).astype(np.float32)
    b1 = (RNG.standard_normal(16) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    model = _model(nodes, (1, 8, 12, 12), TensorProto.FLOAT, {"w1": w1, "w2": w2, "b1": b1},
                   TensorProto.FLOAT)
    source, target = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(model, source)
    quantize_static(source, target, _Images((1, 8, 12, 12)), quant_format=QuantFormat.QDQ,
                    per_channel=True, reduce_range=True, activation_type=activations,
                    weight_type=QuantType.QInt8)
    return onnx.load(target)


@pytest.mark.parametrize("activations, features", [(QuantType.QUInt8, None),
                                                    (QuantType.QInt8, "sse")])
def test_requantized_layers_pass_bytes(tmp_path, activations, features):
    """The requantization after each convolution runs in its epilogue: the first writes the
    bytes the second reads, the second its dequantized float for the residual add."""
    model = _residual_block(tmp_path, activations)
    x = _image((1, 8, 12, 12))
    compiled = myelin.onnx.load(model, **({"features": features} if features else {}))
    (y,) = compiled.run({"x": x})
    steps = [line for line in str(compiled.network().cell("main")).splitlines() if " = " in line]
    integer = [line for line in steps if "= ConvInteger[" in line]
    assert len(integer) == 2
    assert integer[1].split(" = ")[1].split("(")[1].split(",")[0] == \
        integer[0].split(" = ")[0].strip()
    assert sum("CastExpr" in line for line in steps) == 1       # the input's quantization
    # The quantization's division is in the scale and bias: no division in the epilogues.
    recipes = [step.attrs.get_str("expr") for step in compiled.network().cell("main").steps
               if step.type == "ConvInteger"]
    assert all(recipe.startswith("@0=") and "Div" not in recipe for recipe in recipes)
    np.testing.assert_array_equal(y, _ort(model, {"x": x}))


@pytest.mark.parametrize("stride, size", [(1, 12), (2, 13)])
def test_depthwise_between_int8_convolutions_runs_on_bytes(tmp_path, stride, size):
    """An inverted residual: its depthwise convolution is a ConvInteger too (the depthwise
    kernel, exact in float32) reading and writing the bytes of the int8 ones around it, in
    their plain layout: no reorders, no conversions between them."""
    w1 = (RNG.standard_normal((16, 8, 1, 1)) * 0.3).astype(np.float32)
    wd = (RNG.standard_normal((16, 1, 3, 3)) * 0.3).astype(np.float32)
    w2 = (RNG.standard_normal((8, 16, 1, 1)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "wd"], ["c2"], group=16, pads=[1, 1, 1, 1],
                              strides=[stride, stride]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w2"], ["y"])]
    shape = (1, 8, size, size)
    model = _model(nodes, shape, TensorProto.FLOAT, {"w1": w1, "wd": wd, "w2": w2},
                   TensorProto.FLOAT)
    source, target = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(model, source)
    quantize_static(source, target, _Images(shape), quant_format=QuantFormat.QDQ,
                    per_channel=True, reduce_range=True, weight_type=QuantType.QInt8)
    quantized = onnx.load(target)
    compiled = myelin.onnx.load(quantized)
    x = _image(shape)
    (y,) = compiled.run({"x": x})
    steps = [s for s in compiled.network().cell("main").steps if not s.noop]
    integer = [s for s in steps if s.type == "ConvInteger"]
    assert [s.outputs[0].dtype for s in integer] == ["int8", "int8", "float32"]
    assert integer[1].kernel.name == "ConvDepthwise"
    assert not any(s.type in ("Transpose", "Cast") or s.attrs.get("channel_block", 0)
                   for s in steps[2:])          # (the input's quantization and its cast first)
    last = quantized.graph.node[-1]                     # the output's DequantizeLinear
    scale = float(numpy_helper.to_array(
        next(i for i in quantized.graph.initializer if i.name == last.input[1])))
    np.testing.assert_allclose(y, _ort(quantized, {"x": x}, optimize=False),
                               atol=1.01 * scale)       # (equal in the runs so far)


def test_depthwise_sums_past_float32s_integers_keep_the_int32_kernel():
    """A depthwise kernel of 23x23 taps of weights +-127: sums of up to 255 x 127 x 529 (past
    2 ** 24) would not be exact in float32, so it runs on the int32 product."""
    model = _qdq_conv((1, 4, 24, 24), 4, (23, 23), top=127, group=4, pads=[11] * 4)
    weights = next(i for i in model.graph.initializer if i.name == "wq")
    signs = np.where(RNG.random(tuple(weights.dims)) < 0.5, -127, 127).astype(np.int8)
    weights.CopyFrom(numpy_helper.from_array(signs, "wq"))
    x = _image((1, 4, 24, 24))
    compiled = myelin.onnx.load(model)
    (y,) = compiled.run({"x": x})
    (step,) = [s for s in compiled.network().cell("main").steps if s.type == "ConvInteger"]
    assert step.kernel.name == "ConvInteger"
    spec = _ort(model, {"x": x}, optimize=False)
    assert np.abs(y - spec).max() <= 0.0501 and np.mean(y != spec) < 0.01


def test_a_quantized_output_is_written_by_the_convolution():
    """A model whose output is the QuantizeLinear's bytes: the ConvInteger step writes them."""
    model = _qdq_conv((1, 6, 9, 9), 10, (3, 3), pads=[1, 1, 1, 1])
    model.graph.node.pop()                                   # the last DequantizeLinear
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("yq", TensorProto.UINT8, None))
    x = _image((1, 6, 9, 9))
    compiled = myelin.onnx.load(model)
    (y,) = compiled.run({"x": x})
    steps = [line for line in str(compiled.network().cell("main")).splitlines() if " = " in line]
    assert any(line.strip().startswith("main/yq = ConvInteger") for line in steps)
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, _ort(model, {"x": x}))


def test_full_range_weights_follow_the_spec():
    model = _qdq_conv((1, 32, 9, 9), 20, (3, 3), top=127, pads=[1, 1, 1, 1])
    x = _image((1, 32, 9, 9))
    compiled = myelin.onnx.load(model)
    (y,) = compiled.run({"x": x})
    assert any(k.startswith("ConvInteger") for k in _kernels(compiled))
    spec = _ort(model, {"x": x}, optimize=False)
    assert np.abs(y - spec).max() <= 0.0501 and np.mean(y != spec) < 0.01


@pytest.mark.parametrize("x_type, w_type, features", [
    (np.uint8, np.int8, None), (np.int8, np.uint8, "sse"), (np.uint8, np.uint8, "avx")])
def test_conv_integer_is_exact(x_type, w_type, features):
    """ONNX's ConvInteger (zero points on both sides) runs on the kernel, exactly."""
    x_range = (0, 256) if x_type == np.uint8 else (-128, 128)
    w_range = (0, 256) if w_type == np.uint8 else (-128, 128)
    x = RNG.integers(*x_range, (2, 11, 15, 14)).astype(x_type)
    w = RNG.integers(*w_range, (13, 11, 3, 2)).astype(w_type)
    x_zero, w_zero = x.flat[0], w.flat[1]
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 0, 1, 1],
                            strides=[1, 2])
    x_onnx = TensorProto.UINT8 if x_type == np.uint8 else TensorProto.INT8
    model = _model([node], x.shape, x_onnx, {"w": w, "xz": x_zero, "wz": w_zero},
                   TensorProto.INT32)
    compiled = myelin.onnx.load(model, **({"features": features} if features else {}))
    (y,) = compiled.run({"x": x})
    assert any(k.startswith("ConvInteger") for k in _kernels(compiled))
    shifted = torch.from_numpy(x.astype(np.float64) - float(x_zero))
    weights = torch.from_numpy(w.astype(np.float64) - float(w_zero))
    want = torch.nn.functional.conv2d(torch.nn.functional.pad(shifted, (0, 1, 1, 1)),
                                      weights, stride=(1, 2)).numpy()
    np.testing.assert_array_equal(y, want.astype(np.int32))


@pytest.mark.parametrize("x_type, shape, group, options", [
    (np.uint8, (2, 13, 9, 11), 1, {"pads": [1, 2, 0, 1], "strides": [1, 2]}),
    (np.int8, (1, 18, 8, 8), 2, {"pads": [1, 1, 1, 1]}),
    (np.int8, (1, 6, 7, 20), 1, {"pads": [2, 0, 0, 2], "dilations": [2, 1]}),
])
def test_conv_integer_with_int8_weights_is_exact(x_type, shape, group, options):
    """int8 weights with zero point 0: vpdpbusd on a CPU with VNNI, the image's bytes as
    they are (int8 ones flipped to unsigned), the padding their zero point, and channel
    counts that are not multiples of four."""
    low, high = (0, 256) if x_type == np.uint8 else (-128, 128)
    x = RNG.integers(low, high, shape).astype(x_type)
    w = RNG.integers(-128, 128, (16, shape[1] // group, 3, 3)).astype(np.int8)
    x_zero = x_type(RNG.integers(low, high))
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], group=group,
                            **options)
    x_onnx = TensorProto.UINT8 if x_type == np.uint8 else TensorProto.INT8
    model = _model([node], shape, x_onnx, {"w": w, "xz": x_zero, "wz": np.int8(0)},
                   TensorProto.INT32)
    (y,) = myelin.onnx.load(model).run({"x": x})
    pads = options["pads"]
    shifted = torch.from_numpy(x.astype(np.float64) - float(x_zero))
    want = torch.nn.functional.conv2d(
        torch.nn.functional.pad(shifted, (pads[1], pads[3], pads[0], pads[2])),
        torch.from_numpy(w.astype(np.float64)), stride=options.get("strides", 1),
        dilation=options.get("dilations", 1), groups=group).numpy()
    np.testing.assert_array_equal(y, want.astype(np.int32))


@pytest.mark.parametrize("features, instruction", [
    ("+avx,+avx2,+fma", "vpmaddwd"),
    ("+avx,+avx2,+fma,+avxvnni", "vpdpbusd\t%ymm"),
    ("+avx512f,+avx512bw,+avx512vl,+avx512vnni", "vpdpbusd\t%zmm"),
])
def test_the_multiply_add_follows_the_target(features, instruction):
    model = myelin.onnx.load(_qdq_conv((1, 16, 10, 10), 32, (3, 3), pads=[1, 1, 1, 1]))
    model.run({"x": _image((1, 16, 10, 10))})
    text = myelin.Compiler().emit(model.flow, "x86_64-unknown-linux-gnu", "generic", features)
    assert instruction in text
    if "vnni" not in features:
        assert "vpdpbusd" not in text


def test_what_does_not_fit_keeps_the_float_conv():
    """Float weights (not integers times a scale) and thin groups (not depthwise) stay
    float."""
    x = _image((1, 8, 6, 6))
    grouped = _qdq_conv((1, 8, 6, 6), 8, (3, 3), group=4, pads=[1, 1, 1, 1])
    model = _qdq_conv((1, 8, 6, 6), 4, (1, 1))
    weights = next(i for i in model.graph.initializer if i.name == "wq")
    model.graph.node[2].CopyFrom(helper.make_node("Identity", ["wf"], ["wd"]))
    model.graph.initializer.append(numpy_helper.from_array(
        RNG.standard_normal(tuple(weights.dims)).astype(np.float32), "wf"))
    for case in (grouped, model):
        compiled = myelin.onnx.load(case)
        (y,) = compiled.run({"x": x})
        assert not any(k.startswith("ConvInteger") for k in _kernels(compiled))
        np.testing.assert_allclose(y, _ort(case, {"x": x}, optimize=False), atol=0.051)


def test_integer_weights_are_recovered():
    ints = RNG.integers(-127, 128, (6, 4, 3, 3))
    ints[1] = np.clip(ints[1], -64, 64)         # 7 bits
    ints[2] = RNG.integers(-255, 256, (4, 3, 3))  # shifted uint8
    ints[3] = 0
    scales = RNG.uniform(1e-3, 1e-1, 6).astype(np.float32)
    weights = (ints.astype(np.float32) * scales[:, None, None, None]).astype(np.float32)
    got, got_scales = integer_weights(weights)
    np.testing.assert_allclose(got * got_scales[:, None, None, None], weights, rtol=1e-6)
    assert got.dtype == np.int16 and np.abs(got).max() <= 255
    seven_bits, _ = integer_weights(weights[1:2])       # (a grid of 64 is one of 128 too)
    assert seven_bits.dtype == np.int8
    per_tensor = RNG.integers(-127, 128, (3, 8, 3, 3))
    per_tensor[0] = np.clip(per_tensor[0], -85, 85)     # 85 divides 255: 3 x its integers
    per_tensor[0, 0, 0, 0], per_tensor[1, 0, 0, 0] = 85, -127
    got, _ = integer_weights(per_tensor.astype(np.float32) * np.float32(0.01))
    np.testing.assert_array_equal(got, per_tensor)
    assert integer_weights(RNG.standard_normal((4, 3, 3, 3))) is None
    assert integer_weights(np.full((2, 3, 1, 1), np.nan)) is None


def test_op_checks_its_inputs():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", (1, 3, 8, 8))
    w = f.const(np.zeros((4, 3, 3, 3), np.int8))
    zero = f.const(np.zeros((), np.uint8))
    op = flow.op("f/q", "ConvInteger", flow.funcs["f"], [x, w, zero])
    with pytest.raises(ShapeError, match="uint8 or int8"):
        registry.infer(op)
    x = f.var("x8", "uint8", (1, 3, 8, 8))
    scale = f.const(np.ones(4, np.float32))
    op = flow.op("f/q2", "ConvInteger", flow.funcs["f"], [x, w, zero, scale])
    with pytest.raises(ShapeError, match="both scale and bias"):
        registry.infer(op)
    op = flow.op("f/q3", "ConvInteger", flow.funcs["f"], [x, w, zero, scale, scale], [],
                 {"expr": "@0=Relu(%0)", "dtype": "uint8"})
    assert registry.infer(op)[0].dtype == "uint8"
    op = flow.op("f/q4", "ConvInteger", flow.funcs["f"], [x, w, zero], [], {"expr": "@0=Relu(%0)"})
    with pytest.raises(ShapeError, match="need the inputs scale and bias"):
        registry.infer(op)


@pytest.mark.parametrize("group", [1, 6])
def test_dequantized_sums_are_flagged_never_nan(group):
    """The sums of bytes times finite scales plus finite biases are never NaN: flagged so
    (``nnan``), the requantization's clamps compile without NaN tests, in the int8 kernel
    and in the depthwise one (6 groups of one channel)."""
    model = _qdq_conv((1, 6, 9, 9), 6 if group > 1 else 8, (3, 3), group=group,
                      pads=[1, 1, 1, 1])
    x = _image((1, 6, 9, 9))
    compiled = myelin.onnx.load(model, dump=True)
    (y,) = compiled.run({"x": x})
    np.testing.assert_array_equal(y, _ort(model, {"x": x}))
    kernel = "ConvDepthwise" if group > 1 else "ConvInteger"
    assert any(k.startswith(kernel) for k in _kernels(compiled))
    assert "fmul nnan" in compiled.network().dumps["llvm"]
