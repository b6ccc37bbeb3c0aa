"""PyTorch's element types and myelin's: which map to which, what is refused, and tensors as
arrays and back (bfloat16 through its bits: NumPy's bfloat16 is ml_dtypes', which torch does
not convert)."""

import numpy as np
import torch

from myelin.errors import UnsupportedTypeError
from myelin.flow import dtypes

_TYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
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
    """myelin's name of torch ``dtype``; UnsupportedTypeError for one myelin lacks (complex,
    float8, quantized types), naming ``what`` has it."""
    name = _TYPES.get(dtype)
    if name is None:
        raise UnsupportedTypeError(f"{what} is {dtype}, a type myelin does not compute with "
                                   f"(it computes float16/32/64, bfloat16, integers and bool)")
    return name


def to_torch(name):
    """The torch dtype of myelin type ``name``."""
    return _TORCH[name]


def to_array(tensor):
    """A NumPy view of the CPU tensor ``tensor`` (no copy; a bfloat16 one through its bits)."""
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(dtypes.to_numpy("bfloat16"))
    return tensor.numpy()


def from_array(array):
    """A tensor sharing ``array``'s memory (a bfloat16 one through its bits)."""
    if array.dtype.kind == "V":        # (ml_dtypes' bfloat16, the one such type myelin has)
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)
