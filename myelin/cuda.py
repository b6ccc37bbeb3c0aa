"""``myelin.cuda``: compile a flow for an NVIDIA GPU (see :mod:`myelin.runtime.cuda.network`).

``net = myelin.cuda.compile(flow)`` gives a network with the API of ``Compiler().compile``
whose instances keep their tensors in device memory; ``data[x] = array`` copies an input to
the device, ``data[y].numpy()`` copies an output back. Without a usable GPU it raises
:class:`~myelin.errors.DeviceError` saying why.
"""

from myelin.runtime.cuda.network import CudaCell, CudaInstance, CudaNetwork, compile
from myelin.runtime.cuda.tensor import DeviceTensor

__all__ = ["CudaCell", "CudaInstance", "CudaNetwork", "DeviceTensor", "compile"]
