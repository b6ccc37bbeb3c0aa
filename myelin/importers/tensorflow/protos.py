"""TensorFlow's GraphDef protobuf messages, built at run time with the ``protobuf`` package.

TensorFlow ships these messages in its own (large) wheel. Reading a GraphDef needs only the few
below, so they are declared here field by field, with TensorFlow's field numbers and types
(``tests/importers/tensorflow/test_protos.py`` checks them against TensorFlow's own
descriptors), and compiled into message classes in a descriptor pool of their own, apart from
the default pool where TensorFlow registers the same names. Fields a graph's import never
reads (a GraphDef's function library and debug info, a node's experimental fields, resource
and variant tensor values) are left out: binary parsing keeps them as unknown fields, text
parsing skips them.

``GraphDef``, ``NodeDef``, ``AttrValue``, ``TensorProto`` and ``TensorShapeProto`` are the
message classes; ``DataType`` maps TensorFlow's type names (``DT_FLOAT``) to their numbers.
"""

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_REPEATED = "repeated"

# TensorFlow's DataType enum: DT_<name> is its position; each has a DT_<name>_REF at 100 + it.
_TYPE_NAMES = ("INVALID FLOAT DOUBLE INT32 UINT8 INT16 INT8 STRING COMPLEX64 INT64 BOOL QINT8 "
               "QUINT8 QINT32 BFLOAT16 QINT16 QUINT16 UINT16 COMPLEX128 HALF RESOURCE VARIANT "
               "UINT32 UINT64 FLOAT8_E5M2 FLOAT8_E4M3FN FLOAT8_E4M3FNUZ FLOAT8_E4M3B11FNUZ "
               "FLOAT8_E5M2FNUZ INT4 UINT4 INT2 UINT2 FLOAT4_E2M1FN").split()
DataType = {f"DT_{name}": number for number, name in enumerate(_TYPE_NAMES)}
DataType.update({f"DT_{name}_REF": 100 + number for number, name in enumerate(_TYPE_NAMES)
                 if number})

# message -> [(field, number, type, repeated?)]; a type is a protobuf scalar type name or a
# message or enum name of this file. A "map" field is a map from strings to that message.
_MESSAGES = {
    "GraphDef": [("node", 1, "NodeDef", _REPEATED), ("versions", 4, "VersionDef"),
                 ("version", 3, "int32")],
    "VersionDef": [("producer", 1, "int32"), ("min_consumer", 2, "int32"),
                   ("bad_consumers", 3, "int32", _REPEATED)],
    "NodeDef": [("name", 1, "string"), ("op", 2, "string"), ("input", 3, "string", _REPEATED),
                ("device", 4, "string"), ("attr", 5, "AttrValue", "map")],
    "AttrValue": [("list", 1, "AttrValue.ListValue"), ("s", 2, "bytes"), ("i", 3, "int64"),
                  ("f", 4, "float"), ("b", 5, "bool"), ("type", 6, "DataType"),
                  ("shape", 7, "TensorShapeProto"), ("tensor", 8, "TensorProto"),
                  ("placeholder", 9, "string"), ("func", 10, "NameAttrList")],
    "AttrValue.ListValue": [("s", 2, "bytes", _REPEATED), ("i", 3, "int64", _REPEATED),
                            ("f", 4, "float", _REPEATED), ("b", 5, "bool", _REPEATED),
                            ("type", 6, "DataType", _REPEATED),
                            ("shape", 7, "TensorShapeProto", _REPEATED),
                            ("tensor", 8, "TensorProto", _REPEATED),
                            ("func", 9, "NameAttrList", _REPEATED)],
    "NameAttrList": [("name", 1, "string"), ("attr", 2, "AttrValue", "map")],
    "TensorProto": [("dtype", 1, "DataType"), ("tensor_shape", 2, "TensorShapeProto"),
                    ("version_number", 3, "int32"), ("tensor_content", 4, "bytes"),
                    ("half_val", 13, "int32", _REPEATED), ("float_val", 5, "float", _REPEATED),
                    ("double_val", 6, "double", _REPEATED), ("int_val", 7, "int32", _REPEATED),
                    ("string_val", 8, "bytes", _REPEATED),
                    ("scomplex_val", 9, "float", _REPEATED),
                    ("int64_val", 10, "int64", _REPEATED), ("bool_val", 11, "bool", _REPEATED),
                    ("dcomplex_val", 12, "double", _REPEATED),
                    ("uint32_val", 16, "uint32", _REPEATED),
                    ("uint64_val", 17, "uint64", _REPEATED), ("float8_val", 18, "bytes")],
    "TensorShapeProto": [("dim", 2, "TensorShapeProto.Dim", _REPEATED),
                         ("unknown_rank", 3, "bool")],
    "TensorShapeProto.Dim": [("size", 1, "int64"), ("name", 2, "string")],
}
_ONEOFS = {"AttrValue": "value"}     # message whose fields (all but none) form one oneof
_SCALARS = {"int32": _F.TYPE_INT32, "int64": _F.TYPE_INT64, "uint32": _F.TYPE_UINT32,
            "uint64": _F.TYPE_UINT64, "float": _F.TYPE_FLOAT, "double": _F.TYPE_DOUBLE,
            "bool": _F.TYPE_BOOL, "string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES}
_PACKAGE = "tensorflow"


def _add_field(message, path, name, number, type_name, label=None):
    """Add a field to ``message`` (whose name in the file is ``path``)."""
    field = message.field.add(name=name, number=number, json_name=_camel(name))
    field.label = _F.LABEL_REPEATED if label in (_REPEATED, "map") else _F.LABEL_OPTIONAL
    if type_name in _SCALARS:
        field.type = _SCALARS[type_name]
    elif type_name == "DataType":
        field.type, field.type_name = _F.TYPE_ENUM, f".{_PACKAGE}.DataType"
    else:
        field.type, field.type_name = _F.TYPE_MESSAGE, f".{_PACKAGE}.{type_name}"
    if label == "map":
        # A map<string, T> is a repeated nested <Field>Entry message of key and value.
        entry = message.nested_type.add(name=f"{_camel(name, upper=True)}Entry")
        entry.options.map_entry = True
        _add_field(entry, f"{path}.{entry.name}", "key", 1, "string")
        _add_field(entry, f"{path}.{entry.name}", "value", 2, type_name)
        field.type_name = f".{_PACKAGE}.{path}.{entry.name}"
    return field


def _camel(name, upper=False):
    parts = name.split("_")
    text = parts[0] + "".join(p.title() for p in parts[1:])
    return text[0].upper() + text[1:] if upper else text


def _file():
    """The FileDescriptorProto of the messages above."""
    proto = descriptor_pb2.FileDescriptorProto(name="myelin/tensorflow_graph.proto",
                                               package=_PACKAGE, syntax="proto3")
    enum = proto.enum_type.add(name="DataType")
    for name, number in DataType.items():
        enum.value.add(name=name, number=number)
    messages = {}
    for full_name in _MESSAGES:          # parents come before their nested messages
        parent, _, name = full_name.rpartition(".")
        container = messages[parent].nested_type if parent else proto.message_type
        messages[full_name] = container.add(name=name)
    for full_name, fields in _MESSAGES.items():
        message = messages[full_name]
        oneof = _ONEOFS.get(full_name)
        if oneof:
            message.oneof_decl.add(name=oneof)
        for name, number, type_name, *label in fields:
            field = _add_field(message, full_name, name, number, type_name, *label)
            if oneof:
                field.oneof_index = 0
    return proto


def _classes():
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(
        f"{_PACKAGE}.{name}")) for name in _MESSAGES}


_CLASSES = _classes()
GraphDef = _CLASSES["GraphDef"]
NodeDef = _CLASSES["NodeDef"]
AttrValue = _CLASSES["AttrValue"]
TensorProto = _CLASSES["TensorProto"]
TensorShapeProto = _CLASSES["TensorShapeProto"]
