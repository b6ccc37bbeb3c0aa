"""Element strides of dense and broadcast tensors, and the merging of axes that are contiguous
for every operand: layout facts every back end's kernels index with."""


def contiguous_strides(shape):
    """Row-major element strides of a dense tensor."""
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(reversed(strides))


def broadcast_strides(shape, out_shape):
    """Strides of a dense tensor of ``shape`` broadcast (NumPy rules) to ``out_shape``."""
    own = contiguous_strides(shape)
    pad = len(out_shape) - len(shape)
    return tuple(0 if axis < pad or shape[axis - pad] == 1 and out_shape[axis] != 1
                 else own[axis - pad] for axis in range(len(out_shape)))


def collapse(shape, stride_lists):
    """Drop size-1 dimensions and merge adjacent ones that are contiguous for every operand.

    Returns the new shape and the new stride tuple of each operand.
    """
    dims = [(d, [s[i] for s in stride_lists]) for i, d in enumerate(shape) if d != 1]
    merged = []
    for size, strides in dims:
        if merged:
            prev_size, prev_strides = merged[-1]
            if all(ps == s * size for ps, s in zip(prev_strides, strides)):
                merged[-1] = (prev_size * size, strides)
                continue
        merged.append((size, strides))
    new_shape = tuple(size for size, _ in merged)
    new_strides = [tuple(strides[k] for _, strides in merged) for k in range(len(stride_lists))]
    return new_shape, new_strides
