"""ONNX ops that run along an axis: CumProd onto myelin's CumProd (myelin/ops/sampling.py), and
ReverseSequence as a GatherElements with constant indices (``sequence_lens`` is read as a
value at import)."""

import numpy as np

from myelin.importers.onnx.converters import converter


@converter("CumProd")
def _cumprod(ctx):
    return ctx.op("CumProd", [ctx.input(0)], {"axis": int(ctx.scalar(1)),
                                              "exclusive": bool(ctx.attr("exclusive", 0)),
                                              "reverse": bool(ctx.attr("reverse", 0))})


@converter("ReverseSequence")
def _reverse_sequence(ctx):
    """The first ``sequence_lens[b]`` steps of batch entry b reversed along the time axis; the
    rest copied."""
    x = ctx.input(0)
    lengths = ctx.ints(1)
    batch_axis, time_axis = ctx.attr("batch_axis", 1), ctx.attr("time_axis", 0)
    if x.rank < 2 or {batch_axis, time_axis} != {0, 1}:
        raise ctx.error(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 "
                        f"of an input of rank 2 or more")
    batch, steps = x.shape[batch_axis], x.shape[time_axis]
    if len(lengths) != batch or any(not 0 <= n <= steps for n in lengths):
        raise ctx.error(f"sequence_lens {lengths} must have {batch} entries in [0, {steps}]")
    t = np.arange(steps).reshape(1, steps)
    n = np.array(lengths, dtype=np.int64).reshape(batch, 1)
    index = np.where(t < n, n - 1 - t, t)                  # [batch, steps]
    if time_axis == 0:
        index = index.T
    index = index.reshape(index.shape + (1,) * (x.rank - 2))
    return ctx.op("GatherElements", [x, ctx.const(np.broadcast_to(index, x.shape).copy())],
                  {"axis": time_axis})
