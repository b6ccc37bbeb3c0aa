"""ONNX Einsum, decomposed into Transpose, Reshape, Gather, Sum and MatMul.

The equation is parsed into one list of labels per operand (``...`` becomes placeholder labels,
aligned to the right and broadcast like NumPy) and the output labels (implicit form: the
ellipsis labels, then the letters used once, in alphabetical order). Each operand first takes
its diagonals (a label repeated in one term: the two axes are merged and a constant Gather
picks the diagonal) and sums out the labels no other term and not the output uses. Operands
are then contracted left to right: labels shared by the pair and needed later are batch axes,
shared labels not needed later are contracted, the rest are free, and the pair becomes one
MatMul of ``[batch..., free_a, contracted] x [batch..., contracted, free_b]`` (float types; a
broadcast Mul and Sum for integers). A last Sum and Transpose give the output order.
"""

import numpy as np

from myelin.importers.onnx.converters import converter

_MATMUL_TYPES = ("float16", "bfloat16", "float32", "float64")


def _product(values):
    return int(np.prod(values, dtype=np.int64))


def parse(equation, ranks):
    """(labels of each operand, output labels) of ``equation`` for operands of ``ranks``.
    Ellipsis dimensions get the labels "0", "1", ... (right-aligned across operands)."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"equation {equation!r} has {len(terms)} operands, the node "
                         f"{len(ranks)}")
    covered = []
    for term, rank in zip(terms, ranks):
        letters = len(term.replace("...", ""))
        if "..." in term:
            covered.append(rank - letters)
        elif letters != rank:
            raise ValueError(f"term {term!r} has {letters} labels for an operand of rank {rank}")
        if any(not c.isalpha() for c in term.replace("...", "")):
            raise ValueError(f"term {term!r} has a label that is not a letter")
    ellipsis_rank = max(covered + [0])
    if any(c < 0 for c in covered):
        raise ValueError(f"equation {equation!r} has more labels than its operands' ranks")
    hidden = [str(k) for k in range(ellipsis_rank)]

    def expand(term, rank):
        if "..." not in term:
            return list(term)
        before, after = term.split("...")
        count = rank - len(before) - len(after)
        return list(before) + hidden[ellipsis_rank - count:] + list(after)

    operands = [expand(term, rank) for term, rank in zip(terms, ranks)]
    if arrow:
        output = expand(rhs, len(rhs.replace("...", "")) + ellipsis_rank)
    else:
        letters = [c for term in terms for c in term.replace("...", "")]
        output = hidden + sorted(c for c in set(letters) if letters.count(c) == 1)
    if len(set(output)) != len(output):
        raise ValueError(f"output of {equation!r} repeats a label")
    used = {label for labels in operands for label in labels}
    if any(label not in used for label in output):
        raise ValueError(f"output of {equation!r} has a label no operand has")
    return operands, output


def _transpose(ctx, x, labels, order):
    perm = [labels.index(label) for label in order]
    if perm == list(range(len(perm))):
        return x
    return ctx.op("Transpose", [x], {"perm": perm})


def _sum(ctx, x, labels, drop):
    axes = [i for i, label in enumerate(labels) if label in drop]
    if not axes:
        return x, labels
    x = ctx.op("Sum", [x], {"axis": axes, "keepdims": False})
    return x, [label for label in labels if label not in drop]


def _diagonal(ctx, x, labels):
    """x with each repeated label reduced to its diagonal."""
    while len(set(labels)) != len(labels):
        label = next(lb for lb in labels if labels.count(lb) > 1)
        first, second = [i for i, lb in enumerate(labels) if lb == label][:2]
        size = x.shape[first]
        if x.shape[second] != size:
            raise ctx.error(f"label {label} has sizes {size} and {x.shape[second]}")
        rest = [i for i in range(len(labels)) if i not in (first, second)]
        x = ctx.op("Transpose", [x], {"perm": rest + [first, second]}) if \
            rest + [first, second] != list(range(len(labels))) else x
        x = ctx.reshape(x, [x.shape[i] for i in range(len(rest))] + [size * size])
        picks = ctx.const(np.arange(size, dtype=np.int64) * (size + 1))
        x = ctx.op("Gather", [x, picks], {"axis": len(rest)})
        labels = [labels[i] for i in rest] + [label]
    return x, labels


def _contract(ctx, a, la, b, lb, keep):
    """The pair (a, b) with shared labels not in ``keep`` summed over: (var, labels)."""
    # A shared label of size 1 on one side only (broadcast): sum it on the other side.
    for label in [lb_ for lb_ in la if lb_ in lb and lb_ not in keep]:
        size_a, size_b = a.shape[la.index(label)], b.shape[lb.index(label)]
        if size_a != size_b:
            if size_a == 1:
                a, la = _sum(ctx, a, la, {label})
            elif size_b == 1:
                b, lb = _sum(ctx, b, lb, {label})
            else:
                raise ctx.error(f"label {label} has sizes {size_a} and {size_b}")
    drop_a = {label for label in la if label not in lb and label not in keep}
    drop_b = {label for label in lb if label not in la and label not in keep}
    a, la = _sum(ctx, a, la, drop_a)
    b, lb = _sum(ctx, b, lb, drop_b)
    batch = [label for label in la if label in lb and label in keep]
    summed = [label for label in la if label in lb and label not in keep]
    free_a = [label for label in la if label not in lb]
    free_b = [label for label in lb if label not in la]
    size_a = dict(zip(la, a.shape))
    size_b = dict(zip(lb, b.shape))
    out_labels = batch + free_a + free_b
    batch_shape = [max(size_a[label], size_b[label]) for label in batch]
    out_shape = batch_shape + [size_a[label] for label in free_a] + \
        [size_b[label] for label in free_b]
    if a.dtype in _MATMUL_TYPES:
        a = _transpose(ctx, a, la, batch + free_a + summed)
        a = ctx.reshape(a, [size_a[label] for label in batch] +
                        [_product([size_a[label] for label in free_a]),
                         _product([size_a[label] for label in summed])])
        b = _transpose(ctx, b, lb, batch + summed + free_b)
        b = ctx.reshape(b, [size_b[label] for label in batch] +
                        [_product([size_b[label] for label in summed]),
                         _product([size_b[label] for label in free_b])])
        return ctx.reshape(ctx.product(a, b), out_shape), out_labels
    # Integers: a broadcast product over batch + free_a + free_b + summed, then a Sum.
    full = out_labels + summed
    a = ctx.reshape(_transpose(ctx, a, la, batch + free_a + summed),
                    [size_a.get(label, 1) for label in full])
    b = ctx.reshape(_transpose(ctx, b, lb, batch + free_b + summed),
                    [size_b.get(label, 1) for label in full])
    product = ctx.op("Mul", [a, b])
    return _sum(ctx, product, full, set(summed))


@converter("Einsum")
def _einsum(ctx):
    operands = ctx.inputs
    equation = ctx.attr("equation")
    equation = equation.decode() if isinstance(equation, bytes) else equation
    try:
        terms, output = parse(equation, [x.rank for x in operands])
    except ValueError as e:
        raise ctx.error(str(e)) from None
    prepared = []
    for i, (x, labels) in enumerate(zip(operands, terms)):
        x, labels = _diagonal(ctx, x, labels)
        others = {label for j, t in enumerate(terms) if j != i for label in t}
        x, labels = _sum(ctx, x, labels, set(labels) - others - set(output))
        prepared.append((x, labels))
    result, labels = prepared[0]
    for k in range(1, len(prepared)):
        later = {label for _, t in prepared[k + 1:] for label in t}
        x, lx = prepared[k]
        result, labels = _contract(ctx, result, labels, x, lx, later | set(output))
    result, labels = _sum(ctx, result, labels, set(labels) - set(output))
    result = _transpose(ctx, result, labels, output)
    if result.dtype != operands[0].dtype:
        result = ctx.cast(result, operands[0].dtype)
    return result
