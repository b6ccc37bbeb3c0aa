"""Shape queries: Shape (int32 vector of dimensions), Size (int32 element count), Rank (int32).

They are opaque to fusion; constant folding replaces them by constants once the input's shape
is known.
"""

import numpy as np

from myelin.ops.registry import Kind, OpDef, TensorType, register

# (op type, output shape given the input's rank, value given the input array, doc)
_QUERIES = [
    ("Shape", lambda rank: (rank,), lambda x: x.shape, "the dimensions of x"),
    ("Size", lambda rank: (), lambda x: x.size, "the number of elements of x"),
    ("Rank", lambda rank: (), lambda x: x.ndim, "the number of axes of x"),
]


def _query(out_shape, value):
    """The shape rule and reference of a query op."""
    def infer(op):
        return [TensorType("int32", out_shape(op.inputs[0].rank))]

    def reference(op, inputs):
        return [np.array(value(inputs[0]), np.int32)]
    return infer, reference


def _define_all():
    for optype, out_shape, value, doc in _QUERIES:
        infer, reference = _query(out_shape, value)
        register(OpDef(optype, Kind.OPAQUE, infer, reference, doc=f"int32: {doc}"))


_define_all()
