"""The GraphDef messages myelin declares match TensorFlow's own, field by field."""

import pytest

from myelin.importers.tensorflow import protos

tf = pytest.importorskip("tensorflow")


def _nested(descriptor, path):
    for part in path:
        descriptor = descriptor.nested_types_by_name[part]
    return descriptor


def _field_type(field):
    target = field.message_type or field.enum_type
    return field.type, field.is_repeated, target.full_name if target else None


@pytest.mark.parametrize("name", sorted(protos._MESSAGES))
def test_fields_match_tensorflow(name):
    from tensorflow.core.framework import graph_pb2

    top = name.split(".")[0]
    ours = _nested(protos._CLASSES[top].DESCRIPTOR, name.split(".")[1:])
    theirs = graph_pb2.DESCRIPTOR.pool.FindMessageTypeByName(f"tensorflow.{name}")
    assert ours.fields, name
    for field in ours.fields:
        other = theirs.fields_by_number[field.number]
        assert field.name == other.name
        assert _field_type(field) == _field_type(other), field.full_name
        assert (field.containing_oneof is None) == (other.containing_oneof is None)


def test_data_types_match_tensorflow():
    from tensorflow.core.framework import types_pb2

    theirs = {value.name: value.number for value in types_pb2.DataType.DESCRIPTOR.values}
    assert protos.DataType.items() <= theirs.items()
    assert len(protos.DataType) >= 67


def test_binary_graphs_round_trip_with_unknown_fields():
    """A graph calling a function (so with a function library, which myelin does not declare)
    parses and serializes back to the same graph."""
    inner = tf.function(lambda x: tf.nn.relu(x) * 2.0)
    function = tf.function(lambda x: inner(x) + 1.0).get_concrete_function(
        tf.TensorSpec([3], tf.float32))
    original = function.graph.as_graph_def()
    assert original.library.function
    data = original.SerializeToString()
    graph = protos.GraphDef()
    graph.ParseFromString(data)
    assert "PartitionedCall" in [node.op for node in graph.node]
    again = type(original)()
    again.ParseFromString(graph.SerializeToString())
    assert again == original
