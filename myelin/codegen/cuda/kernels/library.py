"""Steps done by a vendor library: matrix products (cuBLAS).

``MatMul`` and ``FusedMatMul`` become a :class:`GemmCall`: a strided batched GEMM described
with row-major matrices, which the runtime passes to cuBLAS (a row-major ``C = op(A) op(B)`` is
the column-major ``C^T = op(B)^T op(A)^T``, so it swaps the operands). A ``FusedMatMul``'s
epilogue is a point-wise kernel of its own that runs after the product, over the output in
place (the product is written into the output tensor, whose type and shape it has).
"""

import dataclasses

from myelin.codegen.cuda.kernels.base import CudaKernel
from myelin.codegen.cuda.kernels.elementwise import pointwise
from myelin.codegen.cuda.kernels.fused import epilogue, recipe_code
from myelin.plan.strides import broadcast_strides, collapse, contiguous_strides
from myelin.ops.fused import first_extra

DTYPES = ("float16", "float32", "float64")


@dataclasses.dataclass(frozen=True)
class GemmCall:
    """``C[i] = op(A[i]) op(B[i])`` for ``i`` in ``range(batch)``, row-major: op(A) is m x k,
    op(B) is k x n, C is m x n. ``lda``/``ldb``/``ldc`` are the row strides of the stored
    matrices (before the transposes), ``stride_a``/``stride_b``/``stride_c`` the elements
    from one batch entry to the next (0: the matrix is shared by every entry)."""

    step: str
    a: object
    b: object
    c: object
    dtype: str
    m: int
    n: int
    k: int
    transpose_a: bool
    transpose_b: bool
    batch: int
    lda: int
    ldb: int
    ldc: int
    stride_a: int
    stride_b: int
    stride_c: int


def _batch(step):
    """(batch, stride_a, stride_b, stride_c) of a product whose batch axes merge into one
    strided axis, or None."""
    a, b = step.inputs[:2]
    c = step.outputs[0]
    shape = c.shape[:-2]
    strides = [broadcast_strides(t.shape[:-2], shape) for t in (a, b)]
    matrix = [t.shape[-1] * t.shape[-2] for t in (a, b)]
    lists = [tuple(s * size for s in own) for own, size in zip(strides, matrix)]
    lists.append(tuple(s * c.shape[-1] * c.shape[-2] for s in contiguous_strides(shape)))
    merged, merged_strides = collapse(tuple(shape), lists)
    if len(merged) > 1:
        return None
    if not merged:
        return 1, 0, 0, 0
    return (merged[0],) + tuple(s[0] for s in merged_strides)


class MatMulKernel(CudaKernel):
    """``MatMul`` and ``FusedMatMul`` of float matrices as a cuBLAS call (and an epilogue)."""

    name = "MatMul"

    def supports(self, step, target):
        if step.type not in ("MatMul", "FusedMatMul"):
            return False
        a, b = step.inputs[:2]
        if not (len(a.shape) >= 2 and len(b.shape) >= 2
                and a.dtype == b.dtype == step.outputs[0].dtype and a.dtype in DTYPES
                and _batch(step) is not None):
            return False
        if step.type == "FusedMatMul":
            return epilogue(step) is not None
        return len(step.inputs) == 2

    def kernel_name(self, step):
        return step.type

    def variant(self, step, target):
        return f"{target.isa()}cublas"

    def generate(self, step, names):
        a, b = step.inputs[:2]
        c = step.outputs[0]
        transpose_a = step.attrs.get_bool("transpose_a", False)
        transpose_b = step.attrs.get_bool("transpose_b", False)
        m, n = c.shape[-2:]
        k = a.shape[-2] if transpose_a else a.shape[-1]
        batch, stride_a, stride_b, stride_c = _batch(step)
        calls = [GemmCall(step.name, a, b, c, c.dtype, m, n, k, transpose_a, transpose_b,
                          batch, a.shape[-1], b.shape[-1], n, stride_a, stride_b, stride_c)]
        if step.type == "FusedMatMul":
            typed = epilogue(step)
            calls.append(pointwise(names.unique(f"Epilogue_{step.name}"), step, c.shape,
                                   [c] + list(step.inputs[first_extra(step):]), [c],
                                   lambda values: recipe_code(typed, values)))
        return calls
