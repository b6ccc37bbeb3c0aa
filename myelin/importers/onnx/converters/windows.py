"""ONNX window functions (HannWindow, HammingWindow, BlackmanWindow): the size is read as a
value at import, so the window is a constant computed in float64 and cast to
``output_datatype``."""

import numpy as np

from myelin.flow import dtypes
from myelin.importers.onnx import proto
from myelin.importers.onnx.converters import converter

_WINDOWS = {
    "HannWindow": lambda phase: np.sin(phase / 2) ** 2,
    "HammingWindow": lambda phase: 25 / 46 - (1 - 25 / 46) * np.cos(phase),
    "BlackmanWindow": lambda phase: 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2 * phase),
}


def window(op_type, size, periodic):
    """The float64 window of ``size`` points (``2 pi n / N``, N = size if periodic, else
    size - 1)."""
    span = size if periodic else size - 1
    n = np.arange(size, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        phase = 2 * np.pi * n / span if span else np.zeros(size)
    return _WINDOWS[op_type](phase)


@converter(*_WINDOWS)
def _window(ctx):
    size = int(ctx.scalar(0))
    if size < 0:
        raise ctx.error(f"size {size} must not be negative")
    ctx.check_size([size], "float64")      # (the window is computed in float64)
    dtype = proto.dtype_of(ctx.attr("output_datatype", 1), f"{ctx.op_type} {ctx.name}")
    values = window(ctx.op_type, size, bool(ctx.attr("periodic", 1)))
    return ctx.const(values.astype(dtypes.to_numpy(dtype)), dtype)
