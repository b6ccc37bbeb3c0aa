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

The operands may be read, and the output written, through a permutation of their axes (the
layouts that exporters transpose heads in and out of, taken in by the pass): with ``perm_q``
the query operand is ``np.transpose(q, perm_q)``, and likewise ``perm_k`` and ``perm_v``; with
``perm_out`` the output tensor is ``np.transpose(result, perm_out)``. A permutation of q, v
or the output keeps their last axis last.
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


PERMS = ("perm_q", "perm_k", "perm_v")     # the operands' permutations, by input


def permutation(op, name, rank):
    """Attribute ``name`` (one of ``PERMS`` or ``perm_out``) of ``op``: a permutation of
    ``rank`` axes, the identity when absent."""
    perm = op.attrs.get_ints(name)
    return tuple(range(rank)) if perm is None else tuple(perm)


def operand_shapes(op):
    """The shapes of the q, k and v operands of an Attention ``op``: its first three inputs'
    through their permutations."""
    return [tuple(x.shape[axis] for axis in permutation(op, name, len(x.shape)))
            for x, name in zip(op.inputs[:3], PERMS)]


def dimensions(op):
    """(Sq, Skv, D, Dv) of an Attention ``op`` from its operands' shapes."""
    q, k, v = operand_shapes(op)
    sq, d = q[-2:]
    skv = k[-1] if attribute(op, "transpose_k") else k[-2]
    return sq, skv, d, v[-1]


def keeps_last_axis(name, perm):
    """Whether permutation ``perm`` may be attribute ``name`` as far as the last axis goes:
    those of q, v and the output keep it last (the kernel reads and writes their rows as
    vectors), K's may move it."""
    return name == "perm_k" or perm[-1] == len(perm) - 1


def _check_permutation(op, name, rank):
    perm = permutation(op, name, rank)
    if sorted(perm) != list(range(rank)):
        raise error(op, f"{name} {list(perm)} is not a permutation of {rank} axes")
    if not keeps_last_axis(name, perm):
        raise error(op, f"{name} {list(perm)} moves the last axis")


def _infer(op):
    dtype = common_dtype(op, op.inputs, FLOAT)
    if min(x.rank for x in op.inputs[:3]) < 2:
        shapes = ", ".join(str(list(x.shape)) for x in op.inputs[:3])
        raise error(op, f"q, k and v must have rank 2 or more, got shapes {shapes}")
    for x, name in zip(op.inputs[:3], PERMS):
        _check_permutation(op, name, x.rank)
    q, k, v = operand_shapes(op)
    sq, skv, d, dv = dimensions(op)
    key_d = k[-2] if attribute(op, "transpose_k") else k[-1]
    if -1 not in (d, key_d) and d != key_d:
        raise error(op, f"q {list(q)} and k {list(k)} differ in depth")
    if -1 not in (skv, v[-2]) and skv != v[-2]:
        raise error(op, f"k {list(k)} and v {list(v)} differ in keys")
    try:
        batch = broadcast_shapes(op, q[:-2], k[:-2], v[:-2])
    except ShapeError:
        raise error(op, f"batch axes of q {list(q)}, k {list(k)} and v {list(v)} do not "
                        f"broadcast") from None
    scores = batch + (sq, skv)
    for bias in op.inputs[3:]:
        if bias.rank > len(scores) or broadcast_shapes(op, scores, bias.shape) != scores:
            raise error(op, f"bias {bias.name} of shape {list(bias.shape)} does not broadcast "
                            f"to the scores' shape {list(scores)}")
    result = batch + (sq, dv)
    _check_permutation(op, "perm_out", len(result))
    return [TensorType(dtype, tuple(result[axis]
                                    for axis in permutation(op, "perm_out", len(result))))]


def _reference(op, inputs):
    q, k, v, *biases = inputs
    q, k, v = (np.transpose(x, permutation(op, name, x.ndim))
               for x, name in zip((q, k, v), PERMS))
    out = _attend(op, q, k, v, biases)
    return [np.transpose(out, permutation(op, "perm_out", out.ndim))]


def _attend(op, q, k, v, biases):
    """The attention of operands ``q``, ``k`` and ``v`` (arrays) with ``biases``."""
    if not attribute(op, "transpose_k"):
        k = np.swapaxes(k, -1, -2)
    scores = np.matmul(q, k) * attribute(op, "scale")
    for bias in biases:
        scores = scores + bias
    sq, skv = scores.shape[-2:]
    if not attribute(op, "causal"):
        return np.matmul(_softmax(scores), v)
    seen = seen_keys(np.arange(sq)[:, None], sq, skv) > np.arange(skv)
    probabilities = _softmax(np.where(seen, scores, -math.inf))
    out = np.empty(np.broadcast_shapes(scores.shape[:-2], v.shape[:-2]) + (sq, v.shape[-1]))
    for query in range(sq):      # the values a query does not see are not read
        count = seen_keys(query, sq, skv)
        out[..., query, :] = (math.nan if count <= 0 else
                              np.matmul(probabilities[..., query, None, :count],
                                        v[..., :count, :])[..., 0, :])
    return out


def _softmax(scores):
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True, initial=-math.inf))
        return e / e.sum(axis=-1, keepdims=True)


register(OpDef("Attention", Kind.OPAQUE, _infer, _reference,
               attrs={"scale": 1.0, "causal": False, "transpose_k": False, "perm_q": None,
                      "perm_k": None, "perm_v": None, "perm_out": None}, inputs=(3, None),
               doc="softmax(scale * q k^T + biases) v over the last axis"))
