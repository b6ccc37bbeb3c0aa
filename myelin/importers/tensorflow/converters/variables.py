"""Where values come from: constants, placeholders, TensorFlow variables (TF1 ``VariableV2``
and resource variables read through handles), and the identity ops around them.

Placeholders that are graph inputs never reach a converter (the importer makes their input
variables); a placeholder that does is a captured variable handle of a TF2 function, or has a
default.
"""

from myelin.importers.tensorflow.converters import converter
from myelin.importers.tensorflow.context import Resource


@converter("Const")
def _const(ctx):
    return ctx.const(ctx.attr("value"), ctx.dtype("dtype"))


@converter("Placeholder", "PlaceholderV2")
def _placeholder(ctx):
    """A captured resource (a TF2 function's variable handle)."""
    return Resource(ctx.importer.variable(ctx.name))


@converter("PlaceholderWithDefault")
def _placeholder_with_default(ctx):
    return ctx.input(0)


@converter("VarHandleOp")
def _var_handle(ctx):
    shape = ctx.attr("shape", None)
    return Resource(ctx.importer.variable(ctx.name, ctx.dtype("dtype"), shape))


@converter("ReadVariableOp")
def _read_variable(ctx):
    handle = ctx.input(0)
    if not isinstance(handle, Resource):
        raise ctx.error("reads a tensor, not a variable handle")
    return handle.var


@converter("VariableV2", "Variable")
def _variable(ctx):
    return ctx.importer.variable(ctx.name, ctx.dtype("dtype"), ctx.attr("shape", None))


@converter("Identity", "Snapshot", "StopGradient", "PreventGradient", "CheckNumerics",
           "EnsureShape")
def _identity(ctx):
    return ctx.input(0)


@converter("IdentityN")
def _identity_n(ctx):
    return list(ctx.inputs)
