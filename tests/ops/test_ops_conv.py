"""Conv, ConvTranspose, the pools and LRN in the registry: output shapes, shape errors naming
the op, and the float64 references against ONNX Runtime (or ONNX's reference evaluator) and
against direct loops."""

import itertools

import numpy as np
import pytest

import myelin
from myelin import ops, reference
from myelin.errors import ShapeError

OPS = ["Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool",
       "GlobalMaxPool", "GlobalLpPool", "LRN"]


def _run(op_type, arrays, attrs, outputs=1):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    inputs = [f.var(f"x{i}", str(a.dtype), a.shape) for i, a in enumerate(arrays)]
    if outputs == 2:
        attrs = dict(attrs, indices=True)
    out = f.op(op_type, inputs, None, attrs)
    out = out if isinstance(out, list) else [out]
    result = reference.run(flow, "f", dict(zip(inputs, arrays)), out)
    return [result[v.name] for v in out]


def test_registry_entries():
    for op_type in OPS:
        opdef = ops.lookup(op_type)
        assert opdef.doc and opdef.kind == ops.Kind.OPAQUE
    assert ops.lookup("Conv").attrs == {"kernel_shape": None, "strides": None, "pads": None,
                                        "dilations": None, "group": 1, "auto_pad": "NOTSET",
                                        "channel_block": 0, "input_block": 0, "winograd": 0}
    assert ops.lookup("AveragePool").attrs["count_include_pad"] == 0
    assert ops.lookup("LRN").attrs == {"size": None, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}


@pytest.mark.parametrize("op_type,shapes,attrs,expected", [
    ("Conv", [(1, 3, 224, 224), (64, 3, 7, 7)], dict(strides=[2, 2], pads=[3, 3, 3, 3]),
     (1, 64, 112, 112)),
    ("Conv", [(2, 4, 10), (6, 2, 3)], dict(group=2), (2, 6, 8)),
    ("Conv", [(1, 3, 9, 10), (5, 3, 3, 2)], dict(auto_pad="SAME_UPPER", strides=[2, 3]),
     (1, 5, 5, 4)),
    ("Conv", [(1, 3, 9, 10), (5, 3, 3, 3)], dict(dilations=[2, 3]), (1, 5, 5, 4)),
    ("ConvTranspose", [(1, 3, 5, 6), (3, 2, 3, 3)], dict(strides=[2, 2]), (1, 2, 11, 13)),
    ("ConvTranspose", [(1, 3, 5, 6), (3, 2, 3, 3)], dict(strides=[2, 2], output_padding=[1, 1],
                                                         pads=[1, 1, 1, 1]), (1, 2, 10, 12)),
    ("ConvTranspose", [(1, 3, 5, 6), (3, 2, 3, 3)], dict(strides=[2, 2], auto_pad="SAME_LOWER"),
     (1, 2, 10, 12)),
    ("MaxPool", [(1, 64, 112, 112)], dict(kernel_shape=[3, 3], strides=[2, 2],
                                          pads=[1, 1, 1, 1]), (1, 64, 56, 56)),
    ("MaxPool", [(1, 1, 5, 5)], dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
     (1, 1, 3, 3)),
    ("AveragePool", [(1, 1, 5)], dict(kernel_shape=[3], auto_pad="VALID", strides=[2]),
     (1, 1, 2)),
    ("GlobalAveragePool", [(2, 7, 3, 4, 5)], {}, (2, 7, 1, 1, 1)),
    ("LRN", [(1, 5, 3, 3)], dict(size=3), (1, 5, 3, 3)),
])
def test_output_shapes(op_type, shapes, attrs, expected):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    out = f.op(op_type, [f.var(f"x{i}", "float32", s) for i, s in enumerate(shapes)], None, attrs)
    assert out.shape == expected and out.dtype == "float32"


@pytest.mark.parametrize("op_type,shapes,attrs,message", [
    ("Conv", [(1, 3, 8, 8), (4, 2, 3, 3)], {}, r"does not fit input"),
    ("Conv", [(1, 4, 8, 8), (4, 2, 3, 3)], dict(group=3), r"group=3 does not divide"),
    ("Conv", [(1, 3, 8, 8), (4, 3, 3)], {}, r"must have the rank"),
    ("Conv", [(1, 3, 2, 8), (4, 3, 3, 3)], {}, r"too small for kernel"),
    ("Conv", [(1, 3, 8, 8), (4, 3, 3, 3), (5,)], {}, r"bias .* needs \[4\]"),
    ("Conv", [(1, 3, 8, 8), (4, 3, 3, 3)], dict(strides=[1]), r"strides=\[1\] needs 2 values"),
    ("Conv", [(1, 3, 8, 8), (4, 3, 3, 3)], dict(kernel_shape=[2, 2]), r"kernel_shape"),
    ("Conv", [(1, 3, 8, 8), (4, 3, 3, 3)], dict(auto_pad="SAME"), r"auto_pad"),
    ("Conv", [(3, 8), (4, 3, 3)], {}, r"rank 3 or more"),
    ("ConvTranspose", [(1, 3, 8, 8), (4, 2, 3, 3)], {}, r"needs 3 input channels"),
    ("MaxPool", [(1, 3, 8, 8)], {}, r"kernel_shape is required"),
    ("MaxPool", [(1, 3, 8, 8)], dict(kernel_shape=[2, 2], pads=[2, 0, 0, 0]),
     r"smaller than kernel_shape"),
    ("AveragePool", [(1, 3, 8, 8)], dict(kernel_shape=[2, 2], strides=[0, 1]), r">= 1"),
    ("LRN", [(1, 3, 8, 8)], {}, r"size"),
])
def test_shape_errors_name_the_op(op_type, shapes, attrs, message):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    inputs = [f.var(f"x{i}", "float32", s) for i, s in enumerate(shapes)]
    with pytest.raises(ShapeError, match=rf"op f/{op_type} \({op_type}\): .*{message}"):
        f.op(op_type, inputs, None, attrs)


def test_integer_inputs_are_rejected():
    f = myelin.Builder(myelin.Flow(), "f")
    with pytest.raises(ShapeError, match="float"):
        f.op("Conv", [f.var("x", "int32", [1, 1, 3, 3]), f.var("w", "int32", [1, 1, 1, 1])])


def test_conv_reference_against_loops():
    rng = np.random.default_rng()
    x = rng.standard_normal((2, 4, 7, 8))
    w = rng.standard_normal((6, 2, 3, 2))
    bias = rng.standard_normal(6)
    s, p, d, group = (2, 1), (1, 0, 2, 1), (1, 2), 2
    (y,) = _run("Conv", [x, w, bias], dict(strides=s, pads=p, dilations=d, group=group))
    padded = np.pad(x, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])))
    expected = np.zeros(y.shape)
    for n, m, i, j in itertools.product(*(range(k) for k in y.shape)):
        g = m // 3
        for c, kh, kw in itertools.product(range(2), range(3), range(2)):
            expected[n, m, i, j] += (padded[n, g * 2 + c, i * s[0] + kh * d[0],
                                            j * s[1] + kw * d[1]] * w[m, c, kh, kw])
        expected[n, m, i, j] += bias[m]
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)


def test_conv_transpose_is_the_adjoint_of_conv():
    """<ConvTranspose(y), x> == <y, Conv(x)> for the same weight (no bias)."""
    rng = np.random.default_rng()
    attrs = dict(strides=[2, 3], pads=[1, 0, 2, 1], dilations=[2, 1], group=2)
    x = rng.standard_normal((1, 4, 11, 13))
    w = rng.standard_normal((6, 2, 3, 2))
    (y,) = _run("Conv", [x, w], attrs)
    z = rng.standard_normal(y.shape)
    extent = [(k - 1) * d + 1 for k, d in zip(w.shape[2:], attrs["dilations"])]
    room = [n + attrs["pads"][a] + attrs["pads"][a + 2] - extent[a]
            for a, n in enumerate(x.shape[2:])]
    extra = [r % s for r, s in zip(room, attrs["strides"])]
    (back,) = _run("ConvTranspose", [z, w], dict(attrs, output_padding=extra))
    assert back.shape == x.shape
    np.testing.assert_allclose(np.vdot(back, x), np.vdot(z, y), rtol=1e-10)


# Against ONNX Runtime (ONNX's reference evaluator where ONNX Runtime is missing).
ONNX_CASES = [
    ("Conv", [(2, 4, 9, 10), (6, 2, 3, 3), (6,)],
     dict(group=2, strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2])),
    ("Conv", [(1, 3, 9, 10), (5, 3, 3, 2)], dict(auto_pad="SAME_UPPER", strides=[2, 3])),
    ("Conv", [(1, 3, 9, 10), (5, 3, 3, 2)], dict(auto_pad="SAME_LOWER", strides=[2, 3])),
    ("Conv", [(1, 3, 9, 10), (5, 3, 3, 2)], dict(auto_pad="VALID", strides=[2, 3])),
    ("Conv", [(1, 4, 9), (4, 1, 3)], dict(group=4, pads=[2, 1])),
    ("Conv", [(1, 2, 5, 6, 7), (3, 2, 2, 3, 2)], dict(pads=[1, 0, 1, 0, 1, 1], strides=[1, 2, 2])),
    ("ConvTranspose", [(2, 4, 5, 6), (4, 3, 3, 3), (6,)],
     dict(group=2, strides=[2, 1], pads=[1, 0, 0, 1], dilations=[1, 2], output_padding=[1, 0])),
    ("ConvTranspose", [(1, 3, 5, 6), (3, 2, 3, 3)], dict(strides=[2, 2], output_shape=[10, 13])),
    ("ConvTranspose", [(1, 3, 5, 6), (3, 2, 3, 3)], dict(strides=[2, 2], output_shape=[10, 13],
                                                         auto_pad="SAME_UPPER")),
    ("ConvTranspose", [(1, 3, 5, 6), (3, 2, 3, 3)], dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ("ConvTranspose", [(1, 3, 7), (3, 2, 4)], dict(strides=[3], pads=[1, 2])),
    ("MaxPool", [(2, 3, 9, 10)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                      ceil_mode=1)),
    ("MaxPool", [(2, 3, 8, 11)], dict(kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 0, 1],
                                      dilations=[2, 1])),
    ("MaxPool", [(2, 3, 8, 11)], dict(kernel_shape=[3, 2], strides=[2, 3], ceil_mode=1,
                                      storage_order=1)),
    ("MaxPool", [(1, 2, 5, 7, 6)], dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2],
                                        pads=[1, 1, 0, 0, 1, 1])),
    ("MaxPool", [(1, 3, 9, 10)], dict(kernel_shape=[3, 2], auto_pad="SAME_UPPER", strides=[2, 2])),
    ("AveragePool", [(2, 3, 9, 10)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 2, 2],
                                          ceil_mode=1, count_include_pad=1)),
    ("AveragePool", [(2, 3, 9, 10)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 2, 2],
                                          ceil_mode=1)),
    ("AveragePool", [(2, 3, 9)], dict(kernel_shape=[4], strides=[3], pads=[1, 2],
                                      count_include_pad=1)),
    ("AveragePool", [(1, 3, 9, 10)], dict(kernel_shape=[3, 2], auto_pad="SAME_LOWER",
                                          strides=[2, 2])),
    ("LpPool", [(1, 3, 9, 10)], dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 1],
                                     p=3)),
    ("GlobalAveragePool", [(2, 3, 5, 6)], {}),
    ("GlobalMaxPool", [(2, 3, 5, 6, 2)], {}),
    ("GlobalLpPool", [(2, 3, 5, 6)], dict(p=2)),
    ("LRN", [(2, 7, 4, 5)], dict(size=3, alpha=0.01, beta=0.75, bias=2.0)),
    ("LRN", [(1, 9, 2, 3)], dict(size=5)),
]


def _onnx_run(op_type, arrays, attrs, outputs):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, a.shape)
              for i, a in enumerate(arrays)]
    results = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if outputs == 2:
        results.append(helper.make_tensor_value_info("i", TensorProto.INT64, None))
    node = helper.make_node(op_type, [v.name for v in inputs], [v.name for v in results],
                            **attrs)
    model = helper.make_model(helper.make_graph([node], "g", inputs, results),
                              opset_imports=[helper.make_opsetid("", 19)])
    feeds = {f"x{i}": a for i, a in enumerate(arrays)}
    try:
        import onnxruntime
    except ImportError:
        from onnx.reference import ReferenceEvaluator
        return ReferenceEvaluator(model).run(None, feeds)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("op_type,shapes,attrs", ONNX_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(ONNX_CASES)])
def test_reference_matches_onnx(op_type, shapes, attrs):
    rng = np.random.default_rng()
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    outputs = 2 if op_type == "MaxPool" else 1
    ours = _run(op_type, arrays, attrs, outputs)
    theirs = _onnx_run(op_type, arrays, attrs, outputs)
    for got, want in zip(ours, theirs):
        assert got.shape == want.shape
        if want.dtype == np.int64:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
