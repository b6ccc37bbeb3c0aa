"""The ONNX importer's behaviour around the converters: loading, errors, shapes, specialization."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import myelin.onnx
from myelin.errors import (FlowFormatError, InputError, UnsupportedOpError,
                           UnsupportedTypeError)


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _info(name, elem_type=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem_type, shape)


def _linear_model():
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(
        np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Relu", ["h"], ["y"])]
    return _model(nodes, [_info("x", shape=["N", 4])], [_info("y", shape=["N", 3])], [w])


def test_loads_paths_bytes_and_protos(tmp_path):
    model = _linear_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    expected = np.maximum(x @ numpy_helper.to_array(model.graph.initializer[0]), 0)
    for source in (model, model.SerializeToString(), path, str(path)):
        (y,) = myelin.onnx.load(source).run({"x": x})
        np.testing.assert_allclose(y, expected, rtol=1e-5)


def test_external_data_is_read(tmp_path):
    model = _linear_model()
    x = np.ones((1, 4), np.float32)
    expected = np.maximum(x @ numpy_helper.to_array(model.graph.initializer[0]), 0)
    path = tmp_path / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").exists()
    np.testing.assert_allclose(myelin.onnx.load(path).run([x])[0], expected, rtol=1e-5)


def test_garbage_is_a_format_error(tmp_path):
    with pytest.raises(FlowFormatError):
        myelin.onnx.load(b"\xff\xff not a model")
    with pytest.raises(FileNotFoundError):
        myelin.onnx.load(tmp_path / "missing.onnx")
    with pytest.raises(TypeError):
        myelin.onnx.load(42)


def test_every_unsupported_op_is_listed_at_once():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="fine"),
             helper.make_node("NoSuchOp", ["a"], ["b"], name="first"),
             helper.make_node("AlsoMissing", ["b"], ["c"], name="second"),
             helper.make_node("NoSuchOp", ["c"], ["y"], name="third")]
    model = _model(nodes, [_info("x", shape=[2])], [_info("y", shape=[2])])
    with pytest.raises(UnsupportedOpError) as info:
        myelin.onnx.load(model)
    message = str(info.value)
    assert "NoSuchOp (opset 17, domain ai.onnx): first, third" in message
    assert "AlsoMissing (opset 17, domain ai.onnx): second" in message
    assert info.value.ops == ["first", "second", "third"]


def test_unsupported_type_is_named():
    nodes = [helper.make_node("Identity", ["x"], ["y"])]
    model = _model(nodes, [_info("x", TensorProto.FLOAT8E4M3FN, [2])],
                   [_info("y", TensorProto.FLOAT8E4M3FN, [2])])
    with pytest.raises(UnsupportedTypeError, match="FLOAT8E4M3FN"):
        myelin.onnx.load(model).run([np.zeros(2, np.float32)])


def test_bad_inputs_are_input_errors():
    model = myelin.onnx.load(_linear_model())
    with pytest.raises(InputError, match="missing inputs"):
        model.run({})
    with pytest.raises(InputError, match="no inputs"):
        model.run({"x": np.zeros((1, 4), np.float32), "z": 1})
    with pytest.raises(InputError, match="float32"):
        model.run([np.zeros((1, 4), np.int32)])
    with pytest.raises(InputError, match="shape"):
        model.run([np.zeros((1, 5), np.float32)])


def test_dynamic_shape_without_values_needs_shapes():
    with pytest.raises(InputError, match="dynamic shape"):
        myelin.onnx.import_model(_linear_model())
    imported = myelin.onnx.import_model(_linear_model(), shapes={"x": (3, 4)})
    assert imported.inputs[0].shape == (3, 4)
    assert imported.outputs[0].shape == (3, 3)



def test_negative_declared_dimensions_are_dynamic():
    # Paddle's exporter declares unknown dimensions as dim_value -1.
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                   [_info("x", shape=[-1, 4])], [_info("y", shape=[-1, 3])], [w])
    x = np.random.default_rng().standard_normal((5, 4)).astype(np.float32)
    (y,) = myelin.onnx.load(model).run({"x": x})
    np.testing.assert_allclose(y, x @ np.ones((4, 3)), rtol=1e-5)

def test_shape_input_is_specialized_on_its_value():
    """A Reshape whose shape is a graph input compiles once per distinct shape value."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = _model(nodes, [_info("x", shape=[2, 6]), _info("shape", TensorProto.INT64, [2])],
                   [_info("y", shape=None)])
    compiled = myelin.onnx.load(model)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for shape in ([3, 4], [4, 3], [3, 4]):
        (y,) = compiled.run({"x": x, "shape": np.array(shape, np.int64)})
        np.testing.assert_array_equal(y, x.reshape(shape))
    assert len(compiled.compiles) == 2
    assert compiled.compiles[1][1] == "value of shape changed"
    with pytest.raises(InputError, match="values of inputs"):
        myelin.onnx.import_model(model)


def test_names_follow_the_model():
    imported = myelin.onnx.import_model(_linear_model(), shapes={"x": (1, 4)})
    flow = imported.flow
    assert flow.var_named("main/w").constant
    assert flow.var_named("main/h") is not None
    assert imported.outputs[0].var == "main/y"


def test_graph_output_that_is_an_input_is_copied():
    nodes = [helper.make_node("Identity", ["x"], ["y"])]
    model = _model(nodes, [_info("x", shape=[3])], [_info("y", shape=[3])])
    x = np.array([1, 2, 3], np.float32)
    (y,) = myelin.onnx.load(model).run([x])
    np.testing.assert_array_equal(y, x)


def test_inputs_are_read_in_place_and_outputs_are_fresh():
    """Inputs are bound to the cell without a copy (a contiguous copy of a strided one);
    outputs never share the caller's memory."""
    nodes = [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["z"])]
    model = myelin.onnx.load(_model(nodes, [_info("x", shape=[3, 4])],
                                    [_info("y", shape=[3, 4]), _info("z", shape=[3, 4])]))
    rng = np.random.default_rng()
    for x in (rng.standard_normal((3, 4)).astype(np.float32),
              rng.standard_normal((4, 3)).astype(np.float32).T):    # not contiguous
        y, z = model.run([x])
        np.testing.assert_array_equal(y, x)
        np.testing.assert_array_equal(z, np.maximum(x, 0))
        assert not np.shares_memory(y, x) and not np.shares_memory(z, x)
    assert model.network().cell("main").spec("main/x").ref
