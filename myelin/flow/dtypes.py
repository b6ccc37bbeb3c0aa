"""Element types of flow variables: SLING's type names and their NumPy equivalents.

NumPy has no bfloat16; ``ml_dtypes`` (the type JAX, ONNX and TensorFlow share) gives it one,
imported the first time a bfloat16 array is made or read."""

import numpy as np

from myelin.errors import ShapeError

# Canonical type names, in the order of TensorFlow's numbering that SLING follows.
# name -> (NumPy dtype or None when NumPy has no equivalent, element size in bytes)
_TYPES = {
    "float32": (np.float32, 4),
    "float64": (np.float64, 8),
    "int32": (np.int32, 4),
    "uint8": (np.uint8, 1),
    "int16": (np.int16, 2),
    "int8": (np.int8, 1),
    "string": (None, 8),
    "complex64": (np.complex64, 8),
    "int64": (np.int64, 8),
    "bool": (np.bool_, 1),
    "qint8": (None, 1),
    "quint8": (None, 1),
    "qint32": (None, 4),
    "bfloat16": ("bfloat16", 2),  # ml_dtypes.bfloat16 (see _numpy_type)
    "qint16": (None, 2),
    "uint16": (np.uint16, 2),
    "quint16": (None, 2),
    "complex128": (np.complex128, 16),
    "float16": (np.float16, 2),
    "resource": (None, 1),
    "uint32": (np.uint32, 4),
    "uint64": (np.uint64, 8),
    "function": (None, 8),        # a function value (myelin.ops.control), not a tensor
    "tuple": (None, 8),           # a tuple of values (myelin.ops.control), not a tensor
}

# The types NumPy gets from ml_dtypes.
_ML_DTYPES = frozenset(name for name, (np_type, _) in _TYPES.items() if isinstance(np_type, str))

# Names accepted when reading, mapped to canonical names.
_ALIASES = {"float": "float32", "double": "float64", "int": "int32"}

DT_FLOAT32 = "float32"
DT_FLOAT64 = "float64"
DT_FLOAT16 = "float16"
DT_INT8 = "int8"
DT_UINT8 = "uint8"
DT_INT16 = "int16"
DT_UINT16 = "uint16"
DT_INT32 = "int32"
DT_INT64 = "int64"
DT_BOOL = "bool"
DT_STRING = "string"
DT_RESOURCE = "resource"
DT_INT = DT_INT32
DT_FLOAT = DT_FLOAT32
DT_DOUBLE = DT_FLOAT64

DT_BFLOAT16 = "bfloat16"

FLOAT_TYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
# Floats narrower than float32, computed in float32 registers and rounded where stored.
REDUCED_FLOAT_TYPES = frozenset({"float16", "bfloat16"})
INTEGER_TYPES = frozenset({"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"})


def known(name):
    """True if ``name`` is a type name (canonical or alias)."""
    return name in _TYPES or name in _ALIASES


def canonical(name):
    """The canonical spelling of a type name; raises ShapeError for an unknown one."""
    if name in _TYPES:
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    raise ShapeError(f"unknown data type {name!r}")


def itemsize(name):
    """Bytes per element of a type."""
    return _TYPES[canonical(name)][1]


def _numpy_type(np_type):
    """The NumPy type of a ``_TYPES`` entry: a name stands for ml_dtypes' type of that name."""
    if isinstance(np_type, str):
        import ml_dtypes
        return getattr(ml_dtypes, np_type)
    return np_type


def to_numpy(name):
    """The NumPy dtype of a type; raises ShapeError if NumPy has no equivalent."""
    np_type = _TYPES[canonical(name)][0]
    if np_type is None:
        raise ShapeError(f"data type {name!r} has no NumPy equivalent")
    return np.dtype(_numpy_type(np_type))


def from_numpy(dtype):
    """The type name of a NumPy dtype; raises ShapeError for one myelin does not know."""
    dtype = np.dtype(dtype)
    for name, (np_type, _) in _TYPES.items():
        if isinstance(np_type, str):
            if dtype.name == np_type:       # (ml_dtypes' own, without importing it)
                return name
        elif np_type is not None and np.dtype(np_type) == dtype:
            return name
    raise ShapeError(f"NumPy dtype {dtype} has no myelin type")


def code(dtype):
    """A NumPy dtype as a string that :func:`from_code` reads back: its ``str`` (byte order,
    kind and size), or for ml_dtypes' types, whose ``str`` is only their size ("<V2"), their
    name."""
    dtype = np.dtype(dtype)
    return dtype.name if dtype.kind == "V" and dtype.name in _ML_DTYPES else dtype.str


def from_code(text):
    """The NumPy dtype of a :func:`code`."""
    return to_numpy(text) if text in _ML_DTYPES else np.dtype(text)


def is_float(name):
    return canonical(name) in FLOAT_TYPES


def is_integer(name):
    return canonical(name) in INTEGER_TYPES
