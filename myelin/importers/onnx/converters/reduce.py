"""ONNX reductions: Reduce* (axes as attribute or input, by opset), ArgMax/ArgMin, and the
reductions ONNX defines by formula (L1, L2, LogSum, LogSumExp, SumSquare)."""

from myelin.flow import dtypes
from myelin.importers.onnx.converters import converter

# Opset from which each reduction reads its axes from input 1 instead of an attribute.
_AXES_INPUT_SINCE = {"ReduceSum": 13}
_DEFAULT_AXES_INPUT_SINCE = 18


def _axes(ctx, x):
    """The node's reduced axes: from input 1 or the attribute (by opset); all axes when none
    are given, or None (no reduction) with ``noop_with_empty_axes``."""
    if ctx.opset >= _AXES_INPUT_SINCE.get(ctx.op_type, _DEFAULT_AXES_INPUT_SINCE):
        axes = ctx.ints(1) if ctx.has(1) else None
    else:
        axes = ctx.attr("axes", None)
    if not axes:
        return None if ctx.attr("noop_with_empty_axes", 0) else list(range(x.rank))
    return [ctx.axis(a, x.rank) for a in axes]


def _reduced(ctx, op_type, x, keepdims=None):
    """``op_type`` over the node's axes; keepdims defaults to the node's (true in ONNX)."""
    axes = _axes(ctx, x)
    if axes is None:
        return x
    keepdims = bool(ctx.attr("keepdims", 1)) if keepdims is None else keepdims
    return ctx.op(op_type, [x], {"axis": axes, "keepdims": keepdims})


# On bool tensors, Max and Min are Any and All.
_BOOL_REDUCTIONS = {"Max": "Any", "Min": "All"}


def _simple(op_type):
    def convert(ctx):
        x = ctx.input(0)
        if x.dtype == "bool" and op_type in _BOOL_REDUCTIONS:
            return _reduced(ctx, _BOOL_REDUCTIONS[op_type], x)
        axes = _axes(ctx, x)
        if op_type == "Mean" and axes and 0 in [x.shape[a] for a in axes]:
            # ONNX leaves the mean of no values undefined; ONNX Runtime gives 0 (myelin's
            # Mean gives NaN, as NumPy's).
            return _reduced(ctx, "Sum", x)
        if op_type == "Mean" and not dtypes.is_float(x.dtype):
            return ctx.cast(_reduced(ctx, op_type, ctx.cast(x, "float64")), x.dtype)
        return _reduced(ctx, op_type, x)
    return convert


for _onnx_type, _myelin_type in [("ReduceSum", "Sum"), ("ReduceMean", "Mean"),
                                 ("ReduceMax", "Max"), ("ReduceMin", "Min"),
                                 ("ReduceProd", "Product")]:
    converter(_onnx_type)(_simple(_myelin_type))


@converter("ReduceL1")
def _l1(ctx):
    return _reduced(ctx, "Sum", ctx.op("Abs", [ctx.input(0)]))


@converter("ReduceL2")
def _l2(ctx):
    x = ctx.input(0)
    total = _reduced(ctx, "Sum", ctx.op("Square", [x]))
    if dtypes.is_float(x.dtype):
        return ctx.op("Sqrt", [total])
    return ctx.cast(ctx.op("Sqrt", [ctx.cast(total, "float64")]), x.dtype)


@converter("ReduceSumSquare")
def _sum_square(ctx):
    return _reduced(ctx, "Sum", ctx.op("Square", [ctx.input(0)]))


@converter("ReduceLogSum")
def _log_sum(ctx):
    return ctx.op("Log", [_reduced(ctx, "Sum", ctx.input(0))])


@converter("ReduceLogSumExp")
def _log_sum_exp(ctx):
    """log(sum(exp(x - max))) + max, which does not overflow (an infinite max shifts by 0)."""
    x = ctx.input(0)
    peak = _reduced(ctx, "Max", x, keepdims=True)
    if peak is x:
        return x
    infinite = ctx.op("Equal", [ctx.op("Abs", [peak]), ctx.const(float("inf"), x.dtype)])
    shift = ctx.op("Cond", [infinite, ctx.const(0, x.dtype), peak])
    total = _reduced(ctx, "Sum", ctx.op("Exp", [ctx.op("Sub", [x, shift])]))
    return ctx.op("Add", [ctx.op("Log", [total]), ctx.reshape(shift, total.shape)])


def _arg(op_type):
    def convert(ctx):
        x = ctx.input(0)
        attrs = {"axis": ctx.attr("axis", 0), "keepdims": bool(ctx.attr("keepdims", 1)),
                 "select_last_index": bool(ctx.attr("select_last_index", 0)) or None,
                 "dtype": "int64"}
        return ctx.op(op_type, [x], attrs)
    return convert


converter("ArgMax")(_arg("ArgMax"))
converter("ArgMin")(_arg("ArgMin"))
