"""A tensor in device memory, as ``data[x]`` and ``net[w]`` give it on the GPU.

:class:`DeviceTensor` has the CPU :class:`~myelin.runtime.network.Tensor`'s methods (``name``,
``shape``, ``type``, ``numpy``, indexing, ``np.asarray``), but its elements live on the
device: reading copies them to the host after the work queued on its stream, and writing
copies to the device, in stream order. Other GPU libraries take the device buffer itself,
without a copy, through ``__cuda_array_interface__`` (version 3, with the stream) or DLPack.
"""

import numpy as np

from myelin.errors import InputError
from myelin.flow import dtypes
from myelin.plan.cell import CONSTANT
from myelin.runtime.cuda import dlpack
from myelin.runtime.network import coerce_value


class DeviceTensor:
    """Tensor ``spec`` (a TensorSpec) at device ``address``, used in order on ``stream`` of
    ``driver``; ``owner`` keeps the memory alive. A constant's tensor is read-only."""

    def __init__(self, spec, address, driver, stream, owner):
        self._spec = spec
        self._shape = tuple(spec.shape)
        self._dtype = np.dtype(dtypes.to_numpy(spec.dtype))
        self._address = address
        self._driver = driver
        self._stream = stream
        self._owner = owner
        self._readonly = spec.root().kind == CONSTANT

    def name(self):
        return self._spec.name

    def rank(self):
        return len(self._shape)

    def shape(self):
        return list(self._shape)

    def type(self):
        return self._spec.dtype

    @property
    def address(self):
        """The device address of the first element."""
        return self._address

    def numpy(self):
        """A host copy of the elements, once the work queued before is done."""
        array = np.empty(self._shape, self._dtype)
        self._driver.download(array, self._address, self._stream)
        self._driver.synchronize(self._stream)
        return array

    def assign(self, value):
        """Copy ``value`` (an array of this shape and a dtype that casts to this one, or a
        scalar) to the device."""
        if self._readonly:
            raise InputError(f"tensor {self._spec.name} is a constant, compiled into the "
                             f"code; make it a learnable variable to change it")
        array = coerce_value(self._spec.name, self._spec.dtype, self._shape, value)
        self._driver.upload(self._address, np.ascontiguousarray(array, self._dtype),
                            self._stream)

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def __len__(self):
        return self._shape[0] if self._shape else 1

    def __getitem__(self, index):
        value = self.numpy()[index]
        return value.item() if isinstance(value, np.generic) else value

    def __setitem__(self, index, value):
        """Change some elements: the tensor is copied to the host, changed and copied back."""
        array = self.numpy()
        array[index] = value
        self.assign(array)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self._shape, "typestr": self._dtype.str,
                "data": (self._address, self._readonly), "version": 3, "strides": None,
                "stream": self._stream}

    def __dlpack_device__(self):
        return dlpack.KDL_CUDA, self._driver.ordinal

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of the device buffer; unless ``stream`` is -1, the work queued on
        this tensor's stream is finished first."""
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"tensor {self._spec.name} is on CUDA device "
                              f"{self._driver.ordinal}, not on {tuple(dl_device)}")
        if copy:
            raise BufferError("a DLPack copy of a device tensor is not supported; "
                              "use .numpy() for a host copy")
        if stream != -1:
            self._driver.synchronize(self._stream)
        return dlpack.capsule(self._address, self._shape, self._dtype, self._driver.ordinal,
                              self)

    def __repr__(self):
        return f"DeviceTensor({self._spec.name}: {self._spec.dtype}{list(self._shape)})"

    def __str__(self):
        return str(self.numpy())
