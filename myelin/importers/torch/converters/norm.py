"""Normalizations and softmax: batch norm (inference form, folded by the optimizer into the
convolution before it), batch statistics (instance norm), layer, group and RMS norms, softmax
and log-softmax. Norms are written with reductions and element-wise ops, which fusion turns
into a few loops; float16 and bfloat16 inputs are normalized in float32, as PyTorch does.
"""

import numpy as np
import torch

from myelin.flow import dtypes
from myelin.importers.torch.converters import converter


def _normalize(ctx, x, axes, epsilon):
    """(x - mean) / sqrt(var + epsilon) over ``axes`` (population variance); returns it, the
    mean and 1/std (the reduced axes kept as 1)."""
    mean = ctx.op("Mean", [x], {"axis": list(axes), "keepdims": True})
    centered = ctx.op("Sub", [x, mean])
    variance = ctx.op("Mean", [ctx.op("Square", [centered])], {"axis": list(axes),
                                                                "keepdims": True})
    inv_std = ctx.op("Rsqrt", [ctx.op("Add", [variance, ctx.scalar(epsilon, x.dtype)])])
    return ctx.op("Mul", [centered, inv_std]), mean, inv_std


def _stash(ctx, x):
    """``x`` in the type norms compute in: float32 for float16 and bfloat16."""
    return ctx.cast(x, "float32") if x.dtype in dtypes.REDUCED_FLOAT_TYPES else x


def _per_channel(ctx, param, rank):
    """A [C] parameter shaped to broadcast over axis 1 of a tensor of ``rank``."""
    return ctx.reshape(param, (-1,) + (1,) * (rank - 2)) if rank > 2 else param


def _affine(ctx, y, weight, bias, rank=None):
    if weight is not None:
        weight = ctx.cast(weight, y.dtype)
        y = ctx.op("Mul", [y, _per_channel(ctx, weight, rank) if rank else weight])
    if bias is not None:
        bias = ctx.cast(bias, y.dtype)
        y = ctx.op("Add", [y, _per_channel(ctx, bias, rank) if rank else bias])
    return y


def _ones(ctx, count, dtype):
    return ctx.const(np.ones(count, np.dtype(dtype)))


@converter("aten._native_batch_norm_legit_no_training", "aten._native_batch_norm_legit",
           "aten.native_batch_norm", "aten._native_batch_norm_legit_functional",
           "aten.batch_norm", "aten._batch_norm_with_update", "aten._batch_norm_no_update")
def _batch_norm(ctx):
    """With running statistics and not training: myelin's BatchNormalization (constant
    statistics fold into the weights of the product before it); training (instance norm,
    or a module without running statistics): normalized with the batch's own statistics."""
    x = ctx.tensor("input")
    weight, bias = ctx.args.get("weight"), ctx.args.get("bias")
    mean, var = ctx.args.get("running_mean"), ctx.args.get("running_var")
    training = ctx.args.get("training", False)
    epsilon = float(ctx.get("eps", ctx.get("epsilon", 1e-5)))
    channels = x.shape[1] if x.rank > 1 else x.shape[0]
    wide = _stash(ctx, x)
    if training or mean is None:
        axes = [0] + list(range(2, x.rank))
        normalized, batch_mean, inv_std = _normalize(ctx, wide, axes, epsilon)
        y = ctx.cast(_affine(ctx, normalized, weight, bias, x.rank), x.dtype)
        return [y, ctx.reshape(batch_mean, (channels,)), ctx.reshape(inv_std, (channels,))] + \
            [None] * (len(ctx.meta) - 3 if isinstance(ctx.meta, (list, tuple)) else 0)
    dtype = wide.dtype
    scale = ctx.cast(weight, dtype) if weight is not None else _ones(ctx, channels, dtype)
    shift = ctx.cast(bias, dtype) if bias is not None else \
        ctx.const(np.zeros(channels, np.dtype(dtype)))
    mean, var = ctx.cast(mean, dtype), ctx.cast(var, dtype)
    if all(p.constant for p in (scale, shift, mean, var)) and x.rank >= 2:
        y = ctx.op("BatchNormalization", [wide, scale, shift, mean, var], {"epsilon": epsilon})
    else:
        inv_std = ctx.op("Rsqrt", [ctx.op("Add", [var, ctx.scalar(epsilon, dtype)])])
        factor = _per_channel(ctx, ctx.op("Mul", [inv_std, scale]), x.rank)
        centered = ctx.op("Sub", [wide, _per_channel(ctx, mean, x.rank)])
        y = ctx.op("Add", [ctx.op("Mul", [centered, factor]), _per_channel(ctx, shift, x.rank)])
    y = ctx.cast(y, x.dtype)
    extra = len(ctx.meta) - 1 if isinstance(ctx.meta, (list, tuple)) else 0
    return [y] + [None] * extra if extra else y


def _layer_norm(ctx, x, normalized_shape, weight, bias, epsilon):
    axes = list(range(x.rank - len(normalized_shape), x.rank))
    normalized, mean, inv_std = _normalize(ctx, _stash(ctx, x), axes, epsilon)
    y = ctx.cast(_affine(ctx, normalized, weight, bias), x.dtype)
    return y, mean, inv_std


@converter("aten.native_layer_norm")
def _native_layer_norm(ctx):
    y, mean, inv_std = _layer_norm(ctx, ctx.tensor("input"), ctx["normalized_shape"],
                                   ctx.args.get("weight"), ctx.args.get("bias"),
                                   float(ctx["eps"]))
    return [y, mean, inv_std]


@converter("aten.layer_norm.default", preserve=True)
def _layer_norm_op(ctx):
    y, _, _ = _layer_norm(ctx, ctx.tensor("input"), ctx["normalized_shape"],
                          ctx.args.get("weight"), ctx.args.get("bias"),
                          float(ctx.get("eps", 1e-5)))
    return y


def _group_norm(ctx, x, groups, weight, bias, epsilon):
    batch, channels = x.shape[:2]
    grouped = ctx.reshape(_stash(ctx, x), (batch, groups, -1) if x.elements else
                          (batch, groups, 0))
    normalized, mean, inv_std = _normalize(ctx, grouped, [2], epsilon)
    y = ctx.reshape(normalized, x.shape)
    y = ctx.cast(_affine(ctx, y, weight, bias, x.rank), x.dtype)
    return y, ctx.reshape(mean, (batch, groups)), ctx.reshape(inv_std, (batch, groups))


@converter("aten.native_group_norm")
def _native_group_norm(ctx):
    return list(_group_norm(ctx, ctx.tensor("input"), int(ctx["group"]), ctx.args.get("weight"),
                            ctx.args.get("bias"), float(ctx["eps"])))


@converter("aten.group_norm.default", preserve=True)
def _group_norm_op(ctx):
    y, _, _ = _group_norm(ctx, ctx.tensor("input"), int(ctx["num_groups"]),
                          ctx.args.get("weight"), ctx.args.get("bias"),
                          float(ctx.get("eps", 1e-5)))
    return y


@converter("aten.rms_norm.default", "aten._fused_rms_norm.default", preserve=True)
def _rms_norm(ctx):
    """x / sqrt(mean(x^2) + eps) * weight (eps: the type's machine epsilon by default)."""
    x = ctx.tensor("input")
    wide = _stash(ctx, x)
    axes = list(range(x.rank - len(ctx["normalized_shape"]), x.rank))
    epsilon = ctx.args.get("eps")
    if epsilon is None:
        epsilon = float(torch.finfo(torch.float16 if x.dtype == "float16" else
                                    getattr(torch, x.dtype)).eps)
    square = ctx.op("Mean", [ctx.op("Square", [wide])], {"axis": axes, "keepdims": True})
    inv = ctx.op("Rsqrt", [ctx.op("Add", [square, ctx.scalar(epsilon, wide.dtype)])])
    y = ctx.cast(_affine(ctx, ctx.op("Mul", [wide, inv]), ctx.args.get("weight"), None),
                 x.dtype)
    if "_fused" in ctx.op_type:
        return [y, ctx.cast(inv, wide.dtype)]
    return y


# Softmax.
def _softmax(ctx, log, safe=False):
    """Softmax or log-softmax over ``dim``; ``safe``: a row of only -inf gives zeros (not
    NaN), as ``_safe_softmax`` does."""
    x = ctx.tensor("self")
    dtype = ctx.out_dtype
    x = ctx.cast(x, "float32" if dtype in dtypes.REDUCED_FLOAT_TYPES else dtype)
    if x.rank == 0:
        one = ctx.scalar(0 if log else 1, x.dtype)
        return ctx.cast(ctx.op("Add", [ctx.op("Mul", [x, ctx.scalar(0, x.dtype)]), one]), dtype)
    axis = ctx.axis(ctx["dim"], x.rank)
    peak = ctx.op("Max", [x], {"axis": [axis], "keepdims": True})
    shifted = ctx.op("Sub", [x, peak])
    e = ctx.op("Exp", [shifted])
    total = ctx.op("Sum", [e], {"axis": [axis], "keepdims": True})
    if log:
        y = ctx.op("Sub", [shifted, ctx.op("Log", [total])])
    else:
        y = ctx.op("Div", [e, total])
    if safe:
        empty = ctx.op("Equal", [peak, ctx.scalar(-np.inf, x.dtype)])
        y = ctx.op("Cond", [empty, ctx.scalar(0, x.dtype), y])
    return ctx.cast(y, dtype)


@converter("aten._softmax", "aten.softmax")
def _softmax_op(ctx):
    return _softmax(ctx, log=False)


@converter("aten._safe_softmax")
def _safe_softmax_op(ctx):
    return _softmax(ctx, log=False, safe=True)


@converter("aten._log_softmax", "aten.log_softmax")
def _log_softmax_op(ctx):
    return _softmax(ctx, log=True)
