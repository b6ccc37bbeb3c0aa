"""Host memory: aligned blocks for instances and globals, and the data address of arrays."""

import ctypes

import numpy as np

# NumPy's array object holds its data pointer right after the Python object header (what
# PyArray_DATA reads, fixed by NumPy's ABI).
DATA_OFFSET = object.__basicsize__
_WORD_AT = ctypes.c_size_t.from_address


def aligned_zeros(nbytes, alignment=64):
    """A zeroed uint8 array of ``nbytes`` whose data address is a multiple of ``alignment``."""
    raw = np.zeros(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes]


def address(array):
    """The address of the first element of NumPy array ``array``, as
    ``array.__array_interface__["data"][0]`` gives it but read from the array object in about
    a tenth of the time (the interface builds a dict of the whole description)."""
    return _WORD_AT(id(array) + DATA_OFFSET).value
