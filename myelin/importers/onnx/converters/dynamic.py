"""ONNX ops whose output shape depends on the values of their inputs (NonZero,
NonMaxSuppression, Unique, Compress; computed by :mod:`myelin.importers.onnx.hostops`).

In a flow every shape is known at import, so these convert only when the inputs deciding
their shape are known then: constants (the ops are then computed at import), or values
computed from graph inputs, which makes the importer specialize on those inputs. Compress with
a known condition keeps its data a run-time value: a Gather of the kept indices. Where the
deciding input is a run-time value, a model run by :class:`~myelin.importers.onnx.OnnxModel`
runs the op on the host between compiled stages (:mod:`myelin.importers.onnx.staged`), which
never asks these converters; what reaches them then (an op inside a Loop or Scan body, on the
loop's values) is an UnsupportedOpError saying why.
"""

import numpy as np

from myelin.errors import UnsupportedOpError
from myelin.importers.onnx import hostops
from myelin.importers.onnx.converters import converter


def _known(ctx, index):
    """The value of input ``index``, which decides the node's output shape (NeedsInputValues
    when it is computed from graph inputs); UnsupportedOpError for a run-time value."""
    var = ctx.input(index)
    if var.data is None and not ctx.importer.graph_inputs_feeding(var):
        raise UnsupportedOpError(
            f"node {ctx.name} ({ctx.op_type}): the shape of its output depends on the values "
            f"of input {index} ({var.name}), computed at run time inside a subgraph; myelin "
            f"compiles loop bodies for fixed shapes, and runs such ops on the host only "
            f"between the compiled stages of a model's main graph and of its If branches",
            [ctx.name])
    return ctx.value(index)


@converter("NonZero", "NonMaxSuppression", "Unique")
def _computed(ctx):
    op = hostops.find(ctx.op_type)
    values = [_known(ctx, i) if ctx.has(i) else None for i in range(len(ctx))]
    return [ctx.const(result) for result in op.compute(ctx.attrs, values,
                                                       f"node {ctx.name} ({ctx.op_type})")]


@converter("Compress")
def _compress(ctx):
    x = ctx.input(0)
    axis, kept = hostops.compress_selection(x.shape, ctx.attrs, _known(ctx, 1),
                                            f"node {ctx.name} (Compress)")
    if axis is None:
        x = ctx.reshape(x, [int(np.prod(x.shape, dtype=np.int64))])
    return ctx.op("Gather", [x, ctx.const(kept)], {"axis": axis or None})
