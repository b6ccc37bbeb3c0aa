"""Reading GraphDefs: from files (binary ``.pb`` or text ``.pbtxt``), bytes or message
objects; node attributes, tensor values and data types as Python and NumPy values.

Everything that knows the layout of TensorFlow's protobuf messages lives here (with the
messages themselves in :mod:`~myelin.importers.tensorflow.protos`), so converters see NumPy
arrays, myelin type names and plain attribute values. Needs only ``protobuf``.
"""

import os

import numpy as np
from google.protobuf import message, text_format

from myelin.errors import FlowFormatError, UnsupportedTypeError
from myelin.importers.tensorflow import protos

# TensorFlow type numbers myelin computes with, by their myelin names (a _REF type, the type
# of a TF1 variable's output, is its value type).
_TYPES = {protos.DataType[f"DT_{name}"]: dtype for name, dtype in (
    ("FLOAT", "float32"), ("DOUBLE", "float64"), ("HALF", "float16"), ("INT8", "int8"),
    ("INT16", "int16"), ("INT32", "int32"), ("INT64", "int64"), ("UINT8", "uint8"),
    ("UINT16", "uint16"), ("UINT32", "uint32"), ("UINT64", "uint64"), ("BOOL", "bool"))}
_TYPE_NAMES = {number: name for name, number in protos.DataType.items()}
_REF = 100

# TensorProto's typed value fields by myelin type (float16 values are stored as int32 bits).
_VALUE_FIELDS = {"float32": "float_val", "float64": "double_val", "float16": "half_val",
                 "int8": "int_val", "int16": "int_val", "int32": "int_val", "uint8": "int_val",
                 "uint16": "int_val", "int64": "int64_val", "uint32": "uint32_val",
                 "uint64": "uint64_val", "bool": "bool_val"}


class TypeName(str):
    """A TensorFlow data type myelin does not compute with (``DT_STRING``, ``DT_RESOURCE``,
    ...), as a type attribute's value; :func:`myelin_type` raises for it."""


def load(source):
    """A GraphDef from a path (binary or text protobuf), bytes (either) or a GraphDef message
    (ours or TensorFlow's); raises FlowFormatError for anything that does not parse."""
    if isinstance(source, protos.GraphDef):
        return source
    if hasattr(source, "SerializeToString"):           # TensorFlow's own GraphDef class
        return parse(source.SerializeToString(), type(source).__name__)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return parse(bytes(source), "the bytes given")
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no GraphDef at {path}")
        with open(path, "rb") as file:
            return parse(file.read(), path)
    raise TypeError(f"expected a path, bytes or GraphDef, got {type(source).__name__}")


def parse(data, where):
    """A GraphDef from ``data``: binary protobuf, else text protobuf (``where`` names the source
    in messages). Data that parses as neither, or as a graph without nodes, raises
    FlowFormatError."""
    graph = protos.GraphDef()
    try:
        graph.ParseFromString(data)
        if graph.node:
            return graph
        problem = "it has no nodes"
    except message.DecodeError as exc:
        problem = f"binary protobuf: {exc}"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FlowFormatError(f"{where} is not a GraphDef ({problem})") from None
    graph = protos.GraphDef()
    try:
        text_format.Parse(text, graph, allow_unknown_field=True)
    except text_format.ParseError as exc:
        raise FlowFormatError(f"{where} is not a GraphDef (text protobuf: {exc})") from None
    if not graph.node:
        raise FlowFormatError(f"{where} is not a GraphDef: it has no nodes")
    return graph


def myelin_type(value, where):
    """The myelin type name of a type attribute's value; UnsupportedTypeError for a type
    myelin does not compute with. ``where`` names the node or value for the message."""
    if isinstance(value, TypeName):
        raise UnsupportedTypeError(f"{where} has data type {value}, which myelin does not "
                                   f"support")
    return value


def _type(number):
    number = number - _REF if number > _REF else number
    if number in _TYPES:
        return _TYPES[number]
    return TypeName(_TYPE_NAMES.get(number, f"type {number}"))


def shape(proto):
    """A TensorShapeProto as a tuple (None for an unknown dimension), or None for an unknown
    rank."""
    if proto.unknown_rank:
        return None
    return tuple(None if dim.size < 0 else int(dim.size) for dim in proto.dim)


def tensor(proto, where):
    """The NumPy array of a TensorProto. Values are read from ``tensor_content`` or the typed
    value fields; as in TensorFlow, a field holding fewer values than the shape has is padded
    with its last value (an empty one with zeros)."""
    dtype = myelin_type(_type(proto.dtype), where)
    numpy_type = np.dtype(dtype).newbyteorder("<")
    dims = shape(proto.tensor_shape) or ()
    count = int(np.prod(dims, dtype=np.int64))
    if proto.tensor_content:
        if len(proto.tensor_content) != count * numpy_type.itemsize:
            raise FlowFormatError(f"{where}: tensor content of {len(proto.tensor_content)} "
                                  f"bytes does not hold {list(dims)} {dtype} values")
        values = np.frombuffer(proto.tensor_content, numpy_type)
    else:
        values = np.asarray(getattr(proto, _VALUE_FIELDS[dtype]))
        if dtype == "float16":
            values = values.astype(np.uint16).view(np.float16)
        if len(values) > count:
            raise FlowFormatError(f"{where}: {len(values)} values for shape {list(dims)}")
        if 0 < len(values) < count:
            values = np.concatenate([values, np.repeat(values[-1:], count - len(values))])
        elif len(values) == 0:
            values = np.zeros(count)
    return np.array(values, dtype=dtype).reshape(dims)


def attribute(value, where):
    """An AttrValue as a Python value: str (bytes that are not UTF-8 stay bytes), int, float,
    bool, a myelin type name (or :class:`TypeName`), a shape tuple, a NumPy array, or a list of
    those; a function reference is its name."""
    kind = value.WhichOneof("value")
    if kind == "list":
        items = value.list
        for field in ("s", "i", "f", "b", "type", "shape", "tensor", "func"):
            if len(getattr(items, field)):
                return [_scalar(field, item, where) for item in getattr(items, field)]
        return []
    if kind is None:
        return None
    return _scalar(kind, getattr(value, kind), where)


def _scalar(kind, item, where):
    if kind == "s":
        try:
            return item.decode("utf-8")
        except UnicodeDecodeError:
            return item
    if kind == "type":
        return _type(item)
    if kind == "shape":
        return shape(item)
    if kind == "tensor":
        return tensor(item, where)
    if kind == "func":
        return item.name
    return item


def tensor_name(name):
    """(node name, output index) of a tensor name ``node`` or ``node:index``."""
    node, colon, index = name.rpartition(":")
    if colon and index.isdigit():
        return node, int(index)
    return name, 0
