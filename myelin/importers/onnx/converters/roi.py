"""ONNX RoiAlign onto myelin's RoiAlign (myelin/ops/roi.py). Opset 10 has no
``coordinate_transformation_mode``: it behaves as ``output_half_pixel``; opset 16 adds the
attribute, ``half_pixel`` by default."""

from myelin.importers.onnx.converters import converter


@converter("RoiAlign")
def _roi_align(ctx):
    default = "half_pixel" if ctx.opset >= 16 else "output_half_pixel"
    return ctx.op("RoiAlign", [ctx.input(0), ctx.input(1), ctx.input(2)],
                  {"mode": ctx.attr("mode", "avg"),
                   "output_height": ctx.attr("output_height", 1),
                   "output_width": ctx.attr("output_width", 1),
                   "sampling_ratio": ctx.attr("sampling_ratio", 0),
                   "spatial_scale": float(ctx.attr("spatial_scale", 1.0)),
                   "coordinate_transformation_mode": ctx.attr("coordinate_transformation_mode",
                                                              default)})
