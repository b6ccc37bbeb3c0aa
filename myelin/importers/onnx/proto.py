"""Reading ONNX protobufs: models from paths, bytes or ModelProtos, tensors, types, attributes.

Everything that knows the layout of ONNX's protobuf messages lives here, so the converters see
NumPy arrays, myelin type names and plain Python attribute values.
"""

import functools
import os

import numpy as np
import onnx
from onnx import numpy_helper

from myelin.errors import FlowFormatError, UnsupportedOpError, UnsupportedTypeError
from myelin.flow import dtypes
from myelin.importers.onnx import external

# ONNX TensorProto element types myelin computes with, by their myelin names.
_TYPES = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.BFLOAT16: "bfloat16",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.INT16: "int16",
    onnx.TensorProto.UINT16: "uint16",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.UINT32: "uint32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.UINT64: "uint64",
    onnx.TensorProto.BOOL: "bool",
}
_ONNX_TYPES = {name: code for code, name in _TYPES.items()}

OPSETS = range(1, 29)        # the ai.onnx opsets myelin imports


def load(model, base_dir=None):
    """A ModelProto from a path, bytes or a ModelProto; raises FlowFormatError for anything
    that does not parse or holds no graph. Tensors with external data are read from files in
    ``base_dir``, by default the folder of the model's path (see :mod:`.external`)."""
    if isinstance(model, onnx.ModelProto):
        return external.load(_checked(model, "the model"), base_dir)
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            parsed = onnx.load_model_from_string(bytes(model))
        except Exception as exc:  # protobuf raises its own DecodeError types
            raise FlowFormatError(f"not an ONNX model: {exc}") from None
        return external.load(_checked(parsed, "the bytes"), base_dir, copy=False)
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no ONNX model at {path}")
        try:
            parsed = onnx.load(path, load_external_data=False)
        except Exception as exc:
            raise FlowFormatError(f"{path} is not an ONNX model: {exc}") from None
        folder = os.path.dirname(os.path.abspath(path)) if base_dir is None else base_dir
        return external.load(_checked(parsed, path), folder, copy=False)
    raise TypeError(f"expected a path, bytes or onnx.ModelProto, got {type(model).__name__}")


def _checked(model, what):
    """``model``, or FlowFormatError if it has no graph (an empty file parses as one) or a
    string that is not UTF-8 text (protobuf hands such a string over as bytes)."""
    if not model.HasField("graph"):
        raise FlowFormatError(f"{what} is not an ONNX model: it has no graph")
    pending = [model]
    while pending:
        message = pending.pop()
        for field, value in message.ListFields():
            values = value if field.is_repeated else [value]
            if field.type == field.TYPE_MESSAGE:
                pending.extend(values)
            elif field.type == field.TYPE_STRING and any(isinstance(v, bytes) for v in values):
                raise FlowFormatError(f"{what} is not an ONNX model: a {field.name} of a "
                                      f"{message.DESCRIPTOR.name} is not UTF-8 text")
    return model


def opset(model, domain=""):
    """The opset version the model imports for ``domain`` ("" is the default ai.onnx)."""
    for entry in model.opset_import:
        if entry.domain in (domain, "ai.onnx" if domain == "" else domain):
            return entry.version
    return 1 if domain == "" else None


def check_opset(model):
    """UnsupportedOpError unless the model's ai.onnx opset is one of :data:`OPSETS`."""
    version = opset(model)
    if version not in OPSETS:
        raise UnsupportedOpError(f"the model imports ai.onnx opset {version}: myelin imports "
                                 f"opsets {OPSETS.start} to {OPSETS.stop - 1}")


def node_name(node):
    """How messages name a node: its name, else its first output, else its op type."""
    return node.name or next((o for o in node.output if o), "") or f"a {node.op_type} node"


def subgraphs(node):
    """The graphs of ``node``'s attributes: If branches, Loop and Scan bodies."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def free_names(graph):
    """The names ``graph`` (its subgraphs included) reads from the graphs around it."""
    defined = {info.name for info in graph.input} | {t.name for t in graph.initializer}
    read = set()
    for node in graph.node:
        defined.update(node.output)
        read.update(name for name in node.input if name)
        for sub in subgraphs(node):
            read |= free_names(sub)
    return read - defined


def schema(node, version):
    """The ONNX schema of ``node``'s op at opset ``version``, or None if ONNX defines no such
    op (in that domain, at that opset)."""
    return _schema(node.op_type, version, "" if node.domain in ("", "ai.onnx") else node.domain)


@functools.lru_cache(maxsize=4096)
def _schema(op_type, version, domain):
    """:func:`schema` by op type, opset and domain, cached: a model has many nodes of few
    types."""
    try:
        return onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:
        return None


def schema_problems(node, found):
    """What is wrong with ``node`` by the ONNX schema ``found``: its numbers of inputs and
    outputs, attributes the op does not have or of another type, required ones missing.
    A list of messages (empty when it fits)."""
    where = f"node {node_name(node)} ({node.op_type})"
    problems = []
    for what, count, low, high in (("inputs", len(node.input), found.min_input,
                                    found.max_input),
                                   ("outputs", len(node.output), found.min_output,
                                    found.max_output)):
        if not low <= count <= high:
            wanted = f"{low}" if low == high else f"{low} to {high}" if high < 2**31 - 1 \
                else f"at least {low}"
            problems.append(f"{where} has {count} {what}, the op takes {wanted}")
    for index, formal in enumerate(found.inputs):
        if formal.option == onnx.defs.OpSchema.FormalParameterOption.Single and \
                index < len(node.input) and not node.input[index]:
            problems.append(f"{where} leaves out input {index} ({formal.name}), which the op "
                            f"requires")
    given = set()
    for attr in node.attribute:
        declared = found.attributes.get(attr.name)
        given.add(attr.name)
        if declared is None:
            problems.append(f"{where} has attribute {attr.name!r}, which the op does not have")
        elif attr.type != declared.type.value:
            problems.append(f"{where}: attribute {attr.name} is "
                            f"{_attribute_type_name(attr.type)}, the op takes "
                            f"{_attribute_type_name(declared.type.value)}")
    for name, declared in found.attributes.items():
        if declared.required and name not in given:
            problems.append(f"{where} lacks attribute {name}, which the op requires")
    return problems


def _attribute_type_name(code):
    names = onnx.AttributeProto.AttributeType
    return names.Name(code) if code in names.values() else f"type {code}"


def dtype_of(code, where):
    """The myelin type name of ONNX element type ``code``; UnsupportedTypeError if there is
    none. ``where`` names the value for the message."""
    try:
        return _TYPES[code]
    except KeyError:
        name = onnx.TensorProto.DataType.Name(code) if code in onnx.TensorProto.DataType.values() \
            else str(code)
        raise UnsupportedTypeError(f"{where} has data type {name}, which myelin does not "
                                   f"support") from None


def onnx_dtype(name):
    """The ONNX element type code of myelin type ``name``."""
    return _ONNX_TYPES[dtypes.canonical(name)]


def to_array(tensor):
    """A TensorProto as a NumPy array of its myelin type (its external data, if any, read
    into it by :func:`load`)."""
    dtype_of(tensor.data_type, f"tensor {tensor.name!r}")
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise FlowFormatError(f"tensor {tensor.name!r} keeps its data in an external file, "
                              f"where myelin reads only the tensors of a model's graphs")
    try:
        return np.asarray(numpy_helper.to_array(tensor))
    except ValueError as error:     # data that does not fill the shape, ...
        raise FlowFormatError(f"tensor {tensor.name!r} of shape {list(tensor.dims)} is "
                              f"malformed: {error}") from None


def value_type(info):
    """(myelin type, shape) of a ValueInfoProto; unknown dimensions are None: a symbol, no
    value, or a negative value (Paddle's exporter declares -1, as ONNX Runtime accepts)."""
    kind = info.type.WhichOneof("value")
    if kind != "tensor_type":
        what = kind.removesuffix("_type").replace("_", " ") if kind else "value of no type"
        raise UnsupportedTypeError(f"graph value {info.name!r} is a {what}, not a tensor: myelin "
                                   f"takes and gives only tensors (sequences are supported "
                                   f"only inside a graph)")
    tensor = info.type.tensor_type
    dtype = dtype_of(tensor.elem_type, f"graph value {info.name!r}")
    if not tensor.HasField("shape"):
        return dtype, None
    shape = []
    for dim in tensor.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value >= 0:
            shape.append(int(dim.dim_value))
        else:
            shape.append(dim.dim_param or None)
    return dtype, tuple(shape)


def attributes(node):
    """The node's attributes as a dict of Python values (ints, floats, strs, lists, arrays)."""
    values = {}
    for attr in node.attribute:
        if attr.ref_attr_name:
            raise UnsupportedTypeError(f"node {node.name!r} ({node.op_type}): attribute "
                                       f"{attr.name} refers to a function attribute")
        value = onnx.helper.get_attribute_value(attr)
        try:
            if isinstance(value, bytes):
                value = value.decode("utf-8")
            elif isinstance(value, list) and value and isinstance(value[0], bytes):
                value = [v.decode("utf-8") for v in value]
        except UnicodeDecodeError:
            raise FlowFormatError(f"node {node_name(node)} ({node.op_type}): attribute "
                                  f"{attr.name} is not valid UTF-8") from None
        if isinstance(value, onnx.TensorProto):
            value = to_array(value)
        values[attr.name] = value
    return values
