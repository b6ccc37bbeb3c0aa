"""Fused ops, made by the fusion pass: ``Calculate``, ``FusedMatMul`` and ``FusedConv``.

``Calculate`` evaluates a :mod:`recipe <myelin.ops.recipe>` (attribute ``expr``) of
element-wise ops over its inputs, with NumPy broadcasting; reductions in the recipe reduce over
the op's ``axis`` attribute (all axes when absent) with its ``keepdims``. Each ``@k`` is
output k.

``FusedMatMul(a, b, x1, ..., xn)`` is a ``MatMul`` (with its transpose attributes) followed by
an element-wise epilogue ``expr`` with exactly one output, ``@0``. In the epilogue, ``%0`` is the
product and ``%1`` .. ``%n`` are the extra inputs ``x1`` .. ``xn`` (which broadcast to the
product's shape).

``FusedConv(x, w, [bias], x1, ..., xn)`` is a ``Conv`` (with its attributes; ``bias`` says
whether input 2 is the convolution's bias) followed by an epilogue ``expr`` in the same way, whose
extra inputs have the convolution's output shape or one element.

All are defined through the registry entries of the ops they contain, so the reference
interpreter runs optimized flows unchanged.
"""

from myelin.flow.attributes import Attributes
from myelin.ops import recipe as recipes
from myelin.ops.common import error
from myelin.ops.conv import CONV_ATTRS
from myelin.ops.registry import Kind, OpDef, TensorType, lookup, register

_REDUCTION_ATTRS = ("axis", "keepdims")
# The reductions a Calculate recipe may end with.
TRAILING_REDUCTIONS = frozenset({"Sum", "Max", "Min", "Mean", "Product"})


class ValueType:
    """The type of an intermediate value, shaped like a Variable for ``infer`` rules."""

    data = None

    def __init__(self, name, dtype, shape):
        self.name, self.dtype, self.shape = name, dtype, tuple(shape)

    @property
    def rank(self):
        return len(self.shape)

    def type_string(self):
        dims = "x".join(str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]" if self.shape else self.dtype


class RecipePart:
    """One operation inside a recipe, shaped like an Operation for registry rules."""

    def __init__(self, fused_op, op_type, inputs):
        self.name = f"{fused_op.name}[{op_type}]"
        self.type = op_type
        self.inputs = inputs
        self.attrs = Attributes()
        if lookup(op_type).kind == Kind.REDUCTION:
            for key in _REDUCTION_ATTRS:
                if key in fused_op.attrs:
                    self.attrs[key] = fused_op.attrs[key]


def _recipe(op):
    if "expr" not in op.attrs:
        raise error(op, "has no expr attribute")
    return recipes.parse(op.attrs["expr"])


def _check_part(fused_op, op_type):
    opdef = lookup(op_type)
    if opdef.kind not in (Kind.ELEMWISE, Kind.BROADCAST, Kind.REDUCTION):
        raise error(fused_op, f"{op_type} cannot be part of a fused recipe")
    return opdef


def _infer_recipe(op, recipe, inputs):
    """Output types of ``recipe`` applied to input types ``inputs``."""
    def apply(op_type, args):
        opdef = _check_part(op, op_type)
        part = RecipePart(op, op_type, args)
        (result,) = opdef.infer(part)
        return ValueType(part.name, result.dtype, result.shape)

    if recipe.input_count() > len(inputs):
        raise error(op, f"recipe reads %{recipe.input_count() - 1}, but the op has "
                        f"{len(inputs)} inputs")
    return [TensorType(v.dtype, v.shape) for v in recipes.evaluate(recipe, inputs, apply)]


def _run_recipe(op, recipe, inputs):
    def apply(op_type, args):
        part = RecipePart(op, op_type, [ValueType("", str(a.dtype), a.shape) for a in args])
        (result,) = lookup(op_type).reference(part, args)
        return result

    return recipes.evaluate(recipe, inputs, apply)


def _calculate_infer(op):
    return _infer_recipe(op, _recipe(op), list(op.inputs))


def _calculate_reference(op, inputs):
    return _run_recipe(op, _recipe(op), inputs)


def _matmul_part(op, inputs):
    part = RecipePart(op, "MatMul", inputs)
    for key in ("transpose_a", "transpose_b", "weights"):
        if key in op.attrs:
            part.attrs[key] = op.attrs[key]
    return part


def conv_inputs(op):
    """How many of a Conv's or FusedConv's inputs are the convolution's (2 or 3)."""
    if op.type == "FusedConv":
        return 3 if op.attrs.get_bool("bias", False) else 2
    return len(op.inputs)


def first_extra(op):
    """The position of a FusedMatMul's or FusedConv's first epilogue input."""
    return conv_inputs(op) if op.type == "FusedConv" else 2


def conv_part(op):
    """The Conv a FusedConv ``op`` computes before its epilogue (``op`` itself if a Conv)."""
    if op.type == "Conv":
        return op
    part = RecipePart(op, "Conv", list(op.inputs[:conv_inputs(op)]))
    for key, value in op.attrs.items():
        if key not in ("expr", "bias"):
            part.attrs[key] = value
    return part


def _host(op):
    """The MatMul or Conv a fused product computes before its epilogue."""
    return conv_part(op) if op.type == "FusedConv" else _matmul_part(op, op.inputs[:2])


def _fused_product_infer(op):
    recipe = _recipe(op)
    if recipe.outputs != 1:
        raise error(op, f"the epilogue must have one output, not {recipe.outputs}")
    host = _host(op)
    (product,) = lookup(host.type).infer(host)
    extras = list(op.inputs[first_extra(op):])
    for x in extras if op.type == "FusedConv" else ():
        if tuple(x.shape) != tuple(product.shape) and any(d != 1 for d in x.shape):
            raise error(op, f"epilogue input {x.name} of shape {list(x.shape)} must have the "
                            f"convolution's shape {list(product.shape)} or one element")
    values = [ValueType(f"{op.name}[{host.type}]", product.dtype, product.shape)] + extras
    (result,) = _infer_recipe(op, recipe, values)
    if result.shape != product.shape:
        raise error(op, f"the epilogue changes the {host.type} result's shape "
                        f"{list(product.shape)} to {list(result.shape)}")
    return [result]


def _fused_product_reference(op, inputs):
    host, split = _host(op), first_extra(op)
    (product,) = lookup(host.type).reference(host, inputs[:split])
    return _run_recipe(op, _recipe(op), [product] + list(inputs[split:]))


def _epilogue_operands(op):
    return [None] + list(range(first_extra(op), len(op.inputs)))


register(OpDef("Calculate", Kind.OPAQUE, _calculate_infer, _calculate_reference,
               attrs={"expr": None, "axis": None, "keepdims": False}, inputs=(1, None),
               outputs=None, doc="fused element-wise ops and trailing reductions (a recipe)",
               recipe_operands=lambda op: list(range(len(op.inputs)))))
register(OpDef("FusedMatMul", Kind.OPAQUE, _fused_product_infer, _fused_product_reference,
               attrs={"expr": None, "transpose_a": False, "transpose_b": False,
                      "weights": ""},
               inputs=(2, None), doc="a matrix product with a fused element-wise epilogue",
               recipe_operands=_epilogue_operands))
register(OpDef("FusedConv", Kind.OPAQUE, _fused_product_infer, _fused_product_reference,
               attrs=dict(CONV_ATTRS, channel_block=0, input_block=0, winograd=0, expr=None,
                          bias=False),
               inputs=(2, None),
               doc="a convolution with a fused element-wise epilogue",
               recipe_operands=_epilogue_operands))
