"""Ops with side effects: ``Assign(target, value)`` writes ``value`` into ``target``.

Assign has no outputs. ``value`` must have the target's type and broadcast to its shape. The
reference writes in place into the array it receives for ``target``; the interpreter passes the
variable's own stored array (for a learnable variable, the one in its variable store).
"""

from myelin.ops.common import common_dtype, error, shape_fits
from myelin.ops.registry import Kind, OpDef, broadcast_shapes, register


def _assign_infer(op):
    target, value = op.inputs
    common_dtype(op, [target, value])
    if not shape_fits(broadcast_shapes(op, target.shape, value.shape), target.shape):
        raise error(op, f"value shape {list(value.shape)} does not broadcast to target shape "
                        f"{list(target.shape)}")
    return []


def _assign_reference(op, inputs):
    target, value = inputs
    target[...] = value
    return []


register(OpDef("Assign", Kind.OPAQUE, _assign_infer, _assign_reference, inputs=(2, 2),
               outputs=0, doc="write value into target (no outputs)"))
