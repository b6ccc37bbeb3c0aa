"""Region-of-interest pooling: RoiAlign (ONNX RoiAlign, opsets 10 and 16, as ONNX Runtime
computes it).

``RoiAlign(x, rois, batch_indices)``: x is ``[N, C, H, W]``, rois ``[R, 4]`` (x1, y1, x2, y2
in the coordinates of the image x was computed from, of x's type), batch_indices ``[R]``
(int64 or int32, each in [0, N): others raise InputError at run time). The output is
``[R, C, output_height, output_width]``: each ROI is scaled by ``spatial_scale``, shifted by
-0.5 (``coordinate_transformation_mode`` ``half_pixel``, ONNX 16's default) or not
(``output_half_pixel``, the only behaviour of opset 10; there a ROI is at least 1x1), and cut
into output_height x output_width bins. Each bin takes a grid of samples, ``sampling_ratio``
per axis, or when it is 0 ``ceil(roi extent / output size)`` (adaptive, per ROI), at the
centres of the grid's cells; a sample is the bilinear interpolation of x at that point.
``mode`` ``avg`` averages a bin's samples; ``max`` takes, as ONNX Runtime and ONNX's reference
do, the largest of the four weighted corner values ``w_k * x_k`` of each sample (not of the
interpolated values), over the bin's samples.

Per axis (:func:`axis_samples`), a sample coordinate below -1 or above the size (or NaN)
marks the sample empty: its four weights are 0 and it reads the first element of the plane
(so it adds 0 to an average and offers 0 to a maximum, as in ONNX Runtime). Otherwise the
coordinate is raised to 0, and one at or past the last element is moved onto it. A bin with
no samples (an empty or NaN ROI extent under adaptive sampling) gives 0. Adaptive sample
counts are at most :func:`adaptive_limit` per axis (bins many times larger than the map), so
no ROI costs unbounded work; ONNX Runtime takes them all.

The float64 reference below and the CPU kernel (myelin/codegen/llvm/kernels/roi.py) compute
the same arithmetic in the same order, that of ONNX Runtime.
"""

import itertools
import math

import numpy as np

from myelin.errors import InputError
from myelin.ops.common import FLOAT, INDEX, check_dtype, error
from myelin.ops.registry import Kind, OpDef, TensorType, attribute, register

MODES = ("avg", "max")
COORDINATE_MODES = ("half_pixel", "output_half_pixel")


def adaptive_limit(size):
    """The most samples adaptive sampling takes per bin along an axis of ``size``."""
    return 2 * size + 64


def params(op):
    """(mode, output_height, output_width, sampling_ratio, spatial_scale, half_pixel) of a
    RoiAlign op, checked."""
    mode = attribute(op, "mode")
    if mode not in MODES:
        raise error(op, f"attribute mode={mode!r} must be one of {', '.join(MODES)}")
    coordinates = attribute(op, "coordinate_transformation_mode")
    if coordinates not in COORDINATE_MODES:
        raise error(op, f"attribute coordinate_transformation_mode={coordinates!r} must be one "
                        f"of {', '.join(COORDINATE_MODES)}")
    height, width = attribute(op, "output_height"), attribute(op, "output_width")
    if height < 1 or width < 1:
        raise error(op, f"output_height={height} and output_width={width} must be at least 1")
    ratio = attribute(op, "sampling_ratio")
    if ratio < 0:
        raise error(op, f"attribute sampling_ratio={ratio} must be 0 (adaptive) or more")
    scale = attribute(op, "spatial_scale")
    return mode, height, width, ratio, scale, coordinates == "half_pixel"


def _infer(op):
    x, rois, batch = op.inputs
    mode, height, width, _, _, _ = params(op)
    check_dtype(op, x, FLOAT)
    check_dtype(op, batch, INDEX)
    if rois.dtype != x.dtype:
        raise error(op, f"rois {rois.name} is {rois.type_string()}, x is {x.type_string()}: "
                        f"they must have the same type")
    if x.rank != 4:
        raise error(op, f"input {x.name} must have shape [N, C, H, W], got {list(x.shape)}")
    count = rois.shape[0] if rois.rank == 2 else -1
    if rois.rank != 2 or rois.shape[1] != 4 or batch.shape != (count,):
        raise error(op, f"rois {rois.name} must have shape [R, 4] and batch_indices "
                        f"{batch.name} shape [R], got {list(rois.shape)} and "
                        f"{list(batch.shape)}")
    out = (count, x.shape[1], height, width)
    if 0 in x.shape[2:] and count and x.shape[1]:
        raise error(op, f"cannot sample from input {x.name} of shape {list(x.shape)}, which "
                        f"has an empty spatial axis")
    return [TensorType(x.dtype, out)]


def grid_size(extent, bins, ratio, size):
    """Samples per bin along an axis: ``ratio``, or adaptive for a ROI ``extent`` cut into
    ``bins`` (0 for an extent that is not a positive number)."""
    if ratio > 0:
        return ratio
    per_bin = extent / bins
    if not per_bin > 0:
        return 0
    return int(min(math.ceil(min(per_bin, 1e18)), adaptive_limit(size)))


def axis_samples(start, extent, bins, ratio, size):
    """The samples of a ROI along one axis of ``size``: (low, high, weight of high, valid),
    arrays of shape [bins, grid], and the grid size. ``start`` and ``extent`` are the ROI's
    in x's coordinates."""
    grid = grid_size(extent, bins, ratio, size)
    bin_size = extent / bins
    p = np.arange(bins, dtype=np.float64)[:, None]
    i = np.arange(grid, dtype=np.float64)[None, :]
    with np.errstate(invalid="ignore"):
        v = (start + p * bin_size) + ((i + 0.5) * bin_size) / grid
        valid = (v >= -1) & (v <= size)
    v = np.where(valid, np.maximum(v, 0), 0)
    low = np.floor(v).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    v = np.where(edge, low, v)
    return low, high, v - low, valid, grid


def _larger(a, b):
    """std::max(a, b): b where a < b, else a (NaN in b is passed over, in a kept)."""
    return np.where(a < b, b, a)


def _chain_larger(values, axis):
    """std::max folded along ``axis`` from its first entry: NaN if that entry is NaN, else
    the largest of the entries that are not NaN."""
    first = np.take(values, 0, axis=axis)
    return np.where(np.isnan(first), first, np.fmax.reduce(values, axis=axis))


def _reference(op, inputs):
    x, rois, batch = inputs
    mode, height, width, ratio, scale, half_pixel = params(op)
    channels, rows, cols = x.shape[1:]
    out = np.zeros((rois.shape[0], channels, height, width))
    offset = 0.5 if half_pixel else 0.0
    for r, (roi, n) in enumerate(zip(rois, batch)):
        if not 0 <= n < x.shape[0]:
            raise InputError(f"op {op.name} (RoiAlign): batch index {int(n)} of ROI {r} is out "
                             f"of range for a batch of {x.shape[0]}")
        x1, y1, x2, y2 = roi * scale - offset
        extent_w, extent_h = x2 - x1, y2 - y1
        if not half_pixel:      # std::max(extent, 1): a NaN extent stays NaN
            extent_w, extent_h = _larger(extent_w, 1.0), _larger(extent_h, 1.0)
        ylo, yhi, ly, yok, gh = axis_samples(y1, extent_h, height, ratio, rows)
        xlo, xhi, lx, xok, gw = axis_samples(x1, extent_w, width, ratio, cols)
        if gh * gw == 0:
            continue

        def across(a, b):       # [bins, grid] x [bins, grid] -> [oh, gh, ow, gw]
            return a[:, :, None, None], b[None, None]

        valid = np.logical_and(*across(yok, xok))
        plane = x[n].reshape(channels, rows * cols)
        terms = []
        for (wy, ys), (wx, xs) in itertools.product([(1 - ly, ylo), (ly, yhi)],
                                                    [(1 - lx, xlo), (lx, xhi)]):
            wy, wx = across(wy, wx)
            ys, xs = across(ys, xs)
            weight = np.where(valid, wy * wx, 0.0)
            terms.append(weight * plane[:, np.where(valid, ys * cols + xs, 0)])
        if mode == "avg":
            total = ((terms[0] + terms[1]) + terms[2]) + terms[3]
            out[r] = total.sum(axis=(2, 4)) / (gh * gw)
        else:       # samples in order (iy, then ix), each the max of its corners in order
            value = _chain_larger(np.stack(terms), 0).transpose(0, 1, 3, 2, 4)
            out[r] = _chain_larger(value.reshape(channels, height, width, gh * gw), 3)
    return [out]


def _define_all():
    register(OpDef("RoiAlign", Kind.OPAQUE, _infer, _reference,
                   attrs={"mode": "avg", "output_height": 1, "output_width": 1,
                          "sampling_ratio": 0, "spatial_scale": 1.0,
                          "coordinate_transformation_mode": "half_pixel"},
                   inputs=(3, 3),
                   doc="bilinear samples of x averaged (or maxed) over the bins of each region "
                       "of interest, as ONNX RoiAlign"))


_define_all()
