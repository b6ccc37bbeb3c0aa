"""What the importer checks before and while converting: each node against its op's ONNX
schema (input and output counts, attribute names and types, required inputs), the opset,
the model's strings and tensors, subgraph nesting, and the values converters read (axes,
vectors, scalars, broadcasts). Most cases are classes of model that fuzzing
(scripts/fuzz_onnx.py) found raising foreign exceptions; each must raise its documented
error. Deep graphs import and compile without running out of Python's stack, and the forms
of opsets before 7 that myelin imports compute as their opset says."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import myelin.onnx
from myelin.errors import FlowFormatError, LimitError, ShapeError, UnsupportedOpError
from myelin.importers.onnx import importer

F = TensorProto.FLOAT


def _model(nodes, inputs=(("x", F, [2, 3]),), outputs=("y",), initializers=None, opset=17):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _node(op_type, inputs=("x",), outputs=("y",), **attrs):
    return helper.make_node(op_type, list(inputs), list(outputs), **attrs)


def _bad_utf8():
    data = _model([_node("Relu")]).SerializeToString()
    return data.replace(b"Relu", b"R\xffu\xfe")


def _truncated_tensor():
    model = _model([_node("Add", ["x", "b"])], initializers={"b": np.ones(3, np.float32)})
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:5]
    return model


def _wrong_attribute_type():
    model = _model([_node("Transpose", perm=[1, 0])])
    model.graph.node[0].attribute[0].type = 2     # INT, its ints left as they were
    return model


def _lstm(steps, hidden_size):
    weights = {"W": np.ones((1, 20, 3), np.float32), "R": np.ones((1, 20, 5), np.float32)}
    return _model([_node("LSTM", ["x", "W", "R"], hidden_size=hidden_size)],
                  inputs=[("x", F, [steps, 1, 3])], initializers=weights)


CASES = {
    "too many inputs": (_model([_node("Relu", ["x", "x"])]), ShapeError,
                        r"node y \(Relu\) has 2 inputs, the op takes 1"),
    "too many outputs": (_model([_node("MaxPool", outputs=["y", "i", "z"],
                                       kernel_shape=[1])]), ShapeError, "has 3 outputs"),
    "no outputs": (_model([_node("Relu", outputs=[])]), ShapeError, "a Relu node"),
    "attribute type": (_wrong_attribute_type(), ShapeError,
                       "attribute perm is INT, the op takes INTS"),
    "unknown attribute": (_model([_node("Relu", alpha=1.0)]), ShapeError,
                          "attribute 'alpha', which the op does not have"),
    "required attribute": (_model([_node("Concat", ["x", "x"])]), ShapeError,
                           "lacks attribute axis"),
    "required input left out": (_model([_node("MaxPool", [""], kernel_shape=[1])]),
                                ShapeError, r"leaves out input 0 \(X\)"),
    "opset 0": (_model([_node("Relu")], opset=0), UnsupportedOpError, "opset 0"),
    "opset 29": (_model([_node("Relu")], opset=29), UnsupportedOpError,
                 "opsets 1 to 28"),
    "op of a later opset": (_model([_node("Gelu")]), UnsupportedOpError,
                            r"Gelu \(not an op of opset 17"),
    "strings not UTF-8": (_bad_utf8(), FlowFormatError, "not UTF-8"),
    "tensor data short": (_truncated_tensor(), FlowFormatError, "'b' .* is malformed"),
    "axis out of range": (_model([_node("Gather", ["x", "i"], axis=2)],
                                 initializers={"i": np.int64(0)}), ShapeError,
                          "axis 2 is out of range for rank 2"),
    "scales not a vector": (_model([_node("Resize", ["x", "", "s"])], opset=18,
                                   initializers={"s": np.ones((2, 1), np.float32)}),
                            ShapeError, r"input 2 must be a vector, not of shape \[2, 1\]"),
    "expand mismatch": (_model([_node("Expand", ["x", "s"])],
                               initializers={"s": np.array([4, 4], np.int64)}),
                        ShapeError, r"\[2, 3\] does not broadcast to \[4, 4\]"),
    "k of no elements": (_model([_node("TopK", ["x", "k"], ["y", "i"])], outputs=["y"],
                                initializers={"k": np.zeros(0, np.int64)}), ShapeError,
                         r"input 1 must have one element, not shape \[0\]"),
    "eye of 3-D": (_model([_node("EyeLike")], inputs=[("x", F, [2, 2, 2])]), ShapeError,
                   "must be 2-D"),
    "reduced axis out of range": (_model([_node("ReduceMean", ["x", "a"])], opset=18,
                                         initializers={"a": np.array([5], np.int64)}),
                                  ShapeError, "axis 5 is out of range"),
    "recurrence too long": (_lstm(steps=300, hidden_size=5), LimitError,
                            "300 time steps; myelin unrolls recurrences of at most 256"),
    "hidden size": (_lstm(steps=4, hidden_size=7), ShapeError,
                    r"hidden_size 7 does not fit R of shape \[1, 20, 5\]"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_models_raise_documented_errors(case):
    model, error, message = CASES[case]
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] \
        if hasattr(model, "graph") else [2, 3]
    with pytest.raises(error, match=message):
        myelin.onnx.load(model, cache=False).run({"x": np.ones(shape, np.float32)})


def _nested(depth):
    """y = relu(x) in the then branch of ``depth`` nested Ifs on a condition from x."""
    flat = helper.make_graph([_node("Relu")], "flat", [],
                             [helper.make_tensor_value_info("y", F, [4])])
    inner = flat
    for level in range(depth):
        inner = helper.make_graph([_node("If", ["c"], then_branch=inner, else_branch=flat)],
                                  f"level{level}", [], [helper.make_tensor_value_info("y", F,
                                                                                     [4])])
    return _model([_node("ReduceSum", outputs=["s"], keepdims=0),
                   _node("Greater", ["s", "zero"], ["c"])] + list(inner.node),
                  inputs=[("x", F, [4])], initializers={"zero": np.float32(0)})


def test_subgraphs_nest_up_to_the_limit():
    x = np.array([1, -2, 3, 4], np.float32)
    (y,) = myelin.onnx.load(_nested(importer.MAX_DEPTH), cache=False).run({"x": x})
    assert np.array_equal(y, np.maximum(x, 0))
    with pytest.raises(LimitError, match=f"more than {importer.MAX_DEPTH} deep"):
        myelin.onnx.load(_nested(importer.MAX_DEPTH + 1), cache=False)


def test_a_long_chain_compiles_without_deep_recursion():
    """600 element-wise ops in a row: fusion's recipe nested them all in one expression
    (RecursionError), and forming the group took quadratic time."""
    n = 600
    nodes = [_node("Tanh", [f"v{i}"], [f"v{i + 1}"]) for i in range(n)]
    model = _model(nodes, inputs=[("v0", F, [8])], outputs=[f"v{n}"])
    x = np.linspace(-3, 3, 8, dtype=np.float32)
    (y,) = myelin.onnx.load(model, cache=False).run({"v0": x})
    expected = x.astype(np.float64)
    for _ in range(n):
        expected = np.tanh(expected)
    assert np.allclose(y, expected, rtol=1e-4)


@pytest.mark.parametrize("axis, shape", [(0, [2]), (1, [3]), (1, [3, 4])])
def test_legacy_broadcast_aligns_at_the_axis(axis, shape):
    """Opsets before 7: B broadcasts to A from ``axis`` (NumPy would align the ends)."""
    rng = np.random.default_rng(axis)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    model = _model([_node("Add", ["a", "b"], broadcast=1, axis=axis)],
                   inputs=[("a", F, [2, 3, 4]), ("b", F, shape)], opset=6)
    (y,) = myelin.onnx.load(model, cache=False).run({"a": a, "b": b})
    expected = a + b.reshape(b.shape + (1,) * (3 - axis - b.ndim))
    assert np.allclose(y, expected)


def test_tile_of_opset_1_repeats_along_an_axis():
    model = _model([_node("Tile", ["x", "tiles", "axis"])], opset=5,
                   initializers={"tiles": np.int64(3), "axis": np.int64(1)})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = myelin.onnx.load(model, cache=False).run({"x": x})
    assert np.array_equal(y, np.tile(x, (1, 3)))


def test_training_mode_of_old_opsets_is_refused():
    stats = {k: np.ones(3, np.float32) for k in ("s", "b", "m", "v")}
    model = _model([_node("BatchNormalization", ["x", "s", "b", "m", "v"])],
                   inputs=[("x", F, [2, 3])], initializers=stats, opset=6)
    with pytest.raises(ShapeError, match="training mode"):
        myelin.onnx.load(model, cache=False).run({"x": np.ones((2, 3), np.float32)})
