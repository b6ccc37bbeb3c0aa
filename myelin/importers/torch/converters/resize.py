"""Resampling: PyTorch's upsampling ops (``interpolate``'s nearest, nearest-exact, linear,
bilinear, trilinear, bicubic, antialiased) as myelin's Resize, and ``grid_sampler`` as
GridSample.

PyTorch maps an output position to the input with ``1 / scale_factor`` when a scale factor was
given, else with input / output sizes; both are Resize's ``scales`` (the output size is the
node's). Nearest is ONNX's ``asymmetric`` + ``floor``, nearest-exact ``half_pixel`` +
``round_prefer_ceil``; linear and cubic are ``half_pixel`` (negative source coordinates clamp
to the edge in both), or ``align_corners``.
"""

from myelin.importers.torch.converters import converter


def _resize(ctx, mode, transform, nearest_mode=None, antialias=False):
    x = ctx.tensor("input" if "input" in ctx.args else "self")
    sizes = list(ctx.out_shape)
    attrs = {"sizes": sizes, "mode": mode, "coordinate_transformation_mode": transform}
    factors = ctx.args.get("scale_factors")
    if factors is None:
        # The .default overloads: scales_h, scales_w (or scales, scales_d) per axis.
        factors = [ctx.args.get(name) for name in ("scales_d", "scales_h", "scales_w", "scales")
                   if name in ctx.args]
        factors = factors if factors and all(f is not None for f in factors) else None
    if factors is not None and transform != "align_corners":
        spatial = x.rank - 2
        factors = list(factors) * spatial if len(factors) == 1 else list(factors)
        attrs["scales"] = [1.0, 1.0] + [float(f) for f in factors]
    if nearest_mode:
        attrs["nearest_mode"] = nearest_mode
    if mode == "cubic":
        attrs["cubic_coeff_a"] = -0.5 if antialias else -0.75
    if antialias:
        attrs["antialias"] = 1
    return ctx.cast(ctx.op("Resize", [ctx.widened(x)], attrs), x.dtype)


@converter("aten.upsample_nearest1d", "aten.upsample_nearest2d", "aten.upsample_nearest3d")
def _nearest(ctx):
    return _resize(ctx, "nearest", "asymmetric", "floor")


@converter("aten._upsample_nearest_exact1d", "aten._upsample_nearest_exact2d",
           "aten._upsample_nearest_exact3d")
def _nearest_exact(ctx):
    return _resize(ctx, "nearest", "half_pixel", "round_prefer_ceil")


def _corners(ctx):
    return "align_corners" if ctx.get("align_corners", False) else "half_pixel"


@converter("aten.upsample_linear1d", "aten.upsample_bilinear2d", "aten.upsample_trilinear3d")
def _linear(ctx):
    return _resize(ctx, "linear", _corners(ctx))


@converter("aten.upsample_bicubic2d")
def _bicubic(ctx):
    return _resize(ctx, "cubic", _corners(ctx))


@converter("aten._upsample_bilinear2d_aa")
def _bilinear_aa(ctx):
    return _resize(ctx, "linear", _corners(ctx), antialias=True)


@converter("aten._upsample_bicubic2d_aa")
def _bicubic_aa(ctx):
    return _resize(ctx, "cubic", _corners(ctx), antialias=True)


@converter("aten.grid_sampler_2d", "aten.grid_sampler")
def _grid_sampler(ctx):
    x, grid = ctx.tensor("input"), ctx.tensor("grid")
    mode = {0: "linear", 1: "nearest", 2: "cubic"}[int(ctx["interpolation_mode"])]
    padding = {0: "zeros", 1: "border", 2: "reflection"}[int(ctx["padding_mode"])]
    return ctx.op("GridSample", [x, ctx.cast(grid, x.dtype)],
                  {"mode": mode, "padding_mode": padding,
                   "align_corners": bool(ctx["align_corners"])})
