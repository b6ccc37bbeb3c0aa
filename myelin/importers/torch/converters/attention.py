"""``scaled_dot_product_attention`` (kept whole by export) as one myelin Attention op:
``softmax(scale * q k^T + mask) v``, with PyTorch's causal rule (query i sees keys j <= i),
boolean masks made additive (-inf where a key is left out) and grouped-query attention's
key/value heads repeated for the query heads they serve.
"""

import math

import numpy as np

from myelin.flow import dtypes
from myelin.importers.torch.converters import converter


def _repeat_heads(ctx, x, times):
    """[..., H, S, D] -> [..., H * times, S, D], each head repeated ``times`` in a row."""
    if times == 1:
        return x
    *batch, heads, length, depth = x.shape
    batch = tuple(batch)
    grown = ctx.broadcast(ctx.reshape(x, batch + (heads, 1, length, depth)),
                          batch + (heads, times, length, depth))
    return ctx.reshape(grown, batch + (heads * times, length, depth))


def additive(ctx, mask, dtype):
    """An attention mask as a bias of ``dtype``: a boolean one is 0 where True and -inf
    where False; a float one as it is."""
    if mask.dtype == "bool":
        return ctx.op("Cond", [mask, ctx.scalar(0, dtype), ctx.scalar(-np.inf, dtype)])
    return ctx.cast(mask, dtype)


@converter("aten.scaled_dot_product_attention.default", preserve=True)
def _sdpa(ctx):
    q, k, v = ctx.tensor("query"), ctx.tensor("key"), ctx.tensor("value")
    if ctx.get("dropout_p", 0.0):
        raise ctx.error("attention dropout: myelin compiles inference (pass dropout_p=0 "
                        "outside training)")
    dtype = q.dtype
    compute = "float32" if dtype in dtypes.REDUCED_FLOAT_TYPES else dtype
    q, k, v = (ctx.cast(t, compute) for t in (q, k, v))
    if ctx.get("enable_gqa", False) and q.rank >= 3 and k.shape[-3] != q.shape[-3]:
        times = q.shape[-3] // k.shape[-3]
        k, v = _repeat_heads(ctx, k, times), _repeat_heads(ctx, v, times)
    scale = ctx.args.get("scale")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    inputs = [q, k, v]
    mask = ctx.args.get("attn_mask")
    if mask is not None:
        inputs.append(additive(ctx, mask, compute))
    causal = bool(ctx.get("is_causal", False))
    sq, skv = q.shape[-2], k.shape[-2]
    if causal and sq != skv:
        # PyTorch's causal mask is aligned at the top left (query i sees keys j <= i);
        # myelin's Attention aligns it at the bottom right, as a key/value cache does.
        seen = np.tril(np.ones((sq, skv), bool))
        inputs.append(ctx.const(np.where(seen, 0, -np.inf).astype(np.dtype(compute))))
        causal = False
    y = ctx.op("Attention", inputs, {"scale": scale, "causal": causal or None})
    return ctx.cast(y, dtype)
