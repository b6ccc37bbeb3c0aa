"""ONNX loss functions: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

The input's class axis is 1 ([N, C] or [N, C, d1, ..., dk]); the target holds one class per
sample ([N] or [N, d1, ..., dk]). The per-sample pick x[n, target[n, ...], ...] is written
without a gather: the target compared with the class numbers gives a one-hot mask, and a
masked sum over the class axis picks the value (a target outside [0, C), such as a negative
``ignore_index``, picks nothing).
"""

import numpy as np

from myelin.flow import dtypes
from myelin.importers.onnx.converters import converter

_REDUCTIONS = ("none", "sum", "mean")


def _zero(ctx, dtype):
    return ctx.const(np.zeros((), dtypes.to_numpy(dtype)), dtype)


def _negative_log_likelihood(ctx, x, target, weight):
    """The loss of the node (its ``reduction`` and ``ignore_index``) for log-probabilities
    ``x`` [N, C, ...] and classes ``target`` [N, ...]."""
    reduction = ctx.attr("reduction", "mean")
    if isinstance(reduction, bytes):
        reduction = reduction.decode()
    if reduction not in _REDUCTIONS:
        raise ctx.error(f"reduction {reduction!r} is not one of {', '.join(_REDUCTIONS)}")
    if x.rank < 2 or target.shape != x.shape[:1] + x.shape[2:]:
        raise ctx.error(f"input {list(x.shape)} and target {list(target.shape)} do not "
                        f"match ([N, C, d...] and [N, d...])")
    classes = x.shape[1]
    spread = (1, classes) + (1,) * (x.rank - 2)
    numbers = ctx.const(np.arange(classes, dtype=dtypes.to_numpy(target.dtype)).reshape(spread))
    column = ctx.reshape(target, target.shape[:1] + (1,) + target.shape[1:])
    one_hot = ctx.op("Equal", [column, numbers])
    zero = _zero(ctx, x.dtype)

    def pick(values):
        return ctx.op("Sum", [ctx.op("Cond", [one_hot, values, zero])],
                      {"axis": [1], "keepdims": False})

    loss = ctx.op("Neg", [pick(x)])
    sample_weight = None
    if weight is not None:
        sample_weight = pick(ctx.reshape(ctx.cast(weight, x.dtype), spread))
    ignore_index = ctx.attr("ignore_index", None)
    if ignore_index is not None:
        kept = ctx.op("NotEqual", [target, ctx.const(np.asarray(ignore_index,
                                                                 dtypes.to_numpy(target.dtype)))])
        loss = ctx.op("Cond", [kept, loss, zero])
        if sample_weight is None:
            sample_weight = ctx.cast(kept, x.dtype)
        else:
            sample_weight = ctx.op("Cond", [kept, sample_weight, zero])
    if weight is not None:
        loss = ctx.op("Mul", [loss, sample_weight])
    if reduction == "none":
        return loss
    total = ctx.op("Sum", [loss], {"keepdims": False})
    if reduction == "sum":
        return total
    if sample_weight is None:
        return ctx.op("Div", [total, ctx.const(np.asarray(max(loss.elements, 1),
                                                          dtypes.to_numpy(x.dtype)))])
    return ctx.op("Div", [total, ctx.op("Sum", [sample_weight], {"keepdims": False})])


@converter("NegativeLogLikelihoodLoss")
def _nll_loss(ctx):
    weight = ctx.input(2) if ctx.has(2) else None
    return _negative_log_likelihood(ctx, ctx.input(0), ctx.input(1), weight)


@converter("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy_loss(ctx):
    """The negative log-likelihood of log-softmax(scores) over the class axis; the second
    output, if used, is the log-softmax."""
    scores = ctx.input(0)
    axis = [1]
    peak = ctx.op("Max", [scores], {"axis": axis, "keepdims": True})
    shifted = ctx.op("Sub", [scores, peak])
    total = ctx.op("Sum", [ctx.op("Exp", [shifted])], {"axis": axis, "keepdims": True})
    log_prob = ctx.op("Sub", [shifted, ctx.op("Log", [total])])
    weight = ctx.input(2) if ctx.has(2) else None
    loss = _negative_log_likelihood(ctx, log_prob, ctx.input(1), weight)
    if ctx.num_outputs > 1 and ctx.node.output[1]:
        return [loss, log_prob]
    return loss
