"""The runtime's :class:`~myelin.runtime.cuda.driver.Driver` on a real GPU: the CUDA driver
API through NVIDIA's ``cuda-bindings`` (``cuda.bindings.driver``), cuBLAS through
``nvmath-python`` (``nvmath.bindings.cublas``).

Both are NVIDIA's own thin, typed bindings of the C APIs: they add no runtime, allocator or
stream model of their own (device addresses and streams stay plain ints, which is what the
runtime, ``__cuda_array_interface__`` and DLPack exchange), ``cuda-bindings`` is what NVRTC is
already used through, and ``nvmath-python`` needs nothing beyond it but ``cuda-core`` and the
cuBLAS library (``nvidia-cublas-cu12``). CuPy would bring a second copy of the CUDA runtime
and its own memory pool for the same few calls. cuBLAS is imported when a network first has a
matrix product, so networks without one need neither.

The device's primary context is made current on each thread that calls the driver. Launches
use the grid of :meth:`Launch.configure` for the device's properties, capped by the blocks
the kernel keeps resident per multiprocessor (``cuOccupancyMaxActiveBlocksPerMultiprocessor``,
which counts its registers and shared memory).
"""

import threading

import numpy as np

from myelin.codegen.cuda.target import Device
from myelin.errors import DeviceError
from myelin.runtime.cuda.driver import Driver

NO_GPU = "no CUDA driver/GPU"
_DATA_TYPES = {"float16": 2, "float32": 0, "float64": 1}  # cudaDataType: CUDA_R_16F, _32F, _64F
_default = None


def default_driver():
    """The process's driver of device 0 (made on first use; DeviceError without a GPU)."""
    global _default
    if _default is None:
        _default = CudaDriver()
    return _default


def _bindings():
    try:
        from cuda.bindings import driver
    except ImportError as error:
        raise DeviceError(f"{NO_GPU}: cuda-bindings cannot be imported ({error}); install it "
                          f"with pip install 'myelin[cuda]'") from error
    return driver


class CudaDriver(Driver):
    """Device ``ordinal`` through the CUDA driver API; DeviceError saying why if there is no
    usable driver or device."""

    def __init__(self, ordinal=0):
        cu = self._cu = _bindings()
        try:
            (result,) = cu.cuInit(0)
        except Exception as error:       # the bindings' own error when libcuda is missing
            raise DeviceError(f"{NO_GPU}: {type(error).__name__}: {error}") from error
        if result != cu.CUresult.CUDA_SUCCESS:
            raise DeviceError(f"{NO_GPU}: cuInit failed with {result.name}")
        self.ordinal = ordinal
        self._device = self._call("find the device", cu.cuDeviceGet, ordinal)
        self._context = self._call("retain the device's context", cu.cuDevicePrimaryCtxRetain,
                                   self._device)
        self._local = threading.local()
        self._current()
        name = self._call("read the device's name", cu.cuDeviceGetName, 256, self._device)
        self.name = name.split(b"\0")[0].decode(errors="replace")
        attribute = cu.CUdevice_attribute
        get = self._attribute
        self.capability = (get(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                           get(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        self.device = Device(get(attribute.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
                             get(attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                             get(attribute.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR))
        self._modules = []          # loaded modules stay for the process's life
        self._blas = None
        self._blas_lock = threading.Lock()    # (one cuBLAS handle, its stream set per call)

    def _call(self, what, function, *args):
        result = function(*args)
        if result[0] != self._cu.CUresult.CUDA_SUCCESS:
            raise DeviceError(f"CUDA could not {what} on device {self.ordinal}: "
                              f"{result[0].name}")
        return result[1] if len(result) == 2 else None

    def _attribute(self, attribute):
        return self._call(f"read {attribute.name}", self._cu.cuDeviceGetAttribute, attribute,
                          self._device)

    def _current(self):
        """Make the device's primary context current on the calling thread."""
        if not getattr(self._local, "current", False):
            self._call("make the context current", self._cu.cuCtxSetCurrent, self._context)
            self._local.current = True

    def allocate(self, nbytes):
        self._current()
        return int(self._call(f"allocate {nbytes} bytes", self._cu.cuMemAlloc, max(nbytes, 1)))

    def free(self, address):
        self._cu.cuMemFree(address)

    def create_stream(self):
        self._current()
        flags = self._cu.CUstream_flags.CU_STREAM_NON_BLOCKING
        return int(self._call("create a stream", self._cu.cuStreamCreate, int(flags)))

    def destroy_stream(self, stream):
        self._cu.cuStreamDestroy(stream)

    def synchronize(self, stream):
        self._current()
        self._call("finish the work of a stream", self._cu.cuStreamSynchronize, stream)

    def upload(self, address, array, stream):
        self._current()
        self._call("copy to the device", self._cu.cuMemcpyHtoDAsync, address,
                   array.ctypes.data, array.nbytes, stream)

    def download(self, array, address, stream):
        self._current()
        self._call("copy from the device", self._cu.cuMemcpyDtoHAsync, array.ctypes.data,
                   address, array.nbytes, stream)

    def zero(self, address, nbytes, stream):
        self._current()
        self._call("clear device memory", self._cu.cuMemsetD8Async, address, 0, nbytes, stream)

    def load(self, module):
        self._current()
        handle = self._call("load the module", self._cu.cuModuleLoadData, module.binary.cubin)
        self._modules.append(handle)
        return {kernel.name: self._call(f"find kernel {kernel.name}",
                                        self._cu.cuModuleGetFunction, handle,
                                        kernel.name.encode())
                for kernel in module.kernels}

    def configure(self, function, launch):
        grid, block, shared = launch.configure(self.device)
        per_sm = self._call("compute a kernel's occupancy",
                            self._cu.cuOccupancyMaxActiveBlocksPerMultiprocessor, function,
                            block[0], shared)
        if per_sm < 1:
            raise DeviceError(f"a kernel cannot run in blocks of {block[0]} threads on "
                              f"{self.name} (too many registers or too much shared memory)")
        return (min(grid[0], per_sm * self.device.sm_count), 1, 1), block, shared

    def launch(self, function, grid, block, shared, stream, arguments):
        self._current()
        self._call("launch a kernel", self._cu.cuLaunchKernel, function, *grid, *block, shared,
                   stream, arguments.pointer, 0)

    def enable_gemm(self):
        if self._blas is not None:
            return
        try:
            from nvmath.bindings import cublas
            self._current()
            handle = cublas.create()
        except Exception as error:       # ImportError, or the library cannot be loaded
            raise DeviceError(f"cuBLAS cannot be used ({type(error).__name__}: {error}); "
                              f"install it with pip install 'myelin[cuda]'") from error
        scalars = {dtype: (np.ones(1, scalar), np.zeros(1, scalar))
                   for dtype, scalar in (("float16", np.float32), ("float32", np.float32),
                                         ("float64", np.float64))}
        self._blas = cublas, handle, scalars

    def gemm(self, gemm, stream):
        cublas, handle, scalars = self._blas
        self._current()
        operation = {False: cublas.Operation.N, True: cublas.Operation.T}
        compute = (cublas.ComputeType.COMPUTE_64F if gemm.dtype == "float64"
                   else cublas.ComputeType.COMPUTE_32F)
        alpha, beta = scalars[gemm.dtype]
        kind = _DATA_TYPES[gemm.dtype]
        with self._blas_lock:
            try:
                cublas.set_stream(handle, stream)
                cublas.gemm_strided_batched_ex(
                    handle, operation[gemm.transpose_a], operation[gemm.transpose_b],
                    gemm.m, gemm.n, gemm.k, alpha.ctypes.data,
                    gemm.a, kind, gemm.lda, gemm.stride_a, gemm.b, kind, gemm.ldb, gemm.stride_b,
                    beta.ctypes.data, gemm.c, kind, gemm.ldc, gemm.stride_c, gemm.batch,
                    compute, cublas.GemmAlgo.DEFAULT)
            except Exception as error:   # nvmath's cuBLASError
                raise DeviceError(f"cuBLAS failed on a {gemm.m}x{gemm.n}x{gemm.k} "
                                  f"{gemm.dtype} product: {error}") from error
