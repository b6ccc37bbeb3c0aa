"""Tensors with a dimension of 0: every op computes them as ONNX Runtime does.

Each ONNX case is one node (or a short chain) over inputs of which at least one is empty,
compiled to native code by ``myelin.onnx`` and compared with ONNX Runtime: output shapes (0
dimensions included) and values. Builder cases check the same on flows against the float64
reference, with every tensor poisoned before ``compute()``.
"""

import numpy as np
import pytest
import onnx
from onnx import TensorProto, helper, numpy_helper

import myelin
import myelin.onnx
from myelin.errors import MyelinError
from jitcheck import PRESETS, poison, relative_error

ort = pytest.importorskip("onnxruntime")

F32 = np.float32
RNG = np.random.default_rng(7)


def _x(*shape, dtype=F32):
    """Fresh random values of ``shape`` (uniform in [-3, 3))."""
    values = RNG.uniform(-3, 3, shape)
    return values.astype(dtype) if np.dtype(dtype).kind == "f" else \
        np.round(values).astype(dtype)


def _i64(*values):
    return np.array(values, np.int64)


class Case:
    """One ONNX model: ``nodes`` (node type, inputs, outputs, attributes), graph inputs
    ``inputs`` (name -> array, given at run time), constant ``consts`` (name -> array,
    initializers) and the ``outputs`` to compare."""

    def __init__(self, name, nodes, inputs, outputs=("y",), consts=None, opset=18):
        self.name, self.nodes, self.inputs = name, nodes, inputs
        self.outputs, self.consts, self.opset = list(outputs), consts or {}, opset

    def model(self):
        def info(name, array):
            kind = helper.np_dtype_to_tensor_dtype(array.dtype)
            return helper.make_tensor_value_info(name, kind, list(array.shape))
        nodes = [helper.make_node(op, ins, outs, **attrs) for op, ins, outs, attrs in self.nodes]
        graph = helper.make_graph(
            nodes, self.name, [info(k, v) for k, v in self.inputs.items()],
            [helper.make_empty_tensor_value_info(name) for name in self.outputs],
            [numpy_helper.from_array(np.asarray(v), k) for k, v in self.consts.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        # The outputs' types, as ONNX infers them (ONNX Runtime needs them declared).
        inferred = {value.name: value for value in
                    onnx.shape_inference.infer_shapes(model).graph.value_info}
        for output in model.graph.output:
            if output.name in inferred:
                output.type.CopyFrom(inferred[output.name].type)
        return model


def _node(op, inputs, outputs=("y",), **attrs):
    return (op, list(inputs), list(outputs), attrs)


def _one(name, op, inputs, consts=None, outputs=("y",), opset=18, **attrs):
    """A case of one node reading its graph inputs, then its constants, in that order."""
    consts = consts or {}
    return Case(name, [_node(op, list(inputs) + list(consts), outputs, **attrs)], inputs,
                outputs, consts, opset)


def _reductions():
    cases = []
    for op in ["ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceL1",
               "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]:
        for shape, axes in [((3, 0), [1]), ((0, 4), [0]), ((2, 0, 3), [1]), ((0, 4), [])]:
            for keepdims in (0, 1):
                consts = {"axes": _i64(*axes)} if axes else {}
                cases.append(_one(f"{op}-{shape}-{axes}-k{keepdims}", op, {"x": _x(*shape)},
                                  consts, keepdims=keepdims))
        # Over an axis that is not empty, of an empty tensor: an empty result.
        cases.append(_one(f"{op}-nonempty-axis", op, {"x": _x(0, 4)}, {"axes": _i64(1)},
                          keepdims=0))
    for dtype in (np.int32, np.int64):
        for op in ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd"]:
            cases.append(_one(f"{op}-{dtype.__name__}", op, {"x": _x(3, 0, dtype=dtype)},
                              {"axes": _i64(1)}, keepdims=0))
    cases.append(_one("ArgMax-nonempty-axis", "ArgMax", {"x": _x(0, 4)}, axis=1))
    return cases


def _elementwise():
    return [
        _one("Relu", "Relu", {"x": _x(0, 4)}),
        _one("Exp-3d", "Exp", {"x": _x(2, 0, 3)}),
        _one("Add-broadcast-row", "Add", {"a": _x(0, 4), "b": _x(4)}),
        _one("Add-broadcast-1", "Add", {"a": _x(0, 1), "b": _x(1, 5)}),
        _one("Mul-empty-column", "Mul", {"a": _x(3, 1), "b": _x(3, 0)}),
        _one("Sub-scalar", "Sub", {"a": _x(0), "b": _x()}),
        _one("Max-variadic", "Max", {"a": _x(0, 3), "b": _x(3), "c": _x(1, 3)}),
        _one("Where", "Where", {"c": np.zeros((0, 2), bool), "a": _x(0, 2), "b": _x(1)}),
        _one("Cast", "Cast", {"x": _x(0, 3)}, to=TensorProto.INT32),
        _one("Greater", "Greater", {"a": _x(0, 3), "b": _x(3)}),
        _one("Clip", "Clip", {"x": _x(0, 3)}, {"lo": F32(-1), "hi": F32(1)}),
        _one("Softmax-empty-batch", "Softmax", {"x": _x(0, 5)}, axis=-1),
        _one("Softmax-empty-axis", "Softmax", {"x": _x(3, 0)}, axis=-1),
        _one("LogSoftmax-empty-batch", "LogSoftmax", {"x": _x(0, 5)}, axis=-1),
        _one("LayerNorm", "LayerNormalization", {"x": _x(0, 4)},
             {"scale": _x(4), "bias": _x(4)}, axis=-1),
        _one("BatchNorm", "BatchNormalization", {"x": _x(0, 3, 4, 4)},
             {"s": _x(3), "b": _x(3), "m": _x(3), "v": np.abs(_x(3)) + 1}),
        _one("CumSum", "CumSum", {"x": _x(0, 4)}, {"axis": np.int64(1)}),
        _one("CumSum-empty-axis", "CumSum", {"x": _x(3, 0)}, {"axis": np.int64(1)}),
        # Chains: an empty Slice feeding a reduction, and element-wise ops fused with it.
        Case("Slice-ReduceMax", [_node("Slice", ["x", "s", "e", "a"], ["t"]),
                                 _node("ReduceMax", ["t"], keepdims=0)],
             {"x": _x(5, 4)}, consts={"s": _i64(2), "e": _i64(2), "a": _i64(0)}),
        Case("Exp-ReduceSum-Log", [_node("Exp", ["x"], ["t"]),
                                   _node("ReduceSum", ["t", "axes"], ["u"], keepdims=0),
                                   _node("Log", ["u"])],
             {"x": _x(3, 0)}, consts={"axes": _i64(1)}),
    ]


def _linear():
    return [
        _one("MatMul-k0", "MatMul", {"a": _x(3, 0), "b": _x(0, 4)}),
        _one("MatMul-m0", "MatMul", {"a": _x(0, 5), "b": _x(5, 4)}),
        _one("MatMul-n0", "MatMul", {"a": _x(3, 5), "b": _x(5, 0)}),
        _one("MatMul-k0-const", "MatMul", {"a": _x(3, 0)}, {"b": _x(0, 4)}),
        _one("MatMul-batched-k0", "MatMul", {"a": _x(2, 3, 0), "b": _x(2, 0, 4)}),
        _one("MatMul-batch0", "MatMul", {"a": _x(0, 3, 5), "b": _x(5, 4)}),
        _one("Gemm-k0-bias", "Gemm", {"a": _x(3, 0), "b": _x(0, 4)}, {"c": _x(4)},
             alpha=2.0, beta=0.5),
        Case("MatMul-k0-Add-Relu", [_node("MatMul", ["a", "b"], ["t"]),
                                    _node("Add", ["t", "c"], ["u"]), _node("Relu", ["u"])],
             {"a": _x(3, 0), "b": _x(0, 4), "c": _x(4)}),
        _one("Einsum-k0", "Einsum", {"a": _x(3, 0), "b": _x(0, 4)}, equation="ij,jk->ik"),
        _one("Conv-batch0", "Conv", {"x": _x(0, 3, 6, 6)}, {"w": _x(4, 3, 3, 3)}),
        _one("Conv-batch0-bias", "Conv", {"x": _x(0, 3, 6, 6)}, {"w": _x(4, 3, 3, 3),
                                                                  "b": _x(4)}),
        _one("MaxPool-batch0", "MaxPool", {"x": _x(0, 2, 5, 5)}, kernel_shape=[2, 2]),
        _one("AveragePool-batch0", "AveragePool", {"x": _x(0, 2, 5, 5)}, kernel_shape=[3, 3]),
        _one("GlobalAveragePool-batch0", "GlobalAveragePool", {"x": _x(0, 2, 5, 5)}),
        _one("ConvTranspose-batch0", "ConvTranspose", {"x": _x(0, 3, 4, 4)},
             {"w": _x(3, 2, 3, 3)}),
    ]


def _movement():
    return [
        _one("Concat-empty-pieces", "Concat", {"a": _x(0, 4), "b": _x(0, 4)}, axis=1),
        _one("Concat-empty-and-full", "Concat", {"a": _x(0, 4), "b": _x(2, 4)}, axis=0),
        _one("Concat-empty-columns", "Concat", {"a": _x(2, 0), "b": _x(2, 3), "c": _x(2, 0)},
             axis=1),
        _one("Split-empty", "Split", {"x": _x(0, 4)}, outputs=("y", "z"), axis=1,
             num_outputs=2),
        _one("Split-empty-part", "Split", {"x": _x(4, 3)}, {"split": _i64(2, 0, 2)},
             outputs=("y", "z", "w"), axis=0),
        _one("Slice-empty", "Slice", {"x": _x(5, 4)}, {"s": _i64(3), "e": _i64(1),
                                                       "a": _i64(0)}),
        _one("Slice-of-empty", "Slice", {"x": _x(0, 4)}, {"s": _i64(1), "e": _i64(3),
                                                          "a": _i64(1)}),
        _one("Gather-empty-indices", "Gather", {"x": _x(5, 4)}, {"i": np.zeros(0, np.int64)}),
        _one("Gather-empty-index-rows", "Gather", {"x": _x(5, 4)},
             {"i": np.zeros((2, 0), np.int64)}, axis=0),
        _one("Gather-from-empty", "Gather", {"x": _x(0, 4)}, {"i": _i64(1, 2)}, axis=1),
        _one("GatherElements-empty", "GatherElements", {"x": _x(3, 4)},
             {"i": np.zeros((3, 0), np.int64)}, axis=1),
        _one("Pad-empty-input", "Pad", {"x": _x(0, 4)}, {"p": _i64(1, 0, 2, 0),
                                                         "v": F32(2.5)}),
        _one("Pad-empty-columns", "Pad", {"x": _x(3, 0)}, {"p": _i64(0, 1, 0, 2)}),
        _one("Tile-empty", "Tile", {"x": _x(0, 4)}, {"r": _i64(3, 2)}),
        _one("Tile-zero-repeats", "Tile", {"x": _x(2, 4)}, {"r": _i64(0, 2)}),
        _one("Transpose", "Transpose", {"x": _x(0, 4, 3)}, perm=[1, 2, 0]),
        _one("Reshape", "Reshape", {"x": _x(0, 4)}, {"s": _i64(0, 2, 2)}),
        _one("Reshape-allowzero", "Reshape", {"x": _x(0, 4)}, {"s": _i64(4, 0)}, allowzero=1),
        _one("Flatten", "Flatten", {"x": _x(2, 0, 3)}, axis=1),
        _one("Squeeze", "Squeeze", {"x": _x(0, 1, 4)}, {"a": _i64(1)}),
        _one("Unsqueeze", "Unsqueeze", {"x": _x(0, 4)}, {"a": _i64(0)}),
        _one("Expand-to-empty", "Expand", {"x": _x(1, 4)}, {"s": _i64(0, 4)}),
        _one("Expand-empty", "Expand", {"x": _x(0, 1)}, {"s": _i64(0, 4)}),
        _one("TopK-k0", "TopK", {"x": _x(3, 5)}, {"k": _i64(0)}, outputs=("y", "i")),
        _one("TopK-empty-rows", "TopK", {"x": _x(0, 5)}, {"k": _i64(2)}, outputs=("y", "i")),
        _one("Shape", "Shape", {"x": _x(0, 4)}),
        _one("Size", "Size", {"x": _x(0, 4)}),
        _one("Trilu", "Trilu", {"x": _x(0, 3, 3)}),
        _one("DepthToSpace", "DepthToSpace", {"x": _x(0, 4, 2, 2)}, blocksize=2),
        _one("Resize-batch0", "Resize", {"x": _x(0, 2, 3, 3)},
             {"roi": np.zeros(0, F32), "scales": np.array([1, 1, 2, 2], F32)}),
        _one("OneHot-empty", "OneHot", {"i": np.zeros((0,), np.int64)},
             {"d": _i64(5), "v": np.array([0, 1], F32)}),
        _one("ScatterND-empty-updates", "ScatterND", {"x": _x(4, 3)},
             {"i": np.zeros((0, 1), np.int64), "u": _x(0, 3)}),
    ]


ONNX_CASES = _reductions() + _elementwise() + _linear() + _movement()


def _ort(case):
    session = ort.InferenceSession(case.model().SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(case.outputs, case.inputs)


def _assert_same(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, ONNX Runtime {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, ONNX Runtime {want.dtype}"
    if want.dtype.kind == "f":
        assert relative_error(got, want) <= 1e-5, f"{what}: {got} != {want}"
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("case", ONNX_CASES, ids=lambda case: case.name)
def test_onnx_case_matches_onnxruntime(case):
    expected = _ort(case)
    got = myelin.onnx.load(case.model()).run(case.inputs)
    for name, g, w in zip(case.outputs, got, expected):
        _assert_same(g, w, f"{case.name} output {name}")


def test_argmax_over_an_empty_axis_is_an_error():
    case = _one("ArgMax-empty-axis", "ArgMax", {"x": _x(3, 0)}, axis=1)
    with pytest.raises(Exception):
        _ort(case)
    with pytest.raises(MyelinError, match="empty"):
        myelin.onnx.load(case.model()).run(case.inputs)


# Builder flows, compiled, against the float64 reference.
def _builder_cases():
    """(name, build(f) -> {input variable: array}) for flows whose outputs are compared."""
    def reductions(dtype):
        def build(f):
            x = f.var("x", dtype, [3, 0, 2])
            for op in ["Sum", "Product", "Max", "Min"] + (["Mean"] if dtype != "int32" else []):
                f.reduce(op, x, axis=1)
                f.reduce(op, x, axis=[0, 1], keepdims=True)
                f.reduce(op, x)
            return {x: _x(3, 0, 2, dtype=dtype)}
        return build

    def bools(f):
        p = f.var("p", "bool", [2, 0])
        f.reduce("All", p, axis=1)
        f.reduce("Any", p, axis=1)
        f.count(p, axis=1)
        return {p: np.zeros((2, 0), bool)}

    def elementwise(f):
        x, b = f.var("x", "float32", [0, 4]), f.var("b", "float32", [4])
        f.relu(f.add(x, b), name="y")
        f.concat([x, x], axis=1, name="joined")
        return {x: _x(0, 4), b: _x(4)}

    def fused_row_reduction(f):
        x = f.var("x", "float32", [5, 0])
        e = f.exp(x)
        f.sum(e, 1, name="total")
        f.max(f.mul(e, 2.0), 1, name="peak")
        return {x: _x(5, 0)}

    def empty_slice(f):
        x = f.var("x", "float32", [5, 4])
        part = f.slice(x, [2, 0], [0, 4])
        f.max(part, name="peak")
        f.mean(part, 0, name="mean")
        return {x: _x(5, 4)}

    def products(f):
        a, b = f.var("a", "float32", [3, 0]), f.var("b", "float32", [0, 17])
        bias = f.var("bias", "float32", [17])
        f.matmul(a, b, name="plain")
        f.relu(f.add(f.matmul(a, b), bias), name="fused")
        w = f.array("w", np.zeros((0, 9), np.float32))
        f.matmul(a, w, name="constant")
        c, d = f.var("c", "float64", [2, 33, 0]), f.var("d", "float64", [2, 0, 5])
        f.matmul(c, d, name="batched")
        return {a: _x(3, 0), b: _x(0, 17), bias: _x(17), c: _x(2, 33, 0, dtype=np.float64),
                d: _x(2, 0, 5, dtype=np.float64)}

    def normalizations(f):
        x = f.var("x", "float32", [0, 6])
        f.softmax(x, name="softmax")
        f.log_softmax(x, name="log_softmax")
        f.layer_norm(x, name="layer_norm")
        f.argmax(x, axis=1, name="argmax")
        return {x: _x(0, 6)}

    def folded(f):
        c = f.array("c", np.zeros((0, 3), np.float32))    # folded at compile time (-O2 on)
        v = f.var("v", "float32", [3])
        f.add(f.max(f.relu(c), 0), v, name="peak")
        f.mul(f.sum(f.exp(c)), v, name="total")
        return {v: _x(3)}

    def movement(f):
        x = f.var("x", "float32", [4, 3])
        i = f.var("i", "int32", [0])
        f.gather(x, i, name="rows")
        f.transpose(f.slice(x, [1, 0], [0, 3]), name="t")
        f.reshape(f.slice(x, [0, 3], [4, 0]), [2, 0, 2], name="r")
        first, second = f.split(x, 2, axis=0)
        f.concat([f.slice(x, [0, 0], [0, 3]), second], axis=0, name="c")
        return {x: _x(4, 3), i: np.zeros(0, np.int32)}

    return [("reductions-float32", reductions("float32")),
            ("reductions-float64", reductions("float64")),
            ("reductions-int32", reductions("int32")), ("bool-reductions", bools),
            ("elementwise", elementwise), ("fused-row-reduction", fused_row_reduction),
            ("empty-slice", empty_slice), ("products", products),
            ("normalizations", normalizations), ("folded", folded), ("movement", movement)]


def _compile_and_check(name, build, features, opt_level):
    flow = myelin.Flow()
    inputs = build(myelin.Builder(flow, "f"))
    net = myelin.Compiler(features=features, opt_level=opt_level, reuse_memory=False,
                          threads=1).compile(flow)
    data = net.cell("f").instance()
    poison(data)
    for var, value in inputs.items():
        data[var] = value
    data.compute()
    for var, value in inputs.items():       # (nothing wrote over an input)
        np.testing.assert_array_equal(np.asarray(data[var]), value, err_msg=f"{name}: {var}")
    expected = myelin.reference.run(flow, "f", inputs)
    assert expected
    for output, want in expected.items():
        got = np.asarray(data.array(output))
        assert got.shape == np.shape(want), f"{name}: {output} has shape {got.shape}"
        if got.dtype.kind == "f":
            assert relative_error(got, want) <= 1e-6, f"{name}: {output} {got} != {want}"
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{name}: {output}")


@pytest.mark.parametrize("opt_level", [0, 3])
@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("name, build", _builder_cases(), ids=[n for n, _ in _builder_cases()])
def test_builder_flow_matches_reference(name, build, features, opt_level):
    _compile_and_check(name, build, features, opt_level)


def test_empty_input_keeps_its_shape():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [0, 4])
    y = f.concat([x, x], axis=1, name="y")
    data = myelin.Compiler().compile(flow).cell("f").instance()
    assert np.asarray(data[x]).shape == (0, 4)
    data[x] = np.zeros((0, 4), np.float32)
    data.compute()
    assert np.asarray(data[y]).shape == (0, 8)
    with pytest.raises(myelin.errors.InputError):
        data[x] = np.zeros((1, 4), np.float32)


def test_dynamic_batch_of_zero():
    """A model with a dynamic batch runs with batch 0 (a signature of its own) and after it."""
    w = numpy_helper.from_array(_x(4, 3), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("ReduceSum", ["r"], ["y"], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    ours = myelin.onnx.load(model)
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (0, 3, 0):
        x = _x(batch, 4)
        _assert_same(ours.run({"x": x})[0], theirs.run(None, {"x": x})[0], f"batch {batch}")
