"""bfloat16 ONNX models: inputs, weights and outputs of bfloat16, each op computed in float32
and its result rounded to bfloat16, as float16 models are (README, "Reduced precision")."""

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import myelin
import myelin.onnx

BF16 = TensorProto.BFLOAT16


def _model(rng):
    """A layer, its layer norm and softmax (cast to float32 out), and a convolution of the
    normalized values seen as images (a bfloat16 output)."""
    def weights(name, shape, scale=0.3):
        values = (rng.standard_normal(shape) * scale).astype(ml_dtypes.bfloat16)
        return numpy_helper.from_array(values, name)

    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["r"]),
        helper.make_node("LayerNormalization", ["r", "g", "beta"], ["n"], axis=-1),
        helper.make_node("Softmax", ["n"], ["s"], axis=-1),
        helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["n", "shape"], ["img"]),
        helper.make_node("Conv", ["img", "k"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("ReduceMean", ["c"], ["m"], keepdims=0, axes=[2, 3]),
    ]
    initializers = [weights("w", (24, 32)), weights("b", (32,)), weights("g", (32,), 1.0),
                    weights("beta", (32,)), weights("k", (3, 2, 3, 3)),
                    numpy_helper.from_array(np.array([4, 2, 4, 4], np.int64), "shape")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", BF16, [4, 24])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32]),
                               helper.make_tensor_value_info("m", BF16, [4, 3])],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _float64(model):
    """``model`` with every bfloat16 tensor, value and cast made float64: its exact values."""
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    for tensor in wide.graph.initializer:
        if tensor.data_type == BF16:
            tensor.CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(tensor).astype(np.float64), tensor.name))
    for value in list(wide.graph.input) + list(wide.graph.output):
        value.type.tensor_type.elem_type = TensorProto.DOUBLE
    for node in wide.graph.node:
        for attribute in node.attribute:
            if attribute.name == "to":
                attribute.i = TensorProto.DOUBLE
    return wide


def test_bfloat16_model_near_its_exact_values():
    """Outputs within bfloat16's rounding (2^-8 relative per op) of the float64 evaluation,
    and no farther from it than ONNX's reference evaluator (which rounds as it goes too)."""
    rng = np.random.default_rng()
    model = _model(rng)
    x = rng.standard_normal((4, 24)).astype(ml_dtypes.bfloat16)
    got = myelin.onnx.load(model).run({"x": x})
    assert [a.dtype for a in got] == [np.float32, np.dtype(ml_dtypes.bfloat16)]
    exact = ReferenceEvaluator(_float64(model)).run(None, {"x": x.astype(np.float64)})
    rounded = ReferenceEvaluator(model).run(None, {"x": x})
    for value, want, other in zip(got, exact, rounded):
        scale = np.abs(want).max()
        error = np.abs(np.asarray(value, np.float64) - want).max() / scale
        assert error < 3e-2
        assert error <= 2 * np.abs(np.asarray(other, np.float64) - want).max() / scale + 1e-2


def test_bfloat16_casts_round_to_nearest_even():
    """float32 -> bfloat16 -> float32 as ml_dtypes converts: ties to even, overflow to
    infinity, NaN kept; the same values given as a bfloat16 input pass through exactly."""
    values = np.array([1.0, 1.00390625, 1.01171875, 3.0e38, 3.4e38, -np.inf, np.nan, 1e-40,
                       -0.0, 65504.0, 1.0 + 2 ** -9, 1.0 + 3 * 2 ** -9], np.float32)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["b"], to=BF16),
         helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT),
         helper.make_node("Identity", ["b"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [len(values)])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [len(values)]),
         helper.make_tensor_value_info("z", BF16, [len(values)])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with np.errstate(over="ignore"):
        want = values.astype(ml_dtypes.bfloat16)
    y, z = myelin.onnx.load(model).run({"x": values})
    np.testing.assert_array_equal(y, want.astype(np.float32))
    np.testing.assert_array_equal(z.view(np.uint16), want.view(np.uint16))


def test_bfloat16_input_of_another_type_is_refused():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", BF16, [3])],
                              [helper.make_tensor_value_info("y", BF16, [3])])
    model = myelin.onnx.load(helper.make_model(graph,
                                               opset_imports=[helper.make_opsetid("", 17)]))
    np.testing.assert_array_equal(
        model.run({"x": np.array([-1, 0.5, 2], ml_dtypes.bfloat16)})[0].astype(np.float32),
        [0, 0.5, 2])
    with pytest.raises(myelin.InputError):
        model.run({"x": np.array([-1, 0.5, 2], np.float32)})


def test_bfloat16_model_saved_and_pickled(tmp_path):
    """The compiled signature (a bfloat16 input) survives saving and pickling: the loaded
    model runs it without compiling and gives the same bits."""
    import pickle

    rng = np.random.default_rng()
    model = myelin.onnx.load(_model(rng))
    x = rng.standard_normal((4, 24)).astype(ml_dtypes.bfloat16)
    first = model.run({"x": x})
    model.save(str(tmp_path / "m.myelin"))
    for loaded in (myelin.load(str(tmp_path / "m.myelin")), pickle.loads(pickle.dumps(model))):
        again = loaded.run({"x": x})
        assert len(loaded.compiles) == 1
        for a, b in zip(first, again):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_narrow_model_products_keep_their_weights_narrow(dtype):
    """A float16 or bfloat16 model's products read their constant weights in that type (the
    importer marks them; folding their casts makes them float32 constants, which the kernel
    packs back exactly): half the bytes a product at batch 1 reads, the same values."""
    numpy_type = myelin.flow.dtypes.to_numpy(dtype)
    code = TensorProto.FLOAT16 if dtype == "float16" else BF16
    rng = np.random.default_rng()
    weights = (rng.standard_normal((64, 48)) * 0.1).astype(numpy_type)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", code, [1, 64])],
                              [helper.make_tensor_value_info("y", code, [1, 48])],
                              [numpy_helper.from_array(weights, "w")])
    model = myelin.onnx.load(helper.make_model(graph,
                                               opset_imports=[helper.make_opsetid("", 17)]))
    x = rng.standard_normal((1, 64)).astype(numpy_type)
    (y,) = model.run({"x": x})
    (step,) = [s for s in model.network().cell("main").steps if "MatMul" in s.type]
    assert step.attrs["weights"] == dtype
    want = x.astype(np.float64) @ weights.astype(np.float64)
    unit = 2.0 ** (-11 if dtype == "float16" else -8)        # one rounding of the result
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=unit, atol=1e-6)
