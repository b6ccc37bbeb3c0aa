"""Reductions: Sum, Product, Max, Min, All, Any, Count, Mean, and ArgMax/ArgMin.

Attribute ``axis`` is an int or a list of ints (``"1"``, ``"[0,2]"``; negative axes count from
the end); without it the op reduces over every axis. ``keepdims`` (default false) keeps reduced
axes as size 1. ``Count`` counts true values of a bool tensor; its output type is attribute
``dtype`` (default float32). ``Mean`` is float only.

Over no elements (an empty axis) a reduction gives its :func:`identity`, as ONNX (opset 18)
says: 0 for Sum, 1 for Product, the least value of the type for Max (-inf for floats) and the
greatest for Min; Mean gives NaN (0 / 0). Max and Min propagate NaN, as NumPy.

``ArgMax``/``ArgMin`` return int32 indices (attribute ``dtype``: int32 or int64), the first one
on ties (the last with ``select_last_index``, as ONNX); a NaN counts as the extremum, as in
NumPy. Without ``axis`` they index the flattened input and return a scalar (as SLING); with
``axis`` (a single int) they reduce that axis, honouring ``keepdims`` (ONNX's defaults, axis 0
and keepdims 1, are set by the importer). Over an empty axis there is no index to give: a
ShapeError (ONNX Runtime fails at run time).
"""

import math

import numpy as np

from myelin.flow import dtypes
from myelin.ops.common import BOOL, FLOAT, NUMERIC, check_dtype, error, normalize_axis
from myelin.ops.registry import Kind, OpDef, TensorType, attribute, register

_ATTRS = {"axis": None, "keepdims": False}


def reduced_axes(op, rank):
    """The sorted axes ``op`` reduces over, from its ``axis`` attribute (all when absent)."""
    axes = op.attrs.get_ints("axis")
    if axes is None:
        return tuple(range(rank))
    normalized = sorted(normalize_axis(op, a, rank) for a in axes)
    if len(set(normalized)) != len(normalized):
        raise error(op, f"axis {axes} names an axis twice")
    return tuple(normalized)


# The element-wise op that combines two partial results of each reduction.
FOLDS = {"Sum": "Add", "Mean": "Add", "Count": "Add", "Product": "Mul", "Max": "Maximum",
         "Min": "Minimum", "All": "And", "Any": "Or"}


def identity(op_type, dtype):
    """The value reduction ``op_type`` starts from, which it gives over no elements (Mean
    divides it by a count of 0)."""
    if op_type in ("Product", "All"):
        return 1
    if op_type in ("Sum", "Mean", "Count", "Any"):
        return 0
    if dtypes.is_float(dtype):
        return -math.inf if op_type == "Max" else math.inf
    info = np.iinfo(dtypes.to_numpy(dtype))
    return int(info.min if op_type == "Max" else info.max)


def mean_scale(count):
    """What Mean multiplies the sum of ``count`` elements by: 1 / count (NaN for none, as
    0 / 0)."""
    return 1.0 / count if count else math.nan


def reduced_shape(shape, axes, keepdims):
    """``shape`` with ``axes`` removed, or set to 1 if ``keepdims``."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduction_infer(domain, out_dtype):
    def infer(op):
        x = op.inputs[0]
        check_dtype(op, x, domain)
        axes = reduced_axes(op, x.rank)
        return [TensorType(out_dtype(op, x.dtype),
                           reduced_shape(x.shape, axes, attribute(op, "keepdims")))]
    return infer


def _reduction_reference(fn):
    def reference(op, inputs):
        x = inputs[0]
        axes, keepdims = reduced_axes(op, x.ndim), attribute(op, "keepdims")
        if op.type in ("Max", "Min"):
            return [fn(x, axis=axes, keepdims=keepdims, initial=identity(op.type, str(x.dtype)))]
        if op.type == "Mean":
            count = math.prod(x.shape[a] for a in axes)
            return [np.sum(x, axis=axes, keepdims=keepdims) * mean_scale(count)]
        return [fn(x, axis=axes, keepdims=keepdims)]
    return reference


def _count_dtype(op, _):
    target = attribute(op, "dtype")
    if not dtypes.known(target):
        raise error(op, f"attribute dtype={target!r} is not a data type")
    return dtypes.canonical(target)


def _same_dtype(op, dtype):
    return dtype


def _arg_axis(op, rank):
    """The single axis of an ArgMax/ArgMin, or None to index the flattened input."""
    axes = op.attrs.get_ints("axis")
    if axes is None:
        return None
    if len(axes) != 1:
        raise error(op, f"axis {axes} must be a single axis")
    return normalize_axis(op, axes[0], rank)


def _arg_infer(op):
    x = op.inputs[0]
    check_dtype(op, x, NUMERIC)
    axis = _arg_axis(op, x.rank)
    axes = tuple(range(x.rank)) if axis is None else (axis,)
    dtype = attribute(op, "dtype")
    if dtype not in ("int32", "int64"):
        raise error(op, f"attribute dtype={dtype!r} must be int32 or int64")
    shape = reduced_shape(x.shape, axes, attribute(op, "keepdims"))
    if 0 not in shape and any(x.shape[a] == 0 for a in axes):
        raise error(op, f"{x.type_string()} {x.name} is empty along axis "
                        f"{axis if axis is not None else list(axes)}: no index to give")
    return [TensorType(dtype, shape)]


def _arg_reference(fn):
    def reference(op, inputs):
        x = inputs[0]
        keepdims = attribute(op, "keepdims")
        axis = _arg_axis(op, x.ndim)
        dtype = attribute(op, "dtype")
        if x.size == 0:      # an empty result (over an empty axis, the shape rule refuses)
            axes = tuple(range(x.ndim)) if axis is None else (axis,)
            return [np.zeros(reduced_shape(x.shape, axes, keepdims), dtype)]
        if axis is None:
            if attribute(op, "select_last_index"):
                index = np.asarray(x.size - 1 - fn(x.reshape(-1)[::-1]))
            else:
                index = np.asarray(fn(x))
            return [(index.reshape((1,) * x.ndim) if keepdims else index).astype(dtype)]
        if attribute(op, "select_last_index"):
            index = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis, keepdims=keepdims)
        else:
            index = fn(x, axis=axis, keepdims=keepdims)
        return [index.astype(dtype)]
    return reference


# Gradients (see myelin.autodiff.context): the adjoint of the reduced output, in the input's
# rank with size 1 on the reduced axes, broadcasts back over the input.
def _kept(g, value):
    """``value`` (of the op's output shape) reshaped to the input's rank (keepdims)."""
    x = g.op.inputs[0]
    shape = list(reduced_shape(x.shape, reduced_axes(g.op, x.rank), True))
    return value if list(value.shape) == shape else g.b.reshape(value, shape)


def _sum_gradient(g):
    g.add(0, _kept(g, g.dy))


def _mean_gradient(g):
    x = g.op.inputs[0]
    count = int(np.prod([x.shape[a] for a in reduced_axes(g.op, x.rank)]))
    g.add(0, g.b.mul(_kept(g, g.dy), 1.0 / count))


def _extremum_gradient(g):
    """Max and Min: the adjoint is shared evenly by the elements equal to the extremum."""
    b, x = g.b, g.op.inputs[0]
    hit = b.cast(b.equal(g.x, _kept(g, g.y)), x.dtype)
    count = b.sum(hit, list(reduced_axes(g.op, x.rank)), keepdims=True)
    g.add(0, b.mul(_kept(g, g.dy), b.div(hit, count)))


_GRADIENTS = {"Sum": _sum_gradient, "Mean": _mean_gradient, "Max": _extremum_gradient,
              "Min": _extremum_gradient}

# (op type, NumPy reduction, accepted types, output type rule, extra attrs, doc)
_REDUCTIONS = [
    ("Sum", np.sum, NUMERIC, _same_dtype, {}, "sum over axes"),
    ("Product", np.prod, NUMERIC, _same_dtype, {}, "product over axes"),
    ("Max", np.max, NUMERIC, _same_dtype, {}, "maximum over axes"),
    ("Min", np.min, NUMERIC, _same_dtype, {}, "minimum over axes"),
    ("Mean", np.mean, FLOAT, _same_dtype, {}, "arithmetic mean over axes"),
    ("All", np.all, BOOL, _same_dtype, {}, "true if all values over axes are true"),
    ("Any", np.any, BOOL, _same_dtype, {}, "true if any value over axes is true"),
    ("Count", np.count_nonzero, BOOL, _count_dtype, {"dtype": "float32"},
     "number of true values over axes, as attribute dtype"),
]


def _define_all():
    for optype, fn, domain, out_dtype, attrs, doc in _REDUCTIONS:
        register(OpDef(optype, Kind.REDUCTION, _reduction_infer(domain, out_dtype),
                       _reduction_reference(fn), attrs={**_ATTRS, **attrs}, doc=doc,
                       gradient=_GRADIENTS.get(optype)))
    arg_attrs = {**_ATTRS, "select_last_index": False, "dtype": "int32"}
    register(OpDef("ArgMax", Kind.REDUCTION, _arg_infer, _arg_reference(np.argmax),
                   attrs=dict(arg_attrs), helper="argmax",
                   doc="int32 (or int64) index of the maximum (first on ties, or last)"))
    register(OpDef("ArgMin", Kind.REDUCTION, _arg_infer, _arg_reference(np.argmin),
                   attrs=dict(arg_attrs), helper="argmin",
                   doc="int32 (or int64) index of the minimum (first on ties, or last)"))


_define_all()
