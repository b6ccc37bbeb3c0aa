"""Helpers shared by the op definitions: error messages, type domains, constant inputs, axes,
generic gradient rules.

Every check raises :class:`~myelin.errors.ShapeError` with a message that starts with the op's
name and type (``op f/Add (Add): ...``), like :func:`myelin.ops.registry.broadcast_shapes`.
"""

import dataclasses

import numpy as np

from myelin.errors import ShapeError, UnsupportedOpError
from myelin.flow import dtypes


def error(op, message):
    """A ShapeError about ``op`` whose message starts with the op's name and type."""
    return ShapeError(f"op {op.name} ({op.type}): {message}")


@dataclasses.dataclass(frozen=True)
class Domain:
    """A named set of element types an op accepts (``types`` None: every type)."""

    name: str
    types: frozenset | None

    def __contains__(self, dtype):
        return self.types is None or dtype in self.types


FLOAT = Domain("a float type", dtypes.FLOAT_TYPES)
INTEGER = Domain("an integer type", dtypes.INTEGER_TYPES)
NUMERIC = Domain("a numeric type", dtypes.FLOAT_TYPES | dtypes.INTEGER_TYPES)
BOOL = Domain("bool", frozenset({"bool"}))
NUMERIC_OR_BOOL = Domain("a numeric type or bool", NUMERIC.types | BOOL.types)
INDEX = Domain("int32 or int64", frozenset({"int32", "int64"}))
ANY = Domain("any type", None)


def check_dtype(op, var, domain):
    """Raise unless the element type of ``var`` is in ``domain``."""
    if var.dtype not in domain:
        raise error(op, f"input {var.name} is {var.type_string()}, but the op needs "
                        f"{domain.name}")


def common_dtype(op, variables, domain=ANY):
    """The element type shared by ``variables`` (checked against ``domain``)."""
    first = variables[0]
    for var in variables[1:]:
        if var.dtype != first.dtype:
            listed = " and ".join(v.type_string() for v in variables)
            raise error(op, f"inputs {listed} must have the same type")
    check_dtype(op, first, domain)
    return first.dtype


def constant_ints(op, index, what):
    """The values of constant integer input ``index`` as a list, or None if it is not constant."""
    var = op.inputs[index]
    if var.dtype not in INTEGER:
        raise error(op, f"{what} input {var.name} is {var.type_string()}, not an integer tensor")
    if var.data is None:
        return None
    return [int(v) for v in np.asarray(var.data).reshape(-1)]


def constant_int(op, index, what):
    """The value of the constant integer scalar input ``index`` (required to be constant)."""
    values = constant_ints(op, index, what)
    if values is None or len(values) != 1:
        var = op.inputs[index]
        raise error(op, f"{what} input {var.name} must be a constant integer scalar")
    return values[0]


def runtime_ints(array):
    """The values of an integer array given at run time as a list of Python ints."""
    return [int(v) for v in np.asarray(array).reshape(-1)]


def normalize_axis(op, axis, rank):
    """``axis`` in [0, rank) (negative counts from the end); raises if out of range."""
    if not -rank <= axis < rank:
        raise error(op, f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def shape_fits(actual, declared):
    """True if shape ``actual`` matches ``declared``, where -1 in ``declared`` matches any size."""
    return len(actual) == len(declared) and all(d in (-1, a) for a, d in zip(actual, declared))


def elementwise_gradient(*terms):
    """The gradient rule (see :mod:`myelin.autodiff.context`) of an op whose input ``i`` gets
    the term ``terms[i](b, g, dy)`` (None: no gradient), of any shape broadcasting with it."""
    def rule(g):
        for index, term in enumerate(terms):
            if term is not None and g.needs(index):
                g.add(index, term(g.b, g, g.dy))
    return rule


def no_gradient(g):
    """The gradient rule of an op whose gradient is zero (where it exists): no terms."""


def gradient_error(op, why):
    """An UnsupportedOpError saying that ``op`` has no gradient ``why``."""
    return UnsupportedOpError(f"op {op.name} ({op.type}): no gradient {why}", [op.name])


def scatter_add(g, dtype, shape, positions, updates):
    """Zeros of ``dtype`` and ``shape`` with ``updates`` added at the index tuples
    ``positions`` (ScatterND; the gradient of a gather), in the gradient function of ``g``."""
    return g.b.op("ScatterND", [g.zeros(dtype, shape), positions, updates],
                  attrs={"reduction": "add"})
