"""What every importer's converters share: adding myelin ops to the function being imported,
folded into constants at once when they read only constants.

Each importer's node context (:class:`myelin.importers.onnx.context.NodeContext`,
:class:`myelin.importers.tensorflow.context.NodeContext`) derives from
:class:`ConverterContext` and adds what its format's nodes have (inputs, attributes).
"""

import numpy as np

from myelin import limits, ops
from myelin.errors import ShapeError
from myelin.flow import dtypes
from myelin.optimize import fold

# Constants computed while importing may be as large as this (the weights of light models
# are built by ConstantOfShape); larger results stay ops, computed at run time into the
# instance, which the compiler checks against the size limit (myelin.limits).
FOLD_LIMIT = 64 << 20


# Types the pools, convolutions and resizes compute in float32 (which holds 8-bit integers
# exactly), the result converted back.
WIDENED_TYPES = dtypes.REDUCED_FLOAT_TYPES | {"int8", "uint8"}


class ConverterContext:
    """One node being converted. Subclasses set ``b`` (the flow Builder of the imported
    function) and define ``name`` and ``op_type`` (the node's name and type, for messages)."""

    b = None

    def error(self, message):
        """A ShapeError about this node."""
        return ShapeError(f"node {self.name} ({self.op_type}): {message}")

    def const(self, value, dtype=None):
        """A constant variable from a number or array (of ``dtype`` if given)."""
        return self.b.const(np.asarray(value), dtype)

    def op(self, op_type, inputs, attrs=None, outputs=1):
        """Add a myelin op; returns its output variable (a list if ``outputs`` > 1).

        Attributes whose value is None are left out. An op that reads only constants is
        evaluated at once, its outputs becoming constants. An output over the size limit
        raises LimitError (:mod:`myelin.limits`).
        """
        attrs = {k: v for k, v in (attrs or {}).items() if v is not None}
        op = self.b._make(op_type, list(inputs), attrs=attrs)
        results = list(op.outputs)
        for var in results:
            self.check_size(var.shape, var.dtype)
        arrays = fold.evaluate(op, min(FOLD_LIMIT, limits.max_tensor_bytes()))
        if arrays is not None:
            fold.replace_by_constants(self.b.flow, op, arrays)
        if outputs == 1 and len(results) == 1:
            return results[0]
        return results

    def check_size(self, shape, dtype):
        """LimitError if a tensor of ``shape`` and ``dtype`` that this node makes would be
        over the size limit; converters that build arrays from values call it first."""
        limits.check_tensor(shape, dtypes.itemsize(dtype),
                            f"node {self.name} ({self.op_type}): a {dtype} tensor of shape "
                            f"{list(shape)}")

    def cast(self, var, dtype):
        """``var`` converted to ``dtype`` (itself if it already is)."""
        if var.dtype == dtypes.canonical(dtype):
            return var
        return self.op("Cast", [var], {"dtype": dtypes.canonical(dtype)})

    def widened(self, var):
        """``var`` in float32 if its type is one of WIDENED_TYPES, else itself."""
        return self.cast(var, "float32") if var.dtype in WIDENED_TYPES else var

    def product(self, a, b, transpose_a=False, transpose_b=False):
        """A MatMul of ``a`` and ``b`` (either read transposed); float16 and bfloat16
        operands are multiplied in float32 and the product rounded back, and a B that is
        constant weights (once folded) stays in their type (the ``weights`` attribute: exact,
        its values came from that type)."""
        attrs = {"transpose_a": bool(transpose_a) or None,
                 "transpose_b": bool(transpose_b) or None}
        if a.dtype not in dtypes.REDUCED_FLOAT_TYPES:
            return self.op("MatMul", [a, b], attrs)
        result = self.op("MatMul", [self.cast(a, "float32"), self.cast(b, "float32")],
                         dict(attrs, weights=a.dtype))
        return self.cast(result, a.dtype)

    def reshape(self, var, shape):
        """``var`` in ``shape`` (itself if it already has it)."""
        shape = tuple(int(d) for d in shape)
        if var.shape == shape:
            return var
        return self.op("Reshape", [var], {"shape": list(shape)})


def same_op(op_type):
    """The converter of a node that is one myelin op of type ``op_type`` on the same inputs,
    with those of the op's attributes that the node has."""
    declared = ops.lookup(op_type).attrs

    def convert(ctx):
        return ctx.op(op_type, ctx.inputs, {name: ctx.attr(name, None) for name in declared})
    return convert


def one_to_one(front_end, converter):
    """Give each op the registry names for ``front_end`` (:func:`myelin.ops.named`) the
    converter :func:`same_op`, through the importer's ``converter(name)`` decorator."""
    for name, op_type in ops.named(front_end).items():
        converter(name)(same_op(op_type))
