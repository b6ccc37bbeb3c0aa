"""ONNX Resize (opsets 10 to 19) and Upsample (opsets 7 to 9) onto myelin's Resize.

myelin's Resize takes roi, scales and sizes as attributes with one entry per axis; this
converter reads ONNX's constant inputs and expands ``axes`` and ``keep_aspect_ratio_policy``
(opset 18) into them.
"""

from myelin.importers.onnx.converters import converter

_PASSED = ("mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
           "exclude_outside", "extrapolation_value", "antialias")


def _spread(values, axes, rank, fill):
    """``values`` given for ``axes`` as a list over all ``rank`` axes (``fill`` elsewhere)."""
    full = [fill] * rank
    for value, axis in zip(values, axes):
        full[axis] = value
    return full


@converter("Resize")
def _resize(ctx):
    x = ctx.input(0)
    rank = x.rank
    axes = [ctx.axis(a, rank) for a in ctx.attr("axes", range(rank))]
    if ctx.opset < 11:
        roi, scales, sizes = None, ctx.floats(1), None
    else:
        roi, scales, sizes = ctx.floats(1), ctx.floats(2), ctx.ints(3)
    attrs = {name: ctx.attrs[name] for name in _PASSED if name in ctx.attrs}
    if roi:
        attrs["roi"] = (_spread(roi[:len(axes)], axes, rank, 0.0)
                        + _spread(roi[len(axes):], axes, rank, 1.0))
    if scales:
        attrs["scales"] = _spread(scales, axes, rank, 1.0)
    elif sizes:
        full = _spread(sizes, axes, rank, None)
        full = [x.shape[a] if d is None else d for a, d in enumerate(full)]
        ratios = [d / n for d, n in zip(full, x.shape)]
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            scale = (min if policy == "not_larger" else max)(ratios[a] for a in axes)
            ratios = [scale if a in axes else 1.0 for a in range(rank)]
            full = [int(scale * n + 0.5) if a in axes else n for a, n in enumerate(x.shape)]
        attrs["scales"], attrs["sizes"] = ratios, full
    else:
        raise ctx.error("needs scales or sizes")
    return ctx.op("Resize", [x], attrs)


@converter("Upsample")
def _upsample(ctx):
    """Upsample: asymmetric coordinates, nearest rounds down; scales an attribute before
    opset 9, an input after."""
    x = ctx.input(0)
    scales = list(ctx.attr("scales")) if ctx.opset < 9 else ctx.floats(1)
    return ctx.op("Resize", [x], {"mode": ctx.attr("mode", "nearest"),
                                  "coordinate_transformation_mode": "asymmetric",
                                  "nearest_mode": "floor", "scales": scales})
