"""ONNX image layout ops written with myelin's indexing ops, their index tables computed at
import (every shape-like input is a constant):

* CenterCropPad: one Pad whose negative pads crop (the centered window starts at
  ``(dim - size) // 2``; padding puts ``(size - dim) // 2`` zeros first).
* Col2Im: the columns [N, C * prod(block), L] are gathered (entries that land in the padding
  dropped) and scatter-added into the zero image [N, C, prod(image)].
* MaxUnpool: the values scattered into a zero tensor of the unpooled shape at their flat
  indices (run-time input, range-checked by ScatterElements), zero-padded at the end to
  ``output_shape`` if given (as ONNX's reference does).
"""

import itertools

import numpy as np

from myelin.flow import dtypes
from myelin.importers.onnx.converters import converter


def _zeros(ctx, shape, dtype):
    return ctx.const(np.zeros(shape, dtypes.to_numpy(dtype)), dtype)


@converter("CenterCropPad")
def _center_crop_pad(ctx):
    x = ctx.input(0)
    sizes = ctx.ints(1)
    axes = ctx.attr("axes", None)
    axes = list(range(x.rank)) if axes is None else [a % x.rank for a in axes]
    if len(axes) != len(sizes):
        raise ctx.error(f"shape {sizes} must have one entry per axis of {axes}")
    pads = [0] * (2 * x.rank)
    for axis, size in zip(axes, sizes):
        diff = size - x.shape[axis]
        if diff >= 0:
            pads[axis], pads[axis + x.rank] = diff // 2, diff - diff // 2
        else:
            cut = -diff
            pads[axis], pads[axis + x.rank] = -(cut // 2), -(cut - cut // 2)
    if not any(pads):
        return x
    return ctx.op("Pad", [x], {"pads": pads, "mode": "constant"})


@converter("Col2Im")
def _col2im(ctx):
    x = ctx.input(0)
    image, block = ctx.ints(1), ctx.ints(2)
    rank = len(image)
    dilations = list(ctx.attr("dilations", [1] * rank))
    strides = list(ctx.attr("strides", [1] * rank))
    pads = list(ctx.attr("pads", [0] * (2 * rank)))
    if x.rank != 3 or len(block) != rank:
        raise ctx.error(f"input of shape {list(x.shape)} must be [N, C * prod(block), L] with "
                        f"block {block} of the rank of image {image}")
    batch, columns, length = x.shape
    kernel = int(np.prod(block))
    if kernel == 0 or columns % kernel:
        raise ctx.error(f"input axis 1 ({columns}) is not a multiple of prod(block {block})")
    channels = columns // kernel
    counts = [(image[a] + pads[a] + pads[a + rank] - dilations[a] * (block[a] - 1) - 1)
              // strides[a] + 1 for a in range(rank)]
    if int(np.prod(counts)) != length or min(counts) < 1:
        raise ctx.error(f"input axis 2 ({length}) must be the number of blocks {counts}")
    # For each (block offset k, block position l): the image position, or -1 in the padding.
    sources, targets = [], []
    image_strides = [int(np.prod(image[a + 1:])) for a in range(rank)]
    for k, offset in enumerate(itertools.product(*[range(b) for b in block])):
        for l, position in enumerate(itertools.product(*[range(c) for c in counts])):
            coords = [position[a] * strides[a] - pads[a] + offset[a] * dilations[a]
                      for a in range(rank)]
            if all(0 <= c < image[a] for a, c in enumerate(coords)):
                sources.append(k * length + l)
                targets.append(sum(c * s for c, s in zip(coords, image_strides)))
    area = int(np.prod(image))
    flat = ctx.reshape(x, (batch, channels, kernel * length))
    kept = ctx.op("Gather", [flat, ctx.const(np.array(sources, dtype=np.int64))], {"axis": 2})
    where = np.broadcast_to(np.array(targets, dtype=np.int64),
                            (batch, channels, len(targets))).copy()
    out = ctx.op("ScatterElements", [_zeros(ctx, (batch, channels, area), x.dtype),
                                     ctx.const(where), kept],
                 {"axis": 2, "reduction": "add"})
    return ctx.reshape(out, [batch, channels] + image)


@converter("MaxUnpool")
def _max_unpool(ctx):
    x, indices = ctx.input(0), ctx.input(1)
    kernel = list(ctx.attr("kernel_shape"))
    rank = len(kernel)
    strides = list(ctx.attr("strides", [1] * rank))
    pads = list(ctx.attr("pads", [0] * (2 * rank)))
    shape = list(x.shape[:2]) + [(x.shape[2 + a] - 1) * strides[a] - pads[a] - pads[a + rank]
                                 + kernel[a] for a in range(rank)]
    if indices.shape != x.shape:
        raise ctx.error(f"indices shape {list(indices.shape)} must be the input shape "
                        f"{list(x.shape)}")
    total = int(np.prod(shape))
    flat = ctx.op("ScatterElements", [_zeros(ctx, (total,), x.dtype),
                                      ctx.reshape(ctx.cast(indices, "int64"), (-1,)),
                                      ctx.reshape(x, (-1,))], {"axis": 0, "reduction": "none"})
    out = ctx.reshape(flat, shape)
    wanted = ctx.ints(2) if ctx.has(2) else None
    if wanted is None or list(wanted) == shape:
        return out
    if len(wanted) != len(shape) or any(w < s for w, s in zip(wanted, shape)):
        raise ctx.error(f"output_shape {wanted} must be at least the unpooled shape {shape}")
    return ctx.op("Pad", [out], {"pads": [0] * len(shape) +
                                 [w - s for w, s in zip(wanted, shape)], "mode": "constant"})
