"""Shape and type inference: every op's output types from its registry rule.

Outputs with no type or with unknown (-1) dimensions get the inferred type; an output whose
declared type contradicts the rule raises ShapeError naming the op. Ops of unknown types are
left for the compiler to report (all at once).
"""

from myelin.errors import ShapeError
from myelin.ops import registry
from myelin.ops.common import shape_fits


def infer_types(flow, ctx):
    """Fill in missing output types; returns True if any variable changed."""
    changed = False
    for func in flow.funcs.values():
        for op in flow.order(func):
            if registry.find(op.type) is None:
                continue
            types = registry.infer(op)
            registry.check_outputs(op, types)
            for var, inferred in zip(op.outputs, types):
                if not var.dtype:
                    var.dtype, var.shape = inferred.dtype, inferred.shape
                    changed = True
                elif var.dtype != inferred.dtype or not (shape_fits(inferred.shape, var.shape)
                                                         or shape_fits(var.shape, inferred.shape)):
                    raise ShapeError(f"op {op.name} ({op.type}): output {var.name} is declared "
                                     f"{var.type_string()}, but the op gives "
                                     f"{inferred.dtype}{list(inferred.shape)}")
                elif var.shape != inferred.shape and shape_fits(inferred.shape, var.shape):
                    var.shape = inferred.shape      # fill in dynamic dimensions
                    changed = True
    return changed

