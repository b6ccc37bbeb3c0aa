"""Transformer ONNX ops: Attention, RMSNormalization, RotaryEmbedding, GroupNormalization.

Attention (opsets 23 to 25) is written out as its decomposition: Q and K scaled by
sqrt(scale), a MatMul with K transposed, optional softcap, an additive bias built from the
mask, the causal frontier, the sliding window and the padding lengths, a max-subtracted
softmax, and a MatMul with V. Parts known at import time (a causal mask without a cache
length input, ...) fold into constants.
"""

import numpy as np

from myelin.flow import dtypes
from myelin.importers.onnx import proto
from myelin.importers.onnx.converters import converter


def _slice(ctx, x, axis, start, stop):
    """``x[..., start:stop, ...]`` along ``axis``."""
    if start == 0 and stop == x.shape[axis]:
        return x
    begins = [0] * x.rank
    sizes = list(x.shape)
    begins[axis], sizes[axis] = start, stop - start
    return ctx.op("Slice", [x, ctx.const(begins, "int32"), ctx.const(sizes, "int32")])


def _concat(ctx, parts, axis):
    parts = [p for p in parts if p.shape[axis] != 0] or parts[:1]
    if len(parts) == 1:
        return parts[0]
    return ctx.op("Concat", parts + [ctx.const(axis, "int32")], {"N": len(parts)})


def _scalar(ctx, value, dtype):
    return ctx.const(np.asarray(value, dtypes.to_numpy(dtype)), dtype)


# Attention.
def _split_heads(ctx, x, heads):
    """[batch, sequence, heads * size] -> [batch, heads, sequence, size]."""
    batch, sequence, hidden = x.shape
    if heads is None or heads <= 0 or hidden % heads:
        raise ctx.error(f"hidden size {hidden} is not a multiple of {heads} heads")
    split = ctx.reshape(x, (batch, sequence, heads, hidden // heads))
    return ctx.op("Transpose", [split], {"perm": [0, 2, 1, 3]})


def _where_allowed(ctx, allowed, dtype):
    """An additive bias: 0 where ``allowed``, -inf elsewhere."""
    return ctx.op("Cond", [allowed, _scalar(ctx, 0, dtype), _scalar(ctx, -np.inf, dtype)])


def _add_bias(ctx, bias, term):
    return term if bias is None else ctx.op("Add", [bias, term])


def _query_offsets(ctx, q_len, offset):
    """Absolute query positions, [q, 1] (int64), shifted by ``offset``: an int, or a
    run-time [batch] vector that gives them the shape [batch, 1, q, 1]."""
    positions = np.arange(q_len, dtype=np.int64).reshape(q_len, 1)
    if isinstance(offset, int):
        return ctx.const(positions + offset)
    batch = offset.shape[0]
    return ctx.op("Add", [ctx.const(positions.reshape(1, 1, q_len, 1)),
                          ctx.reshape(offset, (batch, 1, 1, 1))])


def _attention_bias(ctx, dtype, q_len, kv_len, past_len):
    """The additive attention bias (None if there is none), broadcastable to
    [batch, heads, q, kv], following the reference order: mask, causal frontier, window,
    padding."""
    mask = ctx.input(3) if ctx.has(3) else None
    nonpad = ctx.input(6) if ctx.has(6) else None
    if nonpad is not None:
        nonpad = ctx.cast(ctx.reshape(nonpad, (-1,)), "int64")
    bias = None
    if mask is not None:
        short = kv_len - mask.shape[-1]
        if short > 0:
            fill = False if mask.dtype == "bool" else -np.inf
            pad = ctx.const(np.full(mask.shape[:-1] + (short,), fill,
                                    dtypes.to_numpy(mask.dtype)), mask.dtype)
            mask = _concat(ctx, [mask, pad], mask.rank - 1)
        bias = _where_allowed(ctx, mask, dtype) if mask.dtype == "bool" \
            else ctx.cast(mask, dtype)
    # Where the query block starts among the keys.
    if past_len is None and nonpad is not None:
        offset = ctx.op("Sub", [nonpad, ctx.const(np.int64(q_len))])
    else:
        offset = past_len or 0
    keys = ctx.const(np.arange(kv_len, dtype=np.int64).reshape(1, kv_len))
    if ctx.attr("is_causal", 0):
        allowed = ctx.op("LessEqual", [keys, _query_offsets(ctx, q_len, offset)])
        bias = _add_bias(ctx, bias, _where_allowed(ctx, allowed, dtype))
    left, right = ctx.attr("left_window_size", -1), ctx.attr("right_window_size", -1)
    if left >= 0 or right >= 0:
        diff = ctx.op("Sub", [_query_offsets(ctx, q_len, offset), keys])
        allowed = None
        if left >= 0:
            allowed = ctx.op("LessEqual", [diff, ctx.const(np.int64(left))])
        if right >= 0:
            inside = ctx.op("GreaterEqual", [diff, ctx.const(np.int64(-right))])
            allowed = inside if allowed is None else ctx.op("And", [allowed, inside])
        bias = _add_bias(ctx, bias, _where_allowed(ctx, allowed, dtype))
    if nonpad is not None:
        batch = nonpad.shape[0]
        valid = ctx.op("Less", [ctx.const(np.arange(kv_len, dtype=np.int64)
                                          .reshape(1, 1, 1, kv_len)),
                                ctx.reshape(nonpad, (batch, 1, 1, 1))])
        bias = _add_bias(ctx, bias, _where_allowed(ctx, valid, dtype))
    return bias


def _guarded_softmax(ctx, logits, guard):
    """Softmax over the last axis; with ``guard``, an all -inf row gives zeros, not NaN."""
    axis = [logits.rank - 1]
    peak = ctx.op("Max", [logits], {"axis": axis, "keepdims": True})
    if guard:
        minus_inf = ctx.op("Equal", [peak, _scalar(ctx, -np.inf, logits.dtype)])
        peak = ctx.op("Cond", [minus_inf, _scalar(ctx, 0, logits.dtype), peak])
    e = ctx.op("Exp", [ctx.op("Sub", [logits, peak])])
    total = ctx.op("Sum", [e], {"axis": axis, "keepdims": True})
    if guard:
        empty = ctx.op("Equal", [total, _scalar(ctx, 0, logits.dtype)])
        total = ctx.op("Cond", [empty, _scalar(ctx, 1, logits.dtype), total])
    return ctx.op("Div", [e, total])


@converter("Attention")
def _attention(ctx):
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    dtype = q.dtype
    three_d = q.rank == 3
    if three_d:
        q = _split_heads(ctx, q, ctx.attr("q_num_heads", None))
        k = _split_heads(ctx, k, ctx.attr("kv_num_heads", None))
        v = _split_heads(ctx, v, ctx.attr("kv_num_heads", None))
    if q.rank != 4 or k.rank != 4 or v.rank != 4:
        raise ctx.error("Q, K and V must all be 3-D or all 4-D")
    scale = ctx.attr("scale", None)
    if scale is None:
        scale = 1 / np.sqrt(q.shape[3])
    root = _scalar(ctx, np.sqrt(scale), dtype)

    past_len = None
    if ctx.has(4) or ctx.has(5):
        if not (ctx.has(4) and ctx.has(5)):
            raise ctx.error("past_key and past_value must be given together")
        past_len = ctx.input(4).shape[2]
        k = _concat(ctx, [ctx.input(4), k], 2)
        v = _concat(ctx, [ctx.input(5), v], 2)
    present_key, present_value = k, v
    q_len, kv_len = q.shape[2], k.shape[2]
    bias = _attention_bias(ctx, dtype, q_len, kv_len, past_len)

    # Grouped-query attention: each K/V head serves consecutive query heads.
    q_heads, kv_heads = q.shape[1], k.shape[1]
    if q_heads != kv_heads and kv_heads == v.shape[1] and q_heads % kv_heads == 0:
        heads = ctx.const(np.repeat(np.arange(kv_heads, dtype=np.int64), q_heads // kv_heads))
        k = ctx.op("Gather", [k, heads], {"axis": 1})
        v = ctx.op("Gather", [v, heads], {"axis": 1})

    scores = ctx.product(ctx.op("Mul", [q, root]), ctx.op("Mul", [k, root]),
                     transpose_b=True)
    softcap = ctx.attr("softcap", 0.0)
    if softcap and softcap > 0:
        cap = _scalar(ctx, softcap, dtype)
        scores = ctx.op("Mul", [ctx.op("Tanh", [ctx.op("Div", [scores, cap])]), cap])
    mode = ctx.attr("qk_matmul_output_mode", 0)
    qk_output = scores
    logits = scores if bias is None else ctx.op("Add", [scores, bias])
    if mode == 2:
        qk_output = logits
    precision = ctx.attr("softmax_precision", None)
    if precision is not None:
        logits = ctx.cast(logits, proto.dtype_of(precision, f"Attention {ctx.name}"))

    # Rows whose bias is -inf everywhere attend nothing and give zeros.
    masked_rows = None
    if bias is not None:
        masked_rows = ctx.op("Equal", [ctx.op("Max", [bias], {"axis": [bias.rank - 1],
                                                             "keepdims": True}),
                                       _scalar(ctx, -np.inf, dtype)])
        if masked_rows.data is not None and not np.any(masked_rows.data):
            masked_rows = None
    guard = bias is not None and (bias.data is None or masked_rows is not None)
    probs = _guarded_softmax(ctx, logits, guard)
    if masked_rows is not None:
        probs = ctx.op("Cond", [masked_rows, _scalar(ctx, 0, probs.dtype), probs])
    if mode == 3:
        qk_output = probs
    probs = ctx.cast(probs, dtype)
    y = ctx.product(probs, v)
    if three_d:
        y = ctx.op("Transpose", [y], {"perm": [0, 2, 1, 3]})
        y = ctx.reshape(y, y.shape[:2] + (y.shape[2] * y.shape[3],))
    outputs = [y, present_key, present_value, ctx.cast(qk_output, dtype)]
    return outputs[:max(1, ctx.num_outputs)]


# Normalizations.
def _stash(ctx, x):
    """``x`` in the computation type of ``stash_type`` (float32 by default)."""
    stash = proto.dtype_of(ctx.attr("stash_type", 1), f"{ctx.op_type} {ctx.name}")
    return ctx.cast(x, stash) if dtypes.is_float(x.dtype) and x.dtype != stash else x


@converter("RMSNormalization")
def _rms_normalization(ctx):
    """x / sqrt(mean(x^2 over the axes from ``axis`` on) + epsilon) * scale."""
    x = ctx.input(0)
    axis = ctx.axis(ctx.attr("axis", -1), x.rank)
    wide = _stash(ctx, x)
    mean_square = ctx.op("Mean", [ctx.op("Square", [wide])],
                         {"axis": list(range(axis, x.rank)), "keepdims": True})
    epsilon = _scalar(ctx, ctx.attr("epsilon", 1e-5), wide.dtype)
    normalized = ctx.op("Mul", [wide, ctx.op("Rsqrt", [ctx.op("Add", [mean_square, epsilon])])])
    return ctx.op("Mul", [ctx.cast(normalized, x.dtype), ctx.cast(ctx.input(1), x.dtype)])


@converter("GroupNormalization")
def _group_normalization(ctx):
    """Normalization over groups of channels. Opset 18 has one scale and bias per group;
    opset 21 one per channel, and computes in ``stash_type``."""
    x = ctx.input(0)
    groups = ctx.attr("num_groups")
    n, c = x.shape[:2]
    if c % groups:
        raise ctx.error(f"{c} channels do not split into {groups} groups")
    wide = _stash(ctx, x) if ctx.opset >= 21 else x
    grouped = ctx.reshape(wide, (n, groups, -1))
    mean = ctx.op("Mean", [grouped], {"axis": [2], "keepdims": True})
    centered = ctx.op("Sub", [grouped, mean])
    variance = ctx.op("Mean", [ctx.op("Square", [centered])], {"axis": [2], "keepdims": True})
    epsilon = _scalar(ctx, ctx.attr("epsilon", 1e-5), wide.dtype)
    normalized = ctx.op("Mul", [centered, ctx.op("Rsqrt", [ctx.op("Add", [variance,
                                                                          epsilon])])])
    normalized = ctx.cast(ctx.reshape(normalized, x.shape), x.dtype)
    scale, bias = ctx.input(1), ctx.input(2)
    if ctx.opset < 21 and scale.shape[0] == groups != c:
        per_group = ctx.const(np.repeat(np.arange(groups, dtype=np.int64), c // groups))
        scale = ctx.op("Gather", [scale, per_group])
        bias = ctx.op("Gather", [bias, per_group])
    shape = (c,) + (1,) * (x.rank - 2)
    scale = ctx.reshape(ctx.cast(scale, x.dtype), shape)
    bias = ctx.reshape(ctx.cast(bias, x.dtype), shape)
    return ctx.op("Add", [ctx.op("Mul", [normalized, scale]), bias])


@converter("RotaryEmbedding")
def _rotary_embedding(ctx):
    """Rotates pairs of features by the angles in the cos/sin caches: the two halves of the
    rotated part, or (``interleaved``) its even and odd features."""
    x = ctx.input(0)
    cos, sin = ctx.input(1), ctx.input(2)
    if x.rank == 4:       # [batch, heads, sequence, size] -> [batch, sequence, heads, size]
        work = ctx.op("Transpose", [x], {"perm": [0, 2, 1, 3]})
    elif x.rank == 3:
        heads = ctx.attr("num_heads", 0)
        batch, sequence, hidden = x.shape
        if not heads or hidden % heads:
            raise ctx.error(f"3-D input needs num_heads dividing {hidden}")
        work = ctx.reshape(x, (batch, sequence, heads, hidden // heads))
    else:
        raise ctx.error(f"input must be 3-D or 4-D, got shape {list(x.shape)}")
    batch, sequence, heads, size = work.shape
    dim = ctx.attr("rotary_embedding_dim", 0) or size
    half = dim // 2
    if ctx.has(3):
        positions = ctx.input(3)
        cos = ctx.op("Gather", [cos, positions])
        sin = ctx.op("Gather", [sin, positions])
    if cos.shape[-1] != half or sin.shape[-1] != half:
        raise ctx.error(f"the cos/sin caches must have {half} features, got "
                        f"{cos.shape[-1]} and {sin.shape[-1]}")
    cos = ctx.reshape(ctx.cast(cos, x.dtype), cos.shape[:-1] + (1, half))
    sin = ctx.reshape(ctx.cast(sin, x.dtype), sin.shape[:-1] + (1, half))
    rotated = _slice(ctx, work, 3, 0, dim)
    if ctx.attr("interleaved", 0):
        pairs = ctx.reshape(rotated, (batch, sequence, heads, half, 2))
        x1 = ctx.reshape(_slice(ctx, pairs, 4, 0, 1), (batch, sequence, heads, half))
        x2 = ctx.reshape(_slice(ctx, pairs, 4, 1, 2), (batch, sequence, heads, half))
    else:
        x1, x2 = _slice(ctx, rotated, 3, 0, half), _slice(ctx, rotated, 3, half, dim)
    real = ctx.op("Sub", [ctx.op("Mul", [cos, x1]), ctx.op("Mul", [sin, x2])])
    imag = ctx.op("Add", [ctx.op("Mul", [sin, x1]), ctx.op("Mul", [cos, x2])])
    if ctx.attr("interleaved", 0):
        shape = (batch, sequence, heads, half, 1)
        pairs = _concat(ctx, [ctx.reshape(real, shape), ctx.reshape(imag, shape)], 4)
        rotated = ctx.reshape(pairs, (batch, sequence, heads, dim))
    else:
        rotated = _concat(ctx, [real, imag], 3)
    y = _concat(ctx, [rotated, _slice(ctx, work, 3, dim, size)], 3) if dim < size else rotated
    if x.rank == 4:
        return ctx.op("Transpose", [y], {"perm": [0, 2, 1, 3]})
    return ctx.reshape(y, x.shape)
