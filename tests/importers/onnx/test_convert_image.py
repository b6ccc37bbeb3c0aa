"""CenterCropPad, Col2Im, MaxUnpool, ReverseSequence, CumProd, Swish, SwiGLU and the window
functions (converters of image.py, scan.py, activations.py and windows.py) against ONNX Runtime
where it has the op, else onnx.reference."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import myelin.onnx


def _model(node, inputs, opset, initializers=(), out_type=TensorProto.FLOAT):
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [helper.make_tensor_value_info(node.output[0], out_type, None)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, use_ort=True, rtol=1e-5, atol=1e-6):
    if use_ort:
        session = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)[0]
    else:
        want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = myelin.onnx.load(model).run(feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("shape,target,axes", [((10, 7, 3), (6, 9, 3), None),
                                               ((5, 8), (8, 3), None),
                                               ((3, 20, 9), (10, 12), [1, 2]),
                                               ((20, 9, 3), (11, 10), [-3, -2]),
                                               ((4, 4), (4, 4), None)])
def test_center_crop_pad(shape, target, axes):
    feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    attrs = {} if axes is None else {"axes": axes}
    node = helper.make_node("CenterCropPad", ["x", "shape"], ["y"], **attrs)
    _check(_model(node, feeds, 18, [("shape", np.array(target, np.int64))]), feeds)


@pytest.mark.parametrize("image,block,attrs", [
    ((5, 5), (1, 5), {}),
    ((6, 7), (2, 3), {"strides": [2, 1]}),
    ((6, 7), (2, 2), {"pads": [1, 0, 2, 1]}),
    ((9, 8), (2, 3), {"dilations": [2, 2], "strides": [1, 2], "pads": [1, 1, 0, 1]}),
    ((3, 4, 5), (1, 2, 2), {"strides": [1, 1, 2]}),
])
def test_col2im(image, block, attrs):
    rank = len(image)
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    pads = attrs.get("pads", [0] * 2 * rank)
    counts = [(image[a] + pads[a] + pads[a + rank] - dilations[a] * (block[a] - 1) - 1)
              // strides[a] + 1 for a in range(rank)]
    shape = (2, 3 * int(np.prod(block)), int(np.prod(counts)))
    feeds = {"x": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)
    model = _model(node, feeds, 18, [("image", np.array(image, np.int64)),
                                     ("block", np.array(block, np.int64))])
    _check(model, feeds, use_ort=rank == 2)


@pytest.mark.parametrize("output_shape", [None, (2, 3, 7, 9)])
def test_max_unpool(output_shape):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 6, 8)).astype(np.float32)
    pooled = x.reshape(2, 3, 3, 2, 4, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 3, 3, 4, 4)
    arg = pooled.argmax(-1)
    rows = np.arange(3).reshape(3, 1) * 2 + arg // 2
    cols = np.arange(4).reshape(1, 4) * 2 + arg % 2
    plane = np.arange(6).reshape(2, 3, 1, 1) * 48
    feeds = {"x": pooled.max(-1), "i": (plane + rows * 8 + cols).astype(np.int64)}
    inputs, inits = ["x", "i"], []
    if output_shape is not None:
        inputs.append("shape")
        inits.append(("shape", np.array(output_shape, np.int64)))
    node = helper.make_node("MaxUnpool", inputs, ["y"], kernel_shape=[2, 2], strides=[2, 2])
    _check(_model(node, feeds, 22, inits), feeds, use_ort=output_shape is None)


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    shape = [0, 0, 3]
    shape[batch_axis], shape[time_axis] = 4, 5
    feeds = {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float32)}
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis,
                            time_axis=time_axis)
    _check(_model(node, feeds, 10, [("lens", np.array([5, 0, 1, 3], np.int64))]), feeds)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_cumprod(exclusive, reverse, dtype):
    rng = np.random.default_rng(4)
    feeds = {"x": rng.uniform(-2, 2, (3, 4, 5)).astype(dtype)}
    for axis in (0, -1):
        node = helper.make_node("CumProd", ["x", "axis"], ["y"], exclusive=exclusive,
                                reverse=reverse)
        model = _model(node, feeds, 26, [("axis", np.array(axis, np.int64))],
                       helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
        _check(model, feeds, use_ort=False)


def test_swish_and_swiglu():
    rng = np.random.default_rng(5)
    feeds = {"a": rng.standard_normal((3, 7)).astype(np.float32)}
    for alpha in (1.0, 0.6):
        _check(_model(helper.make_node("Swish", ["a"], ["y"], alpha=alpha), feeds, 24), feeds,
               use_ort=False)
        both = dict(feeds, b=rng.standard_normal((3, 7)).astype(np.float32))
        _check(_model(helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=alpha), both, 28),
               both, use_ort=False)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_windows(op):
    for size, periodic, dtype in [(10, 1, 1), (7, 0, 11), (1, 1, 1), (6, 0, 7)]:
        node = helper.make_node(op, ["size"], ["y"], periodic=periodic, output_datatype=dtype)
        model = _model(node, {}, 17, [("size", np.array(size, np.int64))], dtype)
        _check(model, {}, use_ort=True, rtol=1e-5, atol=1e-6)
