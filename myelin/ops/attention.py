"""Scaled dot-product attention as one op, made by the attention pass
(:mod:`myelin.optimize.attention`) from the MatMul, scale, mask, softmax and MatMul that
exporters write.

``Attention(q, k, v, bias1, ..., biasn)`` computes ``softmax(scale * q k^T + bias1 + ... +
biasn) v`` with the softmax over the last axis:

* ``q`` is [..., Sq, D], ``k`` [..., Skv, D] (or [..., D, Skv] with ``transpose_k``, the layout
  in which exporters materialize K^T), ``v`` [..., Skv, Dv]; their leading (batch) axes
  broadcast like ``np.matmul``'s, and the output is batch + [Sq, Dv];
* each bias broadcasts to the scores' shape, batch + [Sq, Skv], and they are added in order
  after the scale (an attention mask is one: 0 where a key is seen, -inf or a large negative
  value where not);
* ``causal`` leaves out the keys after each query: query i sees keys j <= i + Skv - Sq (the
  last query sees every key, as in decoding with a key/value cache; for Sq = Skv the lower
  triangle). The keys and values it leaves out are not read: their infinities and NaNs do not
  reach the result. A query that sees no key gives NaN, as a softmax over only -inf does.

Float types only. Without ``causal``, no keys (Skv = 0) give zeros, the product of an empty
softmax with V.
"""

import math

import numpy as np

from myelin.errors import ShapeError
from myelin.ops.common import FLOAT, common_dtype, error
from myelin.ops.registry import Kind, OpDef, TensorType, attribute, broadcast_shapes, register


def seen_keys(query, queries, keys):
    """How many keys (the first ones) query ``query`` of ``queries`` sees in a causal
    attention over ``keys``: negative when it sees none."""
    return query + keys - queries + 1


def dimensions(op):
    """(Sq, Skv, D, Dv) of an Attention ``op`` from its inputs' shapes."""
    q, k, v = op.inputs[:3]
    sq, d = q.shape[-2:]
    skv = k.shape[-1] if attribute(op, "transpose_k") else k.shape[-2]
    return sq, skv, d, v.shape[-1]


def _infer(op):
    q, k, v = op.inputs[:3]
    dtype = common_dtype(op, op.inputs, FLOAT)
    if min(q.rank, k.rank, v.rank) < 2:
        raise error(op, f"q, k and v must have rank 2 or more, got shapes {list(q.shape)}, "
                        f"{list(k.shape)} and {list(v.shape)}")
    sq, skv, d, dv = dimensions(op)
    key_d = k.shape[-2] if attribute(op, "transpose_k") else k.shape[-1]
    if -1 not in (d, key_d) and d != key_d:
        raise error(op, f"q {list(q.shape)} and k {list(k.shape)} differ in depth")
    if -1 not in (skv, v.shape[-2]) and skv != v.shape[-2]:
        raise error(op, f"k {list(k.shape)} and v {list(v.shape)} differ in keys")
    try:
        batch = broadcast_shapes(op, q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ShapeError:
        raise error(op, f"batch axes of q {list(q.shape)}, k {list(k.shape)} and v "
                        f"{list(v.shape)} do not broadcast") from None
    scores = batch + (sq, skv)
    for bias in op.inputs[3:]:
        if bias.rank > len(scores) or broadcast_shapes(op, scores, bias.shape) != scores:
            raise error(op, f"bias {bias.name} of shape {list(bias.shape)} does not broadcast "
                            f"to the scores' shape {list(scores)}")
    return [TensorType(dtype, batch + (sq, dv))]


def _reference(op, inputs):
    q, k, v, *biases = inputs
    if not attribute(op, "transpose_k"):
        k = np.swapaxes(k, -1, -2)
    scores = np.matmul(q, k) * attribute(op, "scale")
    for bias in biases:
        scores = scores + bias
    sq, skv = scores.shape[-2:]
    if not attribute(op, "causal"):
        return [np.matmul(_softmax(scores), v)]
    seen = seen_keys(np.arange(sq)[:, None], sq, skv) > np.arange(skv)
    probabilities = _softmax(np.where(seen, scores, -math.inf))
    out = np.empty(np.broadcast_shapes(scores.shape[:-2], v.shape[:-2]) + (sq, v.shape[-1]))
    for query in range(sq):      # the values a query does not see are not read
        count = seen_keys(query, sq, skv)
        out[..., query, :] = (math.nan if count <= 0 else
                              np.matmul(probabilities[..., query, None, :count],
                                        v[..., :count, :])[..., 0, :])
    return [out]


def _softmax(scores):
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True, initial=-math.inf))
        return e / e.sum(axis=-1, keepdims=True)


register(OpDef("Attention", Kind.OPAQUE, _infer, _reference,
               attrs={"scale": 1.0, "causal": False, "transpose_k": False}, inputs=(3, None),
               doc="softmax(scale * q k^T + biases) v over the last axis"))
