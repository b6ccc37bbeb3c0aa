"""Resize: nearest, linear and cubic resampling of a tensor, with the semantics of ONNX Resize
(opsets 10 to 19).

``Resize(x)`` takes everything but the data as attributes (the ONNX importer reads ONNX's
constant ``roi``/``scales``/``sizes`` inputs and expands ``axes`` and
``keep_aspect_ratio_policy`` into them):

* ``sizes`` (int list, one per axis): the output shape. If absent it is
  ``floor(input * scale * (roi_end - roi_start))`` (the ROI factor only for tf_crop_and_resize).
* ``scales`` (float list, one per axis): the scale used in the coordinate transformation. If
  absent it is ``sizes / input``.
* ``roi`` (float list ``[start_0 .. start_r-1, end_0 .. end_r-1]``): the region of interest of
  ``tf_crop_and_resize``, in normalized input coordinates (default: the whole input).
* ``mode``: ``nearest`` (default), ``linear`` or ``cubic``.
* ``coordinate_transformation_mode``: ``half_pixel`` (default), ``half_pixel_symmetric``,
  ``pytorch_half_pixel``, ``align_corners``, ``asymmetric`` or ``tf_crop_and_resize``.
* ``nearest_mode``: ``round_prefer_floor`` (default), ``round_prefer_ceil``, ``floor``, ``ceil``.
* ``cubic_coeff_a`` (-0.75), ``exclude_outside`` (0), ``extrapolation_value`` (0.0) and
  ``antialias`` (0, linear and cubic only) as in ONNX.

The output is separable: along every axis that is not an identity (scale 1, same size, whole
ROI), each output position reads a few source positions (``taps``) with weights; the output is
the tensor product of the per-axis interpolations. Source indices outside the input are clamped
to the edge (ONNX's edge padding). With tf_crop_and_resize, an output element whose source
coordinate on any axis lies outside the input is ``extrapolation_value``. Two documented
choices where ONNX's reference code and its text differ: ``pytorch_half_pixel`` maps a length-1
output to coordinate 0 (the spec's formula), and ``exclude_outside`` does not apply to
``nearest`` (whose single source index is clamped).

:func:`axis_tables` computes the per-axis source indices and weights from shapes and
attributes alone; the reference below applies them in float64, and the CPU kernel bakes them
into constant tables.
"""

import dataclasses
import math

import numpy as np

from myelin.ops.common import FLOAT, NUMERIC, check_dtype, error
from myelin.ops.registry import Kind, OpDef, TensorType, register

MODES = ("nearest", "linear", "cubic")
TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
              "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")

ATTRS = {
    "sizes": None, "scales": None, "roi": None,
    "mode": "nearest", "coordinate_transformation_mode": "half_pixel",
    "nearest_mode": "round_prefer_floor", "cubic_coeff_a": -0.75, "exclude_outside": 0,
    "extrapolation_value": 0.0, "antialias": 0,
}


@dataclasses.dataclass(frozen=True)
class Params:
    """The checked attributes of one Resize op, every list with one entry per axis."""

    sizes: tuple
    scales: tuple
    roi: tuple          # (start_0, ..., start_r-1, end_0, ..., end_r-1)
    mode: str
    transform: str
    nearest_mode: str
    cubic_a: float
    exclude_outside: bool
    extrapolation: float
    antialias: bool


@dataclasses.dataclass
class AxisTable:
    """How one output axis reads its input axis.

    ``index[o, t]`` is the (clamped) source index of tap ``t`` of output position ``o`` and
    ``weight[o, t]`` its weight (float64); ``valid[o]`` is False where tf_crop_and_resize
    extrapolates (None when no position does).
    """

    index: np.ndarray
    weight: np.ndarray
    valid: np.ndarray | None

    @property
    def taps(self):
        return self.index.shape[1]


def params(op, shape):
    """The attributes of Resize ``op`` for an input of ``shape``, checked; raises ShapeError."""
    attrs = op.attrs
    rank = len(shape)
    if rank < 1:
        raise error(op, "cannot resize a scalar")
    mode = attrs.get_str("mode", ATTRS["mode"])
    transform = attrs.get_str("coordinate_transformation_mode",
                              ATTRS["coordinate_transformation_mode"])
    nearest_mode = attrs.get_str("nearest_mode", ATTRS["nearest_mode"])
    for name, value, allowed in [("mode", mode, MODES),
                                 ("coordinate_transformation_mode", transform, TRANSFORMS),
                                 ("nearest_mode", nearest_mode, NEAREST_MODES)]:
        if value not in allowed:
            raise error(op, f"{name} {value!r} is not one of {', '.join(allowed)}")
    antialias = bool(attrs.get_int("antialias", 0))
    if antialias and mode == "nearest":
        raise error(op, "antialias applies to linear and cubic modes, not nearest")
    exclude_outside = bool(attrs.get_int("exclude_outside", 0))
    cubic_a = attrs.get_float("cubic_coeff_a", ATTRS["cubic_coeff_a"])
    extrapolation = attrs.get_float("extrapolation_value", ATTRS["extrapolation_value"])
    if not math.isfinite(cubic_a):
        raise error(op, f"cubic_coeff_a {cubic_a} is not finite")

    roi = attrs.get_floats("roi")
    if not roi:
        roi = [0.0] * rank + [1.0] * rank
    if len(roi) != 2 * rank or not all(math.isfinite(v) for v in roi):
        raise error(op, f"roi {roi} must hold 2 x {rank} finite numbers (starts, then ends) "
                        f"for input shape {list(shape)}")
    crop = transform == "tf_crop_and_resize"

    sizes = attrs.get_ints("sizes")
    scales = attrs.get_floats("scales")
    if scales is not None and len(scales) == 0:
        scales = None
    if sizes is not None and len(sizes) == 0:
        sizes = None
    if sizes is None and scales is None:
        raise error(op, "needs sizes or scales")
    if scales is not None:
        if len(scales) != rank:
            raise error(op, f"scales {scales} need one entry per axis of input shape "
                            f"{list(shape)}")
        if not all(math.isfinite(s) and s > 0 for s in scales):
            raise error(op, f"scales {scales} must be positive numbers")
    if sizes is None:
        factors = [(roi[rank + a] - roi[a]) if crop else 1.0 for a in range(rank)]
        sizes = [int(math.floor(d * s * f)) for d, s, f in zip(shape, scales, factors)]
    if len(sizes) != rank:
        raise error(op, f"sizes {sizes} need one entry per axis of input shape {list(shape)}")
    if any(s < 0 for s in sizes):
        raise error(op, f"sizes {sizes} must not be negative")
    if any(d < 0 for d in shape):
        raise error(op, f"input shape {list(shape)} must be known")
    if any(d == 0 for d in shape) and any(s > 0 for s in sizes) and math.prod(sizes) > 0:
        raise error(op, f"cannot resize the empty input shape {list(shape)} to {sizes}")
    if scales is None:
        scales = [s / d for s, d in zip(sizes, shape)]
    return Params(tuple(sizes), tuple(float(s) for s in scales), tuple(roi), mode, transform,
                  nearest_mode, cubic_a, exclude_outside, extrapolation, antialias)


def _source_coordinates(p, axis, rank, length_in):
    """Source coordinates (float64) of the output positions of ``axis``, and their validity."""
    out = p.sizes[axis]
    scale = p.scales[axis]
    y = np.arange(out, dtype=np.float64)
    length = scale * length_in            # the fractional output length ONNX uses
    valid = None
    if p.transform == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif p.transform == "half_pixel_symmetric":
        offset = length_in / 2 * (1 - out / length)
        x = offset + (y + 0.5) / scale - 0.5
    elif p.transform == "pytorch_half_pixel":
        x = (y + 0.5) / scale - 0.5 if length > 1 else np.zeros(out)
    elif p.transform == "align_corners":
        x = y * (length_in - 1) / (length - 1) if length != 1 else np.zeros(out)
    elif p.transform == "asymmetric":
        x = y / scale
    else:  # tf_crop_and_resize
        start, end = p.roi[axis], p.roi[rank + axis]
        if length != 1:
            x = start * (length_in - 1) + y * (end - start) * (length_in - 1) / (length - 1)
        else:
            x = np.full(out, 0.5 * (start + end) * (length_in - 1))
        valid = (x >= 0) & (x <= length_in - 1)
        if valid.all():
            valid = None
    return x, valid


def _keys(distance, a):
    """The cubic convolution kernel (Keys) with parameter ``a`` at |distance|."""
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _is_identity(p, axis, rank, length_in):
    whole = (p.transform != "tf_crop_and_resize"
             or (math.isclose(p.roi[axis], 0.0, abs_tol=1e-12)
                 and math.isclose(p.roi[rank + axis], 1.0)))
    return p.sizes[axis] == length_in and math.isclose(p.scales[axis], 1.0) and whole


def axis_tables(p, shape):
    """One :class:`AxisTable` per axis of input ``shape``, None for identity axes."""
    rank = len(shape)
    return [None if _is_identity(p, axis, rank, shape[axis])
            else _axis_table(p, axis, rank, shape[axis]) for axis in range(rank)]


def _axis_table(p, axis, rank, length_in):
    x, valid = _source_coordinates(p, axis, rank, length_in)
    # The left neighbour is ceil(x) - 1, so the fraction r lies in (0, 1] (ONNX's convention).
    base = np.ceil(x) - 1
    r = x - base
    base = base.astype(np.int64)
    if p.mode == "nearest":
        pick = {"round_prefer_floor": r > 0.5, "round_prefer_ceil": r >= 0.5,
                "floor": r >= 1, "ceil": np.ones_like(r, dtype=bool)}[p.nearest_mode]
        index = (base + pick)[:, None]
        weight = np.ones(index.shape)
    else:
        scale = min(p.scales[axis], 1.0) if p.antialias else 1.0
        support = 1.0 if p.mode == "linear" else 2.0
        first = int(math.floor(-support / scale)) + 1
        offsets = np.arange(first, 1 - first + 1)            # 2 - 2 * first taps
        distance = (offsets[None, :] - r[:, None]) * scale
        if p.mode == "linear":
            weight = np.clip(1 - np.abs(distance), 0, 1)
        else:
            weight = _keys(distance, p.cubic_a)
        if p.antialias:
            weight = weight / weight.sum(axis=1, keepdims=True)
        index = base[:, None] + offsets[None, :]
        if p.exclude_outside:
            weight = np.where((index < 0) | (index >= length_in), 0.0, weight)
            total = weight.sum(axis=1, keepdims=True)
            weight = weight / np.where(total == 0, 1.0, total)
    index = np.clip(index, 0, max(length_in - 1, 0))
    if valid is not None:
        weight = np.where(valid[:, None], weight, 0.0)
    return AxisTable(index.astype(np.int64), weight.astype(np.float64), valid)


def extrapolation_value(p, dtype):
    """``extrapolation_value`` as an element of ``dtype`` (integers round and saturate)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return dtype.type(np.clip(np.round(p.extrapolation), info.min, info.max))
    return dtype.type(p.extrapolation)


def _infer(op):
    x = op.inputs[0]
    p = params(op, x.shape)
    check_dtype(op, x, NUMERIC if p.mode == "nearest" else FLOAT)
    return [TensorType(x.dtype, p.sizes)]


def _reference(op, inputs):
    x = inputs[0]
    p = params(op, x.shape)
    tables = axis_tables(p, x.shape)
    result = x
    invalid = np.zeros(p.sizes, dtype=bool)
    for axis, table in enumerate(tables):
        if table is None:
            continue
        gathered = np.take(result, table.index, axis=axis)   # axis -> (out, taps)
        if p.mode == "nearest":
            result = np.squeeze(gathered, axis=axis + 1)
        else:
            shape = [1] * gathered.ndim
            shape[axis:axis + 2] = table.weight.shape
            result = (gathered * table.weight.reshape(shape)).sum(axis=axis + 1)
        if table.valid is not None:
            shape = [1] * len(p.sizes)
            shape[axis] = len(table.valid)
            invalid = invalid | ~table.valid.reshape(shape)
    result = np.array(result, copy=True)
    if invalid.any():
        result[invalid] = extrapolation_value(p, result.dtype)
    return [result]


def _define_all():
    register(OpDef("Resize", Kind.OPAQUE, _infer, _reference, attrs=dict(ATTRS), inputs=(1, 1),
                   doc="nearest/linear/cubic resampling to sizes, as ONNX Resize"))


_define_all()
