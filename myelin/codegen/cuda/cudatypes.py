"""Data types in CUDA C: how each myelin dtype is stored, computed, loaded, stored and written
as a literal.

Values are computed in a *compute type*: float16 (stored as ``__half``) in float, bool (stored
as one byte) as ``bool``, the others as themselves, as on the CPU. The fixed-width integer
names and ``__half`` come from the support header (:mod:`myelin.codegen.cuda.support`).
"""

import math

import numpy as np

from myelin.errors import UnsupportedTypeError

_STORAGE = {
    "float16": "__half", "float32": "float", "float64": "double",
    "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
    "bool": "uint8_t",
}
_COMPUTE = dict(_STORAGE, float16="float", bool="bool")
DTYPES = tuple(_STORAGE)
FLOATS = frozenset({"float16", "float32", "float64"})
SIGNED = frozenset({"int8", "int16", "int32", "int64"})
UNSIGNED = frozenset({"uint8", "uint16", "uint32", "uint64"})


def check(dtype):
    """Raise UnsupportedTypeError unless the GPU back end computes with ``dtype``."""
    if dtype not in _STORAGE:
        raise UnsupportedTypeError(f"data type {dtype} is not supported by the CUDA back end")


def supported(dtype):
    return dtype in _STORAGE


def storage(dtype):
    """The C type of one element of ``dtype`` in memory."""
    check(dtype)
    return _STORAGE[dtype]


def compute(dtype):
    """The C type a ``dtype`` value has in registers."""
    check(dtype)
    return _COMPUTE[dtype]


def is_float(dtype):
    return dtype in FLOATS


def unsigned_of(dtype):
    """The unsigned C type of a signed integer dtype's width (for wrapping arithmetic)."""
    return storage("u" + dtype) if dtype in SIGNED else compute(dtype)


def load(dtype, element):
    """The compute-type value of the stored element expression ``element``."""
    if dtype == "float16":
        return f"__half2float({element})"
    if dtype == "bool":
        return f"({element} != 0)"
    return element


def store(dtype, value):
    """The storage-type value of the compute-type expression ``value``."""
    if dtype == "float16":
        return f"__float2half_rn({value})"
    if dtype == "bool":
        return f"(uint8_t)({value})"
    return value


def literal(value, dtype):
    """A C expression of compute type of ``dtype`` for the Python number ``value``, exact
    (floats in hexadecimal, infinities and NaN by their bits)."""
    if dtype == "bool":
        return "true" if value else "false"
    if is_float(dtype):
        single = dtype != "float64"
        value = float(np.float32(value)) if single else float(value)
        if math.isnan(value):
            return "__int_as_float(0x7fc00000)" if single else \
                "__longlong_as_double(0x7ff8000000000000LL)"
        if math.isinf(value):
            sign = "-" if value < 0 else ""
            return (f"{sign}__int_as_float(0x7f800000)" if single else
                    f"{sign}__longlong_as_double(0x7ff0000000000000LL)")
        return f"{value.hex()}{'f' if single else ''}"
    value = int(value)
    info = np.iinfo(dtype)
    if dtype in UNSIGNED:
        value %= 1 << info.bits          # -1: all bits set
    elif not info.min <= value <= info.max:
        raise ValueError(f"{value} is out of the range of {dtype}")
    if dtype == "int64" and value == info.min:
        return "((int64_t)(-9223372036854775807LL - 1))"
    suffix = {"int64": "LL", "uint64": "ULL", "uint32": "U"}.get(dtype, "")
    return f"(({_COMPUTE[dtype]}){value}{suffix})"
