"""Matrix products: ``linear`` and ``matmul`` (kept whole by export), ``mm``, ``bmm``,
``addmm``, ``baddbmm`` and the vector forms, each one myelin MatMul (a transposed operand
is a MatMul attribute, never a copy), plus the element-wise scale and bias that fusion puts
into the product's epilogue.

``linear``'s weight stays as PyTorch stores it, [out, in], read with ``transpose_b``: a
constant weight is packed once at compile time either way, and no transposed copy of it is
ever made.
"""

from myelin.importers.torch.converters import converter


def matmul(ctx, a, b, transpose_b=False):
    """NumPy's matmul (``torch.matmul``): a vector operand becomes a one-row or one-column
    matrix, and the axis it added is dropped from the result. ``transpose_b`` reads ``b``'s
    last two axes swapped (b a matrix or more)."""
    a2 = ctx.reshape(a, (1,) + a.shape) if a.rank == 1 else a
    b2 = ctx.reshape(b, b.shape + (1,)) if b.rank == 1 else b
    result = ctx.product(a2, b2, transpose_b=transpose_b and b.rank > 1)
    shape = result.shape
    if b.rank == 1:
        shape = shape[:-1]
    if a.rank == 1:
        shape = shape[:-2] + shape[-1:] if b.rank != 1 else shape[:-1]
    return ctx.reshape(result, shape)


@converter("aten.linear.default", preserve=True)
def _linear(ctx):
    """x W^T + b."""
    x, weight = ctx.tensor("input"), ctx.tensor("weight")
    y = matmul(ctx, x, weight, transpose_b=True) if weight.rank == 2 else matmul(ctx, x, weight)
    bias = ctx.args.get("bias")
    if bias is not None:
        y = ctx.op("Add", [y, ctx.cast(bias, y.dtype)])
    return y


@converter("aten.matmul.default", preserve=True)
def _matmul(ctx):
    return matmul(ctx, ctx.tensor("self"), ctx.tensor("other"))


@converter("aten.mm", "aten.bmm")
def _mm(ctx):
    return ctx.product(ctx.tensor("self"), ctx.tensor("mat2"))


@converter("aten.dot", "aten.vdot", "aten.mv")
def _dot(ctx):
    other = "tensor" if "tensor" in ctx.args else "vec"
    return matmul(ctx, ctx.tensor("self"), ctx.tensor(other))


def _scaled_sum(ctx, bias, result, beta, alpha):
    """beta * bias + alpha * result."""
    if alpha != 1:
        result = ctx.op("Mul", [result, ctx.scalar(alpha, result.dtype)])
    if bias is None or beta == 0:
        return result
    bias = ctx.cast(bias, result.dtype)
    if beta != 1:
        bias = ctx.op("Mul", [bias, ctx.scalar(beta, result.dtype)])
    return ctx.op("Add", [result, bias])


@converter("aten.addmm", "aten.baddbmm")
def _addmm(ctx):
    """beta * self + alpha * (mat1 @ mat2) (batch1 @ batch2 for baddbmm)."""
    first, second = ("mat1", "mat2") if "mat1" in ctx.args else ("batch1", "batch2")
    result = ctx.product(ctx.tensor(first), ctx.tensor(second))
    return _scaled_sum(ctx, ctx["self"], result, ctx.get("beta", 1), ctx.get("alpha", 1))


@converter("aten.addmv")
def _addmv(ctx):
    result = matmul(ctx, ctx.tensor("mat"), ctx.tensor("vec"))
    return _scaled_sum(ctx, ctx["self"], result, ctx.get("beta", 1), ctx.get("alpha", 1))


@converter("aten.outer", "aten.ger")
def _outer(ctx):
    a, b = ctx.tensor("self"), ctx.tensor("vec2")
    return ctx.op("Mul", [ctx.reshape(a, (a.shape[0], 1)), b])
