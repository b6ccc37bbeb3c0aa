"""NaN and infinities through every op that compares: compiled code against the float64
reference, and imported ONNX models against ONNX Runtime.

NaN propagates (as NumPy): Relu, Maximum/Minimum, Max/Min reductions, MaxPool and softmax give
NaN where an input is NaN; comparisons are false on NaN except NotEqual; ArgMax/ArgMin and
MaxPool's Indices give the first NaN (the last with ``select_last_index``); TopK ranks NaN
above every number. Values are placed in every lane of a vector and in the scalar tail (sizes
that are not multiples of the vector width), under each CPU feature preset.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper

import myelin
import myelin.onnx
from jitcheck import PRESETS, poison, relative_error

ort = pytest.importorskip("onnxruntime")

SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, np.nan, 1.0, -1.0])
LENGTHS = [1, 7, 13, 17, 33]


def special_array(rng, dtype, shape):
    """Random values in [-3, 3] with NaN, +-inf and zeros in about a third of the places,
    always in the first and the last one."""
    values = rng.uniform(-3, 3, shape)
    flat = values.reshape(-1)
    chosen = rng.random(flat.size) < 0.35
    chosen[[0, -1]] = True
    flat[chosen] = rng.choice(SPECIALS, int(chosen.sum()))
    return values.astype(dtype)


def _exact_flow(dtype):
    """Functions whose outputs are exact: compares, selections, extrema and indices."""
    flow = myelin.Flow()
    count = iter(range(1000))

    def function(*shapes):
        f = myelin.Builder(flow, f"f{next(count)}")
        return f, [f.var(f"x{i}", dtype, shape) for i, shape in enumerate(shapes)]

    for n in LENGTHS:
        f, (x, y) = function([n], [n])
        f.relu(x)
        f.abs(x)
        f.sign(x)
        f.op("IsNaN", [x])
        f.maximum(x, y)
        f.minimum(x, y)
        f.minimum(f.maximum(x, -1.0), 1.0)                       # Clip
        f.cond(f.less(x, 0.0), f.mul(x, 0.1), x)                 # LeakyRelu
        for compare in ("equal", "not_equal", "less", "less_equal", "greater",
                        "greater_equal"):
            getattr(f, compare)(x, y)
        f.maximum(x, f.const(np.nan, dtype))
        f.greater(x, f.const(np.nan, dtype))
    for shape in [(3, 17), (5, 8), (2, 33), (4, 3, 5)]:
        f, (x,) = function(shape)
        for reduce in ("max", "min"):
            getattr(f, reduce)(x)
            getattr(f, reduce)(x, 0)
            getattr(f, reduce)(x, -1, keepdims=True)
            getattr(f, reduce)(f.relu(x), -1)                    # a fused trailing reduction
        for last in (False, True):
            f.argmax(x, axis=len(shape) - 1)
            f.op("ArgMax", [x], attrs={"axis": 0, "select_last_index": last})
            f.op("ArgMin", [x], attrs={"axis": len(shape) - 1, "select_last_index": last})
        f.argmin(x)
        for largest in (True, False):
            f.op("TopK", [x], attrs={"k": 3, "largest": largest})
    for shape, attrs in [((1, 2, 6, 21), dict(kernel_shape=[2, 3])),            # vectors
                         ((1, 2, 7, 37), dict(kernel_shape=[3, 3], strides=[2, 2])),
                         ((2, 1, 5, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
                         ((1, 3, 19), dict(kernel_shape=[4], strides=[3]))]:
        f, (x,) = function(shape)
        f.op("MaxPool", [x], attrs=attrs)
        f.op("MaxPool", [x], attrs=dict(attrs, indices=True))
        f.op("GlobalMaxPool", [x])
        f.relu(f.op("MaxPool", [x], attrs=attrs))
    return flow


def _rounded_flow(dtype):
    """Functions with arithmetic around the compares: fused products, softmax, pools."""
    flow = myelin.Flow()
    rng = np.random.default_rng(3)
    for n, (m, k) in enumerate([(4, 17), (3, 33), (5, 8)]):
        f = myelin.Builder(flow, f"g{n}")
        x = f.var("x", dtype, [m, k])
        w = f.array("w", rng.uniform(-1, 1, (k, 19)).astype(dtype))
        b = f.array("b", rng.uniform(-1, 1, 19).astype(dtype))
        f.relu(f.add(f.matmul(x, w), b))                         # FusedMatMul's epilogue
        f.softmax(x)
        f.max(f.mul(f.exp(x), 2.0), 1)
        image = f.var("image", dtype, [1, 3, 6, 9])
        kernel = f.array("kernel", rng.uniform(-1, 1, (4, 3, 3, 3)).astype(dtype))
        f.relu(f.op("Conv", [image, kernel], attrs={"pads": [1, 1, 1, 1]}))  # FusedConv
        f.op("AveragePool", [image], attrs={"kernel_shape": [2, 2]})
    return flow


def _check(flow, features, opt_level, exact, rng):
    net = myelin.Compiler(features=features, opt_level=opt_level).compile(flow)
    for name, func in flow.funcs.items():
        data = net.cell(name).instance()
        poison(data)
        inputs = {var: special_array(rng, var.dtype, var.shape) for var in func.inputs()}
        for var, value in inputs.items():
            data[var] = value
        data.compute()
        for output, want in myelin.reference.run(flow, name, inputs).items():
            got = np.asarray(data.array(output))
            what = f"{output} [{features}, -O{opt_level}]\n got {got}\nwant {want}"
            if exact or got.dtype.kind != "f":
                np.testing.assert_array_equal(got, np.asarray(want).astype(got.dtype), what)
            else:
                assert relative_error(got, want) <= 1e-5, what


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compares_propagate_nan(dtype, features):
    rng = np.random.default_rng()
    _check(_exact_flow(dtype), features, 3, True, rng)


@pytest.mark.parametrize("opt_level", [0, 3])
def test_unfused_and_rounded_ops(opt_level):
    rng = np.random.default_rng()
    if opt_level == 0:
        _check(_exact_flow("float32"), "host", opt_level, True, rng)
    _check(_rounded_flow("float32"), "host", opt_level, False, rng)


def test_relu_of_nan_is_nan():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [5])
    y = f.relu(x, name="y")
    u = f.var("u", "uint8", [3])
    v = f.relu(u, name="v")
    data = myelin.Compiler().compile(flow).cell("f").instance()
    data[x] = np.array([np.nan, -np.inf, np.inf, -1, 2], np.float32)
    data[u] = np.array([0, 128, 255], np.uint8)
    data.compute()
    np.testing.assert_array_equal(np.asarray(data[y]), [np.nan, 0, np.inf, 0, 2])
    np.testing.assert_array_equal(np.asarray(data[v]), [0, 128, 255])


# ONNX models against ONNX Runtime, for the ops where ONNX Runtime treats NaN consistently.
def _model(op, inputs, outputs=("y",), opset=18, **attrs):
    def info(name, array):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype),
                                             list(array.shape))
    kinds = {"y": TensorProto.FLOAT, "i": TensorProto.INT64, "b": TensorProto.BOOL}
    graph = helper.make_graph([helper.make_node(op, list(inputs), list(outputs), **attrs)], op,
                              [info(k, v) for k, v in inputs.items()],
                              [helper.make_tensor_value_info(o, kinds[o], None) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _onnx_cases(rng):
    x, y = special_array(rng, np.float32, [3, 13]), special_array(rng, np.float32, [3, 13])
    cases = [(op, {"x": x}, ("y",), {}) for op in
             ["Relu", "Abs", "Sign", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish",
              "ThresholdedRelu", "Shrink", "Softplus"]]
    cases += [("LeakyRelu", {"x": x}, ("y",), {"alpha": 0.1}),
              ("PRelu", {"x": x, "s": np.full((13,), 0.2, np.float32)}, ("y",), {}),
              ("Clip", {"x": x, "lo": np.array(-1, np.float32), "hi": np.array(1, np.float32)},
               ("y",), {}),
              ("Max", {"x": x, "z": y}, ("y",), {}), ("Min", {"x": x, "z": y}, ("y",), {}),
              ("Where", {"c": x > 0, "x": x, "z": y}, ("y",), {}),
              ("Softmax", {"x": x}, ("y",), {"axis": 1}),
              ("TopK", {"x": x, "k": np.array([4], np.int64)}, ("y", "i"), {"axis": 1}),
              ("TopK", {"x": x, "k": np.array([4], np.int64)}, ("y", "i"),
               {"axis": 1, "largest": 0})]
    cases += [(op, {"x": x, "z": y}, ("b",), {}) for op in
              ["Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual"]]
    cases += [("IsNaN", {"x": x}, ("b",), {}), ("IsInf", {"x": x}, ("b",), {})]
    return cases


@pytest.mark.parametrize("index", range(len(_onnx_cases(np.random.default_rng(0)))))
def test_onnx_nan_matches_onnxruntime(index):
    op, inputs, outputs, attrs = _onnx_cases(np.random.default_rng())[index]
    model = _model(op, inputs, outputs, **attrs)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, inputs)
    got = myelin.onnx.load(model).run(inputs)
    for name, g, w in zip(outputs, got, want):
        if g.dtype.kind == "f" and op in ("Softmax", "Elu", "Selu", "Celu", "Softplus",
                                          "HardSwish"):
            assert relative_error(g, w) <= 1e-6, f"{op} {name}: {g} != {w}"
        else:
            np.testing.assert_array_equal(g, w, f"{op} {name}")


def test_where_onnxruntime_differs_numpy_is_followed():
    """ONNX Runtime's ReduceMax and MaxPool keep a NaN in some positions and drop it in others
    (and its MaxPool gives -FLT_MAX for a window of -inf); myelin propagates NaN as NumPy,
    PyTorch and the ONNX reference do, and ArgMax gives the first NaN as NumPy's argmax."""
    x = np.array([[1, 2, np.nan, 3], [np.nan, 1, 2, 3], [-np.inf] * 4], np.float32)
    (peak,) = myelin.onnx.load(_model("ReduceMax", {"x": x}, keepdims=0)).run({"x": x})
    np.testing.assert_array_equal(peak, np.max(x))
    (rows,) = myelin.onnx.load(_model("ReduceMax", {"x": x, "a": np.array([1], np.int64)},
                                      keepdims=0)).run({"x": x, "a": np.array([1], np.int64)})
    np.testing.assert_array_equal(rows, [np.nan, np.nan, -np.inf])
    image = x.reshape(1, 1, 3, 4)
    (pooled,) = myelin.onnx.load(_model("MaxPool", {"x": image}, kernel_shape=[1, 2],
                                        strides=[1, 2])).run({"x": image})
    np.testing.assert_array_equal(pooled.reshape(3, 2), [[2, np.nan], [np.nan, 3],
                                                         [-np.inf, -np.inf]])
    (index,) = myelin.onnx.load(_model("ArgMax", {"x": x}, ("i",), axis=1)).run({"x": x})
    np.testing.assert_array_equal(index.reshape(-1), np.argmax(x, axis=1))
