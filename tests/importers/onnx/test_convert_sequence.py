"""Sequence converters (SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase,
SequenceAt, SequenceLength, ConcatFromSequence, SplitToSequence) against ONNX Runtime:
sequences live inside the graph and are resolved at import time. (ONNX's reference evaluator
inserts at position len(seq) at the front, so it only gives the output types.)"""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import myelin.onnx
from myelin.errors import ShapeError, UnsupportedTypeError

rng = np.random.default_rng()
_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
          np.dtype(np.int32): TensorProto.INT32}


def _model(nodes, feeds, outputs, initializers=(), opset=17):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, _TYPES[a.dtype], a.shape)
                     for n, a in feeds.items()],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs],
        initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _typed_model(nodes, feeds, outputs, **kwargs):
    """The model with its outputs' element types taken from the reference evaluator."""
    model = _model(nodes, feeds, outputs, **kwargs)
    want = ReferenceEvaluator(model).run(None, feeds)
    del model.graph.output[:]
    model.graph.output.extend(helper.make_tensor_value_info(n, _TYPES[np.asarray(w).dtype], None)
                              for n, w in zip(outputs, want))
    return model, want


def _check(nodes, feeds, outputs, **kwargs):
    model, _ = _typed_model(nodes, feeds, outputs, **kwargs)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    got = myelin.onnx.load(model).run(feeds)
    assert len(got) == len(want)
    for name, g, w in zip(outputs, got, want):
        w = np.asarray(w)
        assert np.shape(g) == w.shape, name
        assert np.asarray(g).dtype == w.dtype, name
        np.testing.assert_array_equal(g, w, err_msg=name)


def _const(name, value):
    return helper.make_node("Constant", [], [name],
                            value=helper.make_tensor(name, TensorProto.INT64, np.shape(value),
                                                     np.asarray(value).reshape(-1).tolist()))


def _feeds(*shapes):
    return {f"x{i}": rng.standard_normal(shape).astype(np.float32)
            for i, shape in enumerate(shapes)}


@pytest.mark.parametrize("position", [0, 1, 2, -1, -3])
def test_construct_and_at(position):
    nodes = [helper.make_node("SequenceConstruct", ["x0", "x1", "x2"], ["s"]),
             _const("p", position),
             helper.make_node("SequenceAt", ["s", "p"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    _check(nodes, _feeds((2, 3), (4, 3), (1, 3)), ["y", "a"])


@pytest.mark.parametrize("positions", [[None, None, None], [None, 0, 1], [None, -1, 2]])
def test_empty_insert_at(positions):
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=TensorProto.FLOAT)]
    for i, position in enumerate(positions):
        inputs = [f"s{i}", f"x{i}"]
        if position is not None:
            nodes.append(_const(f"p{i}", position))
            inputs.append(f"p{i}")
        nodes.append(helper.make_node("SequenceInsert", inputs, [f"s{i + 1}"]))
    nodes += [_const("first", 0), _const("last", -1),
              helper.make_node("SequenceAt", ["s3", "first"], ["a"]),
              helper.make_node("SequenceAt", ["s3", "last"], ["b"]),
              helper.make_node("SequenceLength", ["s3"], ["n"]),
              helper.make_node("ConcatFromSequence", ["s3"], ["c"], axis=0)]
    _check(nodes, _feeds((1, 4), (2, 4), (3, 4)), ["a", "b", "n", "c"])


@pytest.mark.parametrize("position", [None, 0, 1, -2])
def test_erase_and_length(position):
    inputs = ["s"] + ([] if position is None else ["p"])
    nodes = [helper.make_node("SequenceConstruct", ["x0", "x1", "x2"], ["s"]),
             _const("p", 0 if position is None else position),
             helper.make_node("SequenceErase", inputs, ["e"]),
             helper.make_node("SequenceLength", ["e"], ["n"]),
             helper.make_node("ConcatFromSequence", ["e"], ["c"], axis=1)]
    _check(nodes, _feeds((2, 1), (2, 3), (2, 2)), ["n", "c"])


@pytest.mark.parametrize("axis,new_axis", [(0, 0), (1, 0), (-1, 0), (0, 1), (2, 1), (-1, 1),
                                           (-3, 1)])
def test_concat_from_sequence(axis, new_axis):
    nodes = [helper.make_node("SequenceConstruct", ["x0", "x1"], ["s"]),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis,
                              new_axis=new_axis)]
    _check(nodes, _feeds((3, 4), (3, 4)), ["y"])


@pytest.mark.parametrize("split,axis,keepdims", [(None, 0, 1), (None, 1, 0), (None, -1, 0),
                                                 (2, 1, 1), (3, 0, 1), ([1, 4], 1, 0),
                                                 ([0, 2, 3], -1, 1)])
def test_split_to_sequence(split, axis, keepdims):
    nodes, inputs, initializers = [], ["x0"], []
    if split is not None:
        initializers.append(helper.make_tensor("split", TensorProto.INT64, np.shape(split),
                                               np.asarray(split).reshape(-1).tolist()))
        inputs.append("split")
    nodes += [helper.make_node("SplitToSequence", inputs, ["s"], axis=axis, keepdims=keepdims),
              helper.make_node("SequenceLength", ["s"], ["n"]),
              _const("last", -1), helper.make_node("SequenceAt", ["s", "last"], ["z"]),
              helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=axis,
                               new_axis=int(split is None and not keepdims))]
    _check(nodes, _feeds((4, 5)), ["n", "z", "c"], initializers=initializers)


def test_position_from_a_graph_input_specializes():
    model, _ = _typed_model(
        [helper.make_node("SplitToSequence", ["x0"], ["s"], axis=0),
         helper.make_node("SequenceAt", ["s", "p"], ["y"])],
        {"x0": np.zeros((3, 2), np.float32), "p": np.array(1, np.int64)}, ["y"])
    compiled = myelin.onnx.load(model)
    x = rng.standard_normal((3, 2)).astype(np.float32)
    for position in (2, -3):
        got = compiled.run({"x0": x, "p": np.array(position, np.int64)})[0]
        np.testing.assert_array_equal(got, x[position:position + 1])


def test_sequence_graph_input_or_output_is_unsupported():
    node = helper.make_node("SequenceConstruct", ["x"], ["s"])
    seq_type = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    as_output = helper.make_model(helper.make_graph([node], "g", [x], [seq_type]))
    with pytest.raises(UnsupportedTypeError, match="'s' is a sequence"):
        myelin.onnx.import_model(as_output)
    at = helper.make_node("SequenceAt", ["s", "p"], ["y"])
    as_input = helper.make_model(helper.make_graph(
        [at], "g", [seq_type, helper.make_tensor_value_info("p", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]))
    with pytest.raises(UnsupportedTypeError, match="'s' is a sequence"):
        myelin.onnx.import_model(as_input)


def test_sequence_into_a_tensor_op_is_unsupported():
    model = _model([helper.make_node("SequenceConstruct", ["x0"], ["s"]),
                    helper.make_node("Relu", ["s"], ["y"])], _feeds((2,)), ["y"])
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    with pytest.raises(UnsupportedTypeError, match="input 0 is a sequence"):
        myelin.onnx.import_model(model)


def test_position_out_of_range_is_a_shape_error():
    model = _model([helper.make_node("SequenceConstruct", ["x0", "x1"], ["s"]),
                    _const("p", 2), helper.make_node("SequenceAt", ["s", "p"], ["y"])],
                   _feeds((2,), (2,)), ["y"])
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    with pytest.raises(ShapeError, match="position 2 is out of range"):
        myelin.onnx.import_model(model)
