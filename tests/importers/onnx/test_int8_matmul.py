"""Integer matrix products on bytes (issue 27): the fuse_integer_matmul pass, the MatMulInteger
op and its kernel (pmaddwd run here; vpdpbusd checked in the assembly for VNNI targets).

Results must equal the exact product. ONNX Runtime's is compared where it computes exactly:
on AVX2 its uint8 x int8 kernel adds pairs of products in int16 with saturation (vpmaddubsw),
so those cases use weights of 7 bits, as its quantizer's ``reduce_range`` makes them."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import myelin
import myelin.onnx
from myelin.errors import ShapeError
from myelin.ops import registry

RNG = np.random.default_rng(27)
_ONNX = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.float32: TensorProto.FLOAT}
_RANGE = {np.uint8: (0, 256), np.int8: (-128, 128)}


def _bytes(dtype, shape, bits=8):
    low, high = _RANGE[dtype]
    if bits < 8:
        low, high = (low, low + (1 << bits)) if low == 0 else (-(1 << bits - 1), 1 << bits - 1)
    return RNG.integers(low, high, shape).astype(dtype)


def _model(nodes, x, initializers, output=TensorProto.INT32, domain=False):
    opsets = [helper.make_opsetid("", 13)]
    if domain:
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", _ONNX[x.dtype.type], list(x.shape))],
        [helper.make_tensor_value_info("y", output, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def _integer_model(x, w, x_zero, w_zero):
    return _model([helper.make_node("MatMulInteger", ["x", "w", "xz", "wz"], ["y"])], x,
                  {"w": w, "xz": x_zero, "wz": w_zero})


def _kernels(model):
    """The kernel names of the compiled model's steps."""
    return [line.split("= ", 1)[1].split("(")[0] for line in
            str(model.network().cell("main")).splitlines() if " = " in line]


def _exact(x, x_zero, w, w_zero):
    return np.matmul(x.astype(np.int64) - np.int64(x_zero), w.astype(np.int64) - w_zero)


def _ort(model, feeds):
    return onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("x_type, w_type, shape, per_column, features", [
    (np.uint8, np.int8, (1, 5, 37, 19), False, None),
    (np.uint8, np.uint8, (2, 3, 1, 40), True, "sse"),
    (np.int8, np.int8, (1, 130, 300, 77), True, None),
    (np.int8, np.uint8, (1, 9, 64, 33), False, "avx"),
])
def test_matmul_integer_is_exact(x_type, w_type, shape, per_column, features):
    batch, m, k, n = shape
    x = _bytes(x_type, (batch, m, k))
    w = _bytes(w_type, (k, n))
    w_zero = _bytes(w_type, (n,) if per_column else ())
    x_zero = _bytes(x_type, ())
    model = _integer_model(x, w, x_zero, w_zero)
    options = {"features": features} if features else {}
    compiled = myelin.onnx.load(model, **options)
    (y,) = compiled.run({"x": x})
    assert "MatMulInteger" in " ".join(_kernels(compiled))
    np.testing.assert_array_equal(y, _exact(x, x_zero, w, w_zero))
    if x_type == w_type:      # ONNX Runtime's u8u8 and s8s8 products are exact
        np.testing.assert_array_equal(y, _ort(model, {"x": x})[0])


def test_dynamic_quantization_matches_onnx_runtime():
    x = RNG.standard_normal((1, 24, 70)).astype(np.float32)
    w = _bytes(np.int8, (70, 50), bits=7)
    model = _model([helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
                    helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["y"])],
                   x, {"w": w, "wz": np.int8(0)})
    compiled = myelin.onnx.load(model)
    (y,) = compiled.run({"x": x})
    assert any(kernel.startswith("MatMulInteger") for kernel in _kernels(compiled))
    np.testing.assert_array_equal(y, _ort(model, {"x": x})[0])


def test_matmul_integer_to_float_matches_onnx_runtime():
    """com.microsoft's MatMulIntegerToFloat (per-column scales, a bias) uses the kernel."""
    x = _bytes(np.uint8, (1, 17, 45))
    w = _bytes(np.int8, (45, 21), bits=7)
    inits = {"xs": np.float32(0.02), "ws": RNG.uniform(0.01, 0.1, 21).astype(np.float32),
             "xz": np.uint8(131), "wz": np.zeros(21, np.int8), "w": w,
             "bias": RNG.standard_normal(21).astype(np.float32)}
    node = helper.make_node("MatMulIntegerToFloat", ["x", "w", "xs", "ws", "xz", "wz", "bias"],
                            ["y"], domain="com.microsoft")
    model = _model([node], x, inits, output=TensorProto.FLOAT, domain=True)
    compiled = myelin.onnx.load(model)
    (y,) = compiled.run({"x": x})
    assert any(kernel.startswith("MatMulInteger") for kernel in _kernels(compiled))
    np.testing.assert_allclose(y, _ort(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_per_row_zero_points_keep_the_int32_product():
    x = _bytes(np.uint8, (6, 10))
    w = _bytes(np.int8, (10, 4))
    x_zero = _bytes(np.uint8, (6,))
    model = _integer_model(x, w, x_zero, np.int8(3))
    compiled = myelin.onnx.load(model)
    (y,) = compiled.run({"x": x})
    assert not any(kernel.startswith("MatMulInteger") for kernel in _kernels(compiled))
    np.testing.assert_array_equal(y, _exact(x, x_zero[:, None], w, 3))


def _assembly(features):
    x = _bytes(np.uint8, (1, 8, 64))
    model = myelin.onnx.load(_integer_model(x, _bytes(np.int8, (64, 32)), np.uint8(7),
                                            np.int8(0)))
    model.run({"x": x})
    return myelin.Compiler().emit(model.flow, "x86_64-unknown-linux-gnu", "generic", features)


@pytest.mark.parametrize("features, instruction", [
    ("+avx,+avx2,+fma", "vpmaddwd"),
    ("+avx,+avx2,+fma,+avxvnni", "vpdpbusd\t%ymm"),
    ("+avx512f,+avx512bw,+avx512vl,+avx512vnni", "vpdpbusd\t%zmm"),
])
def test_the_multiply_add_follows_the_target(features, instruction):
    text = _assembly(features)
    assert instruction in text
    if "vnni" not in features:
        assert "vpdpbusd" not in text


def test_op_checks_its_inputs():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    a = f.var("a", "float32", (4, 8))
    b = f.const(np.zeros((8, 3), np.int8))
    zero = f.const(np.zeros((), np.uint8))
    op = flow.op("f/q", "MatMulInteger", flow.funcs["f"], [a, b, zero])
    with pytest.raises(ShapeError, match="uint8 or int8"):
        registry.infer(op)
