"""Attention fusion: the ops that compute scaled dot-product attention become one
:mod:`Attention <myelin.ops.attention>` op, so the scores and probabilities are never stored.

The pattern, as the ONNX importer and the Builder write it::

    s = MatMul(q, k)                     # k^T materialized, or transpose_b with k
    s = Mul(s, c) or Div(s, c)           # optional: c a constant of one element
    s = Add(s, bias1) ... Add(s, biasn)  # optional: each bias broadcasts to s
    e = Exp(Sub(s, Max(s)))              # Max and Sum over the last axis, keeping it
    p = Div(e, Sum(e)) or Mul(e, Reciprocal(Sum(e)))
    y = MatMul(p, v)

Every value in between must be read by the next op of the pattern alone (so none is an output
or used elsewhere), the chain of scores must keep its shape (a bias never broadcasts the
scores up), and the type must be float32 or float64 (float16 graphs round every step to
half precision, which one kernel computing in float32 would not). A constant bias that is a
causal mask (0 where :func:`~myelin.ops.attention.seen_keys` says a query sees a key, -inf or
the type's lowest value elsewhere) becomes the ``causal`` attribute; a lowest-value mask
only where every query sees a key (otherwise the unmasked graph's softmax is over the masked
values, not over none).

Then (:func:`absorb_transposes`) an Attention reads each operand that a Transpose makes for it
alone through that Transpose (``perm_q``, ``perm_k``, ``perm_v``), and writes its result
through the Transpose that alone reads it (``perm_out``), where q, v and the result keep their
last axis last: the heads that exporters move out of and back into the model's width
([batch, sequence, heads, depth] <-> [batch, heads, sequence, depth]) are read and written
in place, and four Transposes of each layer of a Hugging Face encoder go. A constant factor of
q or k (PyTorch's attention scales both by the fourth root of the depth) joins the scale.
"""

import numpy as np

from myelin.flow import dtypes
from myelin.ops.array import transpose_permutation
from myelin.ops.attention import PERMS, keeps_last_axis, permutation, seen_keys
from myelin.ops.reduction import reduced_axes
from myelin.ops.registry import attribute
from myelin.optimize.cleanup import pinned

_TYPES = frozenset({"float32", "float64"})
_MAX_CHAIN = 8      # ops between the product and the softmax (a scale and biases), at most


def _inner(var, *readers):
    """True if ``var`` is a local value computed in the readers' function and read by exactly
    ``readers`` (each once)."""
    producer = var.producer
    return (producer is not None and producer.func is readers[0].func and not pinned(var)
            and not var.ref and sorted(map(id, var.consumers)) == sorted(map(id, readers)))


def _last_axis(op, value):
    """True if ``op`` (a Max or Sum) reduces ``value`` over its last axis alone, keeping it."""
    return (len(op.inputs) == 1 and op.inputs[0] is value and value.rank > 0
            and reduced_axes(op, value.rank) == (value.rank - 1,)
            and attribute(op, "keepdims"))


def _softmax(p, reader):
    """(scores, the softmax's ops) if ``p``, read by ``reader`` alone, is the softmax of
    scores over their last axis; else None."""
    if not _inner(p, reader):
        return None
    normalize = p.producer
    if normalize.type == "Div":
        e, total = normalize.inputs
        ops = [normalize]
    elif normalize.type == "Mul":
        e, inverse = normalize.inputs
        if e.producer is not None and e.producer.type == "Reciprocal":
            inverse, e = e, inverse
        if inverse.producer is None or inverse.producer.type != "Reciprocal" or not _inner(
                inverse, normalize):
            return None
        total = inverse.producer.inputs[0]
        ops = [normalize, inverse.producer]
        normalize = inverse.producer
    else:
        return None
    if not (_inner(total, normalize) and total.producer.type == "Sum"):
        return None
    exp = e.producer
    if not (_inner(e, total.producer, ops[0]) and exp.type == "Exp"
            and _last_axis(total.producer, e)):
        return None
    shifted = exp.inputs[0]
    sub = shifted.producer
    if not (_inner(shifted, exp) and sub.type == "Sub"):
        return None
    scores, peak = sub.inputs
    if not (_inner(peak, sub) and peak.producer.type == "Max"
            and _last_axis(peak.producer, scores) and _inner(scores, peak.producer, sub)
            and p.shape == scores.shape):
        return None
    return scores, ops + [total.producer, exp, sub, peak.producer]


def _scalar(var):
    """The value of ``var`` if it is a fixed constant of one element, else None."""
    if not var.fixed or np.size(var.data) != 1:
        return None
    return float(np.asarray(var.data).reshape(-1)[0])


def _scores(value, depth=0):
    """(the MatMul, scale, biases, ops) if ``value`` is ``MatMul * scale + biases``, the
    scale optional and right after the product; else None."""
    op = value.producer
    if op is None or depth > _MAX_CHAIN:
        return None
    if op.type == "MatMul":
        if attribute(op, "transpose_a"):
            return None
        return op, 1.0, [], [op]
    if op.type not in ("Add", "Mul", "Div"):
        return None
    orders = [op.inputs, op.inputs[::-1]] if op.type != "Div" else [op.inputs]
    for chain, other in orders:
        if chain.shape != value.shape or not _inner(chain, op):
            continue
        found = _scores(chain, depth + 1)
        if found is None:
            continue
        product, scale, biases, ops = found
        if op.type == "Add":
            return product, scale, biases + [other], ops + [op]
        constant = _scalar(other)
        if biases or scale != 1.0 or constant in (None, 0.0) or not np.isfinite(constant):
            continue
        return product, constant if op.type == "Mul" else 1.0 / constant, [], ops + [op]
    return None


def _causal(bias, scores):
    """True if ``bias`` is a constant causal mask over ``scores`` (see the module's doc)."""
    if (not bias.fixed or bias.rank < 2
            or bias.shape[-2:] != scores.shape[-2:]):
        return False
    sq, skv = scores.shape[-2:]
    seen = seen_keys(np.arange(sq)[:, None], sq, skv) > np.arange(skv)
    data = np.broadcast_to(np.asarray(bias.data), bias.shape)
    lowest = np.finfo(dtypes.to_numpy(bias.dtype)).min
    masked = data[..., ~seen]
    if not (np.all(data[..., seen] == 0) and np.all(masked <= lowest)):
        return False
    return sq <= skv or np.all(masked == -np.inf)


def _match(product):
    """The attention computed by ``product`` (a MatMul of probabilities and V): (inputs,
    attributes, the ops it replaces), or None."""
    if attribute(product, "transpose_a") or attribute(product, "transpose_b"):
        return None
    found = _softmax(product.inputs[0], product)
    if found is None:
        return None
    scores, softmax_ops = found
    chain = _scores(scores)
    if chain is None:
        return None
    first, scale, biases, chain_ops = chain
    q, k = first.inputs
    if product.outputs[0].dtype not in _TYPES:
        return None
    attrs = {} if attribute(first, "transpose_b") else {"transpose_k": True}
    if scale != 1.0:
        attrs["scale"] = scale
    kept = [bias for bias in biases if not _causal(bias, scores)]
    if len(kept) < len(biases):
        attrs["causal"] = True
    return ([q, k, product.inputs[1]] + kept, attrs,
            [product] + softmax_ops + chain_ops)


def fuse_attention(flow, ctx):
    """Rewrite every attention pattern of ``flow`` into an Attention op; returns True if any
    was."""
    changed = False
    for func in flow.funcs.values():
        rewrote = False
        for op in flow.order(func):
            if op.type != "MatMul" or op.func is not func:
                continue
            match = _match(op)
            if match is None:
                continue
            inputs, attrs, ops = match
            out = op.outputs[0]
            inner = [v for member in ops for v in member.outputs if v is not out]
            for member in ops:
                flow.delete_op(member)
            for var in inner:
                flow.delete_var(var)
            fused = flow.op(flow.unique_op_name(f"{func.name}/Attention"), "Attention", func,
                            inputs, [out], attrs)
            ctx.log(f"fused attention into {fused.name}: {len(ops)} ops")
            rewrote = True
        if rewrote:
            func.ops = flow.order(func)
            changed = True
    return changed


def absorb_transposes(flow, ctx):
    """Let every Attention op read its operands and write its result through the Transposes
    next to it (see the module); returns True if any did."""
    changed = False
    for func in flow.funcs.values():
        for op in flow.order(func):
            if op.type == "Attention" and op.func is func:
                changed |= _absorb_operands(flow, op)
                changed |= _absorb_result(flow, op)
    return changed


def _absorb_operands(flow, op):
    """Read each operand of Attention ``op`` that a Transpose makes for it alone through
    that Transpose, and take a constant factor of one element of q or k that a Mul makes
    for it alone into the scale, for as long as there is one; True if any."""
    changed = False
    for index, name in enumerate(PERMS):
        while True:
            x = op.inputs[index]
            producer = x.producer
            if producer is None or not _inner(x, op):     # (read once, by op alone)
                break
            if producer.type == "Transpose":
                inner = transpose_permutation(producer)     # x = transpose(source, inner)
                perm = [inner[axis] for axis in permutation(op, name, x.rank)]
                if not keeps_last_axis(name, perm):
                    break
                source = producer.inputs[0]
                op.attrs[name] = perm
            elif producer.type == "Mul" and name != "perm_v":
                factor = _factor(producer, x)
                if factor is None:
                    break
                source, value = factor
                op.attrs["scale"] = attribute(op, "scale") * value
            else:
                break
            op.replace_input(x, source)
            flow.delete_op(producer)
            flow.delete_var(x)
            changed = True
    return changed


def _factor(mul, product):
    """(the term, the factor) of ``mul`` (making ``product``) if it multiplies a term of the
    product's shape and type by a finite, nonzero constant of one element; else None."""
    for term, constant in (mul.inputs, mul.inputs[::-1]):
        value = _scalar(constant)
        if (value is not None and np.isfinite(value) and value != 0
                and (term.shape, term.dtype) == (product.shape, product.dtype)):
            return term, value
    return None


def _absorb_result(flow, op):
    """Write the result of Attention ``op`` through the Transpose that alone reads it; True
    if it does."""
    out = op.outputs[0]
    if len(out.consumers) != 1 or pinned(out) or out.ref:
        return False
    transpose = out.consumers[0]
    if transpose.type != "Transpose" or transpose.func is not op.func:
        return False
    current = permutation(op, "perm_out", out.rank)
    perm = [current[axis] for axis in transpose_permutation(transpose)]
    if not keeps_last_axis("perm_out", perm):
        return False
    target = transpose.outputs[0]
    flow.delete_op(transpose)
    op.replace_output(out, target)
    flow.delete_var(out)
    op.attrs["perm_out"] = perm
    return True
