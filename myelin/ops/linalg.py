"""Matrix multiplication.

``MatMul(a, b)`` takes inputs of rank 2 or more (vectors are not promoted: reshape them to
[1, n] or [n, 1]). The last two axes are the matrices, optionally transposed by the bool
attributes ``transpose_a``/``transpose_b``; leading axes are batch axes that broadcast like
``np.matmul``. The output shape is ``batch + [m, n]``. The str attribute ``weights``
("bfloat16" or "float16"; empty by default) stores a constant float32 B in that type, each
weight rounded to nearest (:mod:`myelin.optimize.weight_storage`); the product is still
float32. It changes nothing where B is not constant float32 weights.
"""

import numpy as np

from myelin.errors import ShapeError
from myelin.flow import dtypes
from myelin.ops.common import NUMERIC, common_dtype, error
from myelin.ops.registry import Kind, OpDef, TensorType, attribute, broadcast_shapes, register


# The types a float32 product's constant B may be stored in ("": its own).
WEIGHT_STORAGE = ("", "bfloat16", "float16")


def _matrix(shape, transpose):
    rows, cols = shape[-2:]
    return (cols, rows) if transpose else (rows, cols)


def _matmul_infer(op):
    a, b = op.inputs
    dtype = common_dtype(op, [a, b], NUMERIC)
    shapes = f"{list(a.shape)} and {list(b.shape)}"
    if a.rank < 2 or b.rank < 2:
        raise error(op, f"inputs must have rank 2 or more, got shapes {shapes}")
    m, k = _matrix(a.shape, attribute(op, "transpose_a"))
    k2, n = _matrix(b.shape, attribute(op, "transpose_b"))
    if k != k2 and -1 not in (k, k2):
        raise error(op, f"inner dimensions {k} and {k2} of shapes {shapes} differ")
    if attribute(op, "weights") not in WEIGHT_STORAGE:
        raise error(op, f"weights {attribute(op, 'weights')!r} is not one of "
                        f"{', '.join(repr(t) for t in WEIGHT_STORAGE)}")
    try:
        batch = broadcast_shapes(op, a.shape[:-2], b.shape[:-2])
    except ShapeError:
        raise error(op, f"batch dimensions of shapes {shapes} do not broadcast") from None
    return [TensorType(dtype, batch + (m, n))]


def _matmul_reference(op, inputs):
    a, b = inputs
    if attribute(op, "transpose_a"):
        a = np.swapaxes(a, -1, -2)
    if attribute(op, "transpose_b"):
        b = np.swapaxes(b, -1, -2)
    storage = attribute(op, "weights")
    if storage and op.inputs[1].fixed and op.inputs[1].dtype == dtypes.DT_FLOAT32:
        b = np.asarray(b).astype(dtypes.to_numpy(storage)).astype(b.dtype)
    return [np.matmul(a, b)]


def _matmul_gradient(g):
    """dA and dB of C = op(A) op(B), each a product of dC and the other input, transposed as
    the flags ask (batch axes that were broadcast are summed back by the gradient pass)."""
    a, b, dc = g.input(0), g.input(1), g.dy
    ta, tb = attribute(g.op, "transpose_a"), attribute(g.op, "transpose_b")
    if g.needs(0):
        if ta:    # A^T = (dC op(B)^T)^T = op(B) dC^T
            term = g.b.matmul(b, dc, transpose_a=tb, transpose_b=True)
        else:     # dC op(B)^T
            term = g.b.matmul(dc, b, transpose_b=not tb)
        g.add(0, term)
    if g.needs(1):
        if tb:    # B^T = op(A)^T dC, so B = dC^T op(A)
            term = g.b.matmul(dc, a, transpose_a=True, transpose_b=ta)
        else:     # op(A)^T dC
            term = g.b.matmul(a, dc, transpose_a=not ta)
        g.add(1, term)


register(OpDef("MatMul", Kind.OUT_ELEMWISE_FUSABLE, _matmul_infer, _matmul_reference,
               attrs={"transpose_a": False, "transpose_b": False, "weights": ""},
               inputs=(2, 2),
               doc="batched matrix product with optional transposes",
               gradient=_matmul_gradient))
