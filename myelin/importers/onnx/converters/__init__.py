"""The table of ONNX op converters: one function per ONNX op type (all opset versions).

A converter takes a :class:`~myelin.importers.onnx.context.NodeContext` and returns the
variable (or list of variables) of the node's outputs, built from myelin ops. Behaviour that
changed between opset versions is chosen by ``ctx.opset``. Importing this package registers
every converter (each module below covers one group of ops).
"""

import onnx.defs

_CONVERTERS = {}          # (domain, op type) -> converter; "" is the default ai.onnx domain
_SCHEMAS = {}             # (domain, op type) -> onnx.defs.OpSchema, for the other domains
CONTRIB = "com.microsoft"     # ONNX Runtime's contrib ops (its quantizer's QOperator format)


def _domain(domain):
    return "" if domain in ("", "ai.onnx") else domain


def converter(*op_types, domain="", schema=None):
    """Decorator registering a function as the converter of ``op_types`` in ``domain``. An op
    of a domain ONNX does not define (``CONTRIB``) brings its ``schema``, an
    ``onnx.defs.OpSchema`` that the importer checks nodes against as it does ONNX's."""
    def register(fn):
        for op_type in op_types:
            key = (_domain(domain), op_type)
            if key in _CONVERTERS:
                raise ValueError(f"ONNX op {op_type} already has a converter")
            _CONVERTERS[key] = fn
            if schema is not None:
                _SCHEMAS[key] = schema
        return fn
    return register


_Param = onnx.defs.OpSchema.FormalParameter
_Attr = onnx.defs.OpSchema.Attribute
_OPTIONAL = onnx.defs.OpSchema.FormalParameterOption.Optional
_VARIADIC = onnx.defs.OpSchema.FormalParameterOption.Variadic
_TYPES = {name: getattr(onnx.defs.OpSchema.AttrType, name)
          for name in ("INT", "INTS", "FLOAT", "FLOATS", "STRING", "STRINGS")}
QUANTIZED_TYPES = ("uint8", "int8", "int32", "float", "bool")   # the quantizer's tensors
FLOAT_TYPES = ("float", "float16", "double", "bfloat16")


def contrib(op_type, inputs, outputs=("Y",), attributes=(), types=QUANTIZED_TYPES,
            domain=CONTRIB):
    """The ``converter`` decorator of the op ``op_type`` of ``domain``, with its schema:
    ``inputs`` and ``outputs`` are names, a trailing ``?`` marking an optional one and ``*`` a
    variadic one, each of one of the ONNX tensor ``types``; ``attributes`` (name, type name,
    required)."""
    def params(names):
        found = []
        for name in names:
            option = {"?": _OPTIONAL, "*": _VARIADIC}.get(name[-1])
            found.append(_Param(name.rstrip("?*"), f"T{len(found)}", "", param_option=option)
                         if option else _Param(name, f"T{len(found)}", ""))
        return found

    all_inputs, all_outputs = params(inputs), params(outputs)
    constraints = [(f"T{i}", [f"tensor({t})" for t in types], "")
                   for i in range(max(len(all_inputs), len(all_outputs)))]
    schema = onnx.defs.OpSchema(
        op_type, domain, 1, inputs=all_inputs, outputs=all_outputs,
        type_constraints=constraints,
        attributes=[_Attr(name, _TYPES[kind], "", required=required)
                    for name, kind, required in attributes])
    return converter(op_type, domain=domain, schema=schema)


def find(op_type, domain=""):
    """The converter of ``op_type`` in ``domain``, or None."""
    return _CONVERTERS.get((_domain(domain), op_type))


def contrib_schema(op_type, domain):
    """The schema of an op of a domain ONNX does not define, or None."""
    return _SCHEMAS.get((_domain(domain), op_type))


def supported():
    """The op types that have a converter: ai.onnx's by name, the others' as
    ``domain.name``."""
    return sorted(f"{domain}.{op}" if domain else op for domain, op in _CONVERTERS)


from myelin.importers.onnx.converters import (  # noqa: E402,F401
    activations, array, control, dynamic, einsum, image, indexing, losses, math, nn, qoperator,
    quantize, recurrent, reduce, resize, roi, sampling, scan, sequence, transformer, windows)
