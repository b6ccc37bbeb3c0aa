"""The channel-blocked activation layout (NCHW[b]c), as ONNX Runtime's NCHWc and TVM's NCHW8c.

An image ``[N, C, D1, ..., Dk]`` in blocks of ``b`` channels is ``[N, C/b, D1, ..., Dk, b]``:
the ``b`` channels of one pixel are consecutive, so a kernel reads or writes them as one vector
(``b`` is the back end's vector width for float32). A convolution or pool whose attribute
``channel_block`` is ``b`` reads and writes its images this way; its weights are packed once:

* ``group`` 1: ``[M, C, K...]`` becomes ``[M/b, C/b, K..., b (input channel), b (output
  channel)]``: for one block of input channels at one tap, ``b`` vectors of ``b`` output
  channels; groups of whole blocks (C/group and M/group multiples of ``b``) the same with
  C/group input channels;
* depthwise (``group`` = C = M, ``[C, 1, K...]``, :func:`depthwise`): ``[C/b, 1, K..., b]``.

An image whose channels do not fill a block (a network's first layer: three colours) is read
by a group-1 Conv in blocks of one channel (attribute ``input_block`` 1): ``[N, C, D..., 1]``,
the plain image as it lies, its weights ``[M/b, C, K..., 1, b]``; the output is in blocks of
``b``.

A group-1 3x3 Conv of stride 1 on blocked images may take its weights in Winograd's form
(attribute ``winograd`` 1: F(2x2, 3x3), Lavin and Gray): each 3x3 kernel ``g`` of an (output,
input) channel pair becomes the 4x4 ``G g G^T`` (:data:`WINOGRAD_G`), packed position by
position: ``[M/b, 4, 4, C/b, b, b]`` (a block of outputs' weights at one of the 16 positions
lie together); the kernel then computes each 2x2 tile of outputs from the 4x4 input patch
around it with 16 products where a direct convolution has 36.

The bias stays ``[M]``. Element-wise ops need no change: two blocked images of one shape line up
element by element, and a per-channel constant is blocked like an image of one pixel. The
functions here convert shapes and NumPy arrays; :mod:`myelin.optimize.layout` rewrites graphs.
"""

import numpy as np

# Winograd F(2x2, 3x3)'s weight transform: a 3x3 kernel g becomes G g G^T.
WINOGRAD_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
_WINOGRAD_KRON = np.kron(WINOGRAD_G, WINOGRAD_G)     # vec(G g G^T) = kron(G, G) vec(g)


def blocked_shape(shape, block):
    """``[N, C, D...]`` as ``[N, C/block, D..., block]``."""
    batch, channels, *spatial = shape
    return (batch, channels // block, *spatial, block)


def plain_shape(shape):
    """``[N, C/b, D..., b]`` as ``[N, C, D...]``."""
    batch, blocks, *spatial, block = shape
    return (batch, blocks * block, *spatial)


def block(array, size):
    """``array`` ``[N, C, D...]`` in blocks of ``size`` channels."""
    batch, channels, *spatial = array.shape
    split = array.reshape(batch, channels // size, size, *spatial)
    return np.ascontiguousarray(np.moveaxis(split, 2, -1))


def unblock(array):
    """A blocked ``array`` ``[N, C/b, D..., b]`` as ``[N, C, D...]``."""
    return np.moveaxis(array, -1, 2).reshape(plain_shape(array.shape))


def depthwise(group, channels):
    """Whether a Conv of ``channels`` input channels in ``group`` groups is depthwise (its
    weights packed as such): one group per channel."""
    return 1 < group == channels


def blocked_weight_shape(shape, size, depthwise, in_size=None):
    """A Conv weight's shape ``[M, C/group, K...]`` packed for ``size`` channels a block
    (``in_size`` of the input's, ``size`` by default)."""
    out_channels, in_channels, *kernel = shape
    if depthwise:
        return (out_channels // size, 1, *kernel, size)
    in_size = in_size or size
    return (out_channels // size, in_channels // in_size, *kernel, in_size, size)


def plain_weight_shape(shape, depthwise):
    """A packed weight's shape as ``[M, C/group, K...]``."""
    if depthwise:
        blocks, _, *kernel, size = shape
        return (blocks * size, 1, *kernel)
    out_blocks, in_blocks, *kernel, in_size, size = shape
    return (out_blocks * size, in_blocks * in_size, *kernel)


def block_weight(weight, size, depthwise, in_size=None):
    """A Conv weight ``[M, C/group, K...]`` packed for ``size`` channels a block (``in_size``
    of the input's, ``size`` by default)."""
    out_channels, in_channels, *kernel = weight.shape
    rank = len(kernel)
    if depthwise:
        split = weight.reshape(out_channels // size, size, 1, *kernel)
        return np.ascontiguousarray(np.moveaxis(split, 1, -1))
    in_size = in_size or size
    split = weight.reshape(out_channels // size, size, in_channels // in_size, in_size, *kernel)
    order = (0, 2, *range(4, 4 + rank), 3, 1)
    return np.ascontiguousarray(split.transpose(order))


def unblock_weight(weight, depthwise):
    """A packed weight as ``[M, C/group, K...]``."""
    if depthwise:
        return np.moveaxis(weight, -1, 1).reshape(plain_weight_shape(weight.shape, True))
    rank = weight.ndim - 4
    order = (0, rank + 3, 1, rank + 2, *range(2, 2 + rank))
    return weight.transpose(order).reshape(plain_weight_shape(weight.shape, False))


def winograd_weight(weight, size):
    """A 3x3 Conv weight ``[M, C, 3, 3]`` in Winograd's form (``G g G^T``, computed in float64)
    packed for ``size`` channels a block, position by position: ``[M/size, 4, 4, C/size, size,
    size]``."""
    # G g G^T is linear in g: each of its 16 values a sum of the 9 taps times kron(G, G)'s
    # row, so all [M, C] kernels are one product of [M C, 9] by [9, 16] (a fifth of the time
    # of 3x3 products batched over [M, C])
    out_channels, in_channels = weight.shape[:2]
    taps = np.asarray(weight, np.float64).reshape(out_channels * in_channels, 9)
    transformed = (taps @ _WINOGRAD_KRON.T).reshape(out_channels, in_channels, 4, 4)
    packed = block_weight(transformed.astype(np.float32), size, False)
    return np.ascontiguousarray(packed.transpose(0, 2, 3, 1, 4, 5))


def unwinograd_weight(weight):
    """A packed weight in Winograd's form as the ``[M, C, 3, 3]`` kernel it came from
    (``G^+ U G^+T``: G has full column rank), in float64."""
    inverse = np.linalg.pinv(WINOGRAD_G)
    transformed = unblock_weight(weight.transpose(0, 3, 1, 2, 4, 5), False).astype(np.float64)
    return inverse @ transformed @ inverse.T
