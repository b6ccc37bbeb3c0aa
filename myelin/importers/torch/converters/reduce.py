"""Reductions: sums, means, extrema (with their indices), products, variances, norms,
``any``/``all``, arg-extrema, running sums and products, top-k and sort.

A reduction computes in the type of its result (PyTorch sums bools and small integers as
int64, ``dtype=`` picks another), its ``dim`` (an int, a list, or none or [] for every axis)
and ``keepdim`` as PyTorch gives them.
"""

import math

from myelin.importers.torch.converters import converter
from myelin.importers.torch.converters.conv import used


def _dims(ctx, x, name="dim"):
    return ctx.axes(ctx.args.get(name), x.rank)


def _reduce(ctx, op_type, x, axes, keepdim):
    if x.rank == 0:
        return x
    return ctx.op(op_type, [x], {"axis": axes, "keepdims": bool(keepdim)})


@converter("aten.sum")
def _sum(ctx):
    x = ctx.tensor("self")
    return _reduce(ctx, "Sum", ctx.cast(x, ctx.out_dtype), _dims(ctx, x), ctx.get("keepdim"))


@converter("aten.mean")
def _mean(ctx):
    x = ctx.tensor("self")
    return _reduce(ctx, "Mean", ctx.cast(x, ctx.out_dtype), _dims(ctx, x), ctx.get("keepdim"))


@converter("aten.prod")
def _prod(ctx):
    x = ctx.tensor("self")
    return _reduce(ctx, "Product", ctx.cast(x, ctx.out_dtype), _dims(ctx, x),
                   ctx.get("keepdim"))


def _extremum(op_type, logical):
    def convert(ctx):
        x = ctx.tensor("self")
        if x.dtype == "bool":
            return _reduce(ctx, logical, x, _dims(ctx, x), ctx.get("keepdim"))
        return _reduce(ctx, op_type, x, _dims(ctx, x), ctx.get("keepdim"))
    return convert


converter("aten.amax")(_extremum("Max", "Any"))
converter("aten.amin")(_extremum("Min", "All"))


def _with_index(op_type, arg_type, logical, binary):
    """max/min over all values, along ``dim`` with the index of the first extremum, or of
    two tensors (``other``)."""
    def convert(ctx):
        if "other" in ctx.args:
            dtype = ctx.out_dtype
            return ctx.op(binary, [ctx.operand(ctx["self"], dtype),
                                   ctx.operand(ctx["other"], dtype)])
        x = ctx.tensor("self")
        dim = ctx.args.get("dim")
        reduce_type = logical if x.dtype == "bool" else op_type
        if dim is None:
            return _reduce(ctx, reduce_type, x, list(range(x.rank)), False)
        axis = ctx.axis(dim, x.rank)
        keepdim = bool(ctx.get("keepdim"))
        values = _reduce(ctx, reduce_type, x, [axis], keepdim)
        if not used(ctx, 1):
            return [values, None]
        source = ctx.cast(x, "int32") if x.dtype == "bool" else x
        indices = ctx.op(arg_type, [source], {"axis": axis, "keepdims": keepdim,
                                              "dtype": "int64"}) \
            if x.rank else ctx.scalar(0, "int64")
        return [values, indices]
    return convert


converter("aten.max")(_with_index("Max", "ArgMax", "Any", "Maximum"))
converter("aten.min")(_with_index("Min", "ArgMin", "All", "Minimum"))


def _arg(op_type):
    def convert(ctx):
        x = ctx.tensor("self")
        source = ctx.cast(x, "int32") if x.dtype == "bool" else x
        dim = ctx.args.get("dim")
        if x.rank == 0:
            return ctx.scalar(0, "int64")
        if dim is None:
            flat = ctx.reshape(source, (x.elements,))
            result = ctx.op(op_type, [flat], {"axis": 0, "dtype": "int64"})
            return ctx.reshape(result, (1,) * x.rank) if ctx.get("keepdim") else result
        return ctx.op(op_type, [source], {"axis": ctx.axis(dim, x.rank),
                                          "keepdims": bool(ctx.get("keepdim")),
                                          "dtype": "int64"})
    return convert


converter("aten.argmax")(_arg("ArgMax"))
converter("aten.argmin")(_arg("ArgMin"))


def _truth(ctx, x):
    if x.dtype == "bool":
        return x
    return ctx.op("NotEqual", [x, ctx.scalar(0, x.dtype)])


@converter("aten.any")
def _any(ctx):
    x = ctx.tensor("self")
    return ctx.cast(_reduce(ctx, "Any", _truth(ctx, x), _dims(ctx, x), ctx.get("keepdim")),
                    ctx.out_dtype)


@converter("aten.all")
def _all(ctx):
    x = ctx.tensor("self")
    return ctx.cast(_reduce(ctx, "All", _truth(ctx, x), _dims(ctx, x), ctx.get("keepdim")),
                    ctx.out_dtype)


def _variance(ctx, x, axes, correction, keepdim):
    """The variance over ``axes`` with ``correction`` (1: unbiased) and the mean."""
    mean = ctx.op("Mean", [x], {"axis": axes, "keepdims": True})
    total = ctx.op("Sum", [ctx.op("Square", [ctx.op("Sub", [x, mean])])],
                   {"axis": axes, "keepdims": bool(keepdim)})
    count = math.prod(x.shape[a] for a in axes)
    divisor = max(count - correction, 0)
    scale = 1.0 / divisor if divisor else math.nan
    variance = ctx.op("Mul", [total, ctx.scalar(scale, x.dtype)])
    return variance, mean if keepdim else ctx.reshape(mean, variance.shape)


def _correction(ctx):
    if "correction" in ctx.args and ctx.args["correction"] is not None:
        return float(ctx.args["correction"])
    return 1.0 if ctx.args.get("unbiased", True) else 0.0


@converter("aten.var")
def _var(ctx):
    x = ctx.float_of(ctx.tensor("self"))
    variance, _ = _variance(ctx, x, _dims(ctx, x), _correction(ctx), ctx.get("keepdim"))
    return variance


@converter("aten.var_mean")
def _var_mean(ctx):
    x = ctx.float_of(ctx.tensor("self"))
    return list(_variance(ctx, x, _dims(ctx, x), _correction(ctx), ctx.get("keepdim")))


@converter("aten.std")
def _std(ctx):
    return ctx.op("Sqrt", [_var(ctx)])


@converter("aten.linalg_vector_norm", "aten.norm")
def _vector_norm(ctx):
    """The p-norm over ``dim``: sum of |x|^p to the 1/p (max |x| for inf, min for -inf, the
    count of nonzeros for 0)."""
    x = ctx.tensor("self")
    x = ctx.cast(x, ctx.out_dtype)
    order = ctx.args.get("ord", ctx.args.get("p", 2))
    order = 2 if order is None else float(order)
    axes, keepdim = _dims(ctx, x), ctx.get("keepdim")
    magnitude = ctx.op("Abs", [x])
    if order == math.inf:
        return _reduce(ctx, "Max", magnitude, axes, keepdim)
    if order == -math.inf:
        return _reduce(ctx, "Min", magnitude, axes, keepdim)
    if order == 0:
        return _reduce(ctx, "Sum", ctx.cast(_truth(ctx, x), x.dtype), axes, keepdim)
    if order == 1:
        return _reduce(ctx, "Sum", magnitude, axes, keepdim)
    if order == 2:
        return ctx.op("Sqrt", [_reduce(ctx, "Sum", ctx.op("Square", [x]), axes, keepdim)])
    powered = ctx.op("Pow", [magnitude, ctx.scalar(order, x.dtype)])
    return ctx.op("Pow", [_reduce(ctx, "Sum", powered, axes, keepdim),
                          ctx.scalar(1 / order, x.dtype)])


@converter("aten.logsumexp")
def _logsumexp(ctx):
    x = ctx.float_of(ctx.tensor("self"))
    axes, keepdim = _dims(ctx, x), ctx.get("keepdim")
    peak = ctx.op("Max", [x], {"axis": axes, "keepdims": True})
    infinite = ctx.op("IsInf", [peak])
    shift = ctx.op("Cond", [infinite, ctx.scalar(0, x.dtype), peak])
    total = _reduce(ctx, "Sum", ctx.op("Exp", [ctx.op("Sub", [x, shift])]), axes, keepdim)
    return ctx.op("Add", [ctx.op("Log", [total]), ctx.reshape(shift, total.shape)])


# Running sums, top-k and sort.
def _cumulative(op_type):
    def convert(ctx):
        x = ctx.cast(ctx.tensor("self"), ctx.out_dtype)
        if x.rank == 0:
            return x
        return ctx.op(op_type, [x], {"axis": ctx.axis(ctx["dim"], x.rank)})
    return convert


converter("aten.cumsum")(_cumulative("CumSum"))
converter("aten.cumprod")(_cumulative("CumProd"))


@converter("aten.topk")
def _topk(ctx):
    x = ctx.tensor("self")
    if x.rank == 0:
        return [x, ctx.scalar(0, "int64")]
    axis = ctx.axis(ctx.get("dim", -1), x.rank)
    values, indices = ctx.op("TopK", [x], {"k": int(ctx["k"]), "axis": axis,
                                           "largest": bool(ctx.get("largest", True))},
                             outputs=2)
    return [values, indices]


@converter("aten.sort")
def _sort(ctx):
    """A stable sort: TopK of every element (the lower index first on ties, NaN above every
    number, as PyTorch sorts)."""
    x = ctx.tensor("self")
    if x.rank == 0:
        return [x, ctx.scalar(0, "int64")]
    axis = ctx.axis(ctx.get("dim", -1), x.rank)
    if x.shape[axis] <= 1:
        return [x, ctx.broadcast(ctx.scalar(0, "int64"), x.shape)]
    values, indices = ctx.op("TopK", [x], {"k": x.shape[axis], "axis": axis,
                                           "largest": bool(ctx.get("descending", False))},
                             outputs=2)
    return [values, indices]


@converter("aten.count_nonzero")
def _count_nonzero(ctx):
    x = ctx.tensor("self")
    ones = ctx.cast(_truth(ctx, x), "int64")
    return _reduce(ctx, "Sum", ones, _dims(ctx, x), False)
