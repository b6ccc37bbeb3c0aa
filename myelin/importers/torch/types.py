"""PyTorch's element types and myelin's: which map to which, and what is refused."""

import numpy as np
import torch

from myelin.errors import UnsupportedTypeError

_TYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.int16: "int16",
    torch.uint16: "uint16",
    torch.int32: "int32",
    torch.uint32: "uint32",
    torch.int64: "int64",
    torch.uint64: "uint64",
    torch.bool: "bool",
}
_TORCH = {name: dtype for dtype, name in _TYPES.items()}


def to_myelin(dtype, what="a tensor"):
    """myelin's name of torch ``dtype``; UnsupportedTypeError for one the PyTorch front end
    does not take (bfloat16, complex, float8, quantized types), naming ``what`` has it."""
    name = _TYPES.get(dtype)
    if name is None:
        raise UnsupportedTypeError(f"{what} is {dtype}, a type myelin's PyTorch front end "
                                   f"does not take (it takes float16/32/64, integers and "
                                   f"bool)")
    return name


def to_torch(name):
    """The torch dtype of myelin type ``name``."""
    return _TORCH[name]


def to_numpy(dtype):
    """The NumPy dtype of torch ``dtype``."""
    return np.dtype(to_myelin(dtype))


def is_float(dtype):
    return dtype in (torch.float16, torch.float32, torch.float64)
