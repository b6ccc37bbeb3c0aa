"""Aligned host memory for instances and globals."""

import numpy as np


def aligned_zeros(nbytes, alignment=64):
    """A zeroed uint8 array of ``nbytes`` whose data address is a multiple of ``alignment``."""
    raw = np.zeros(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes]
