"""The driver interface the CUDA runtime computes through, and what crosses it.

The runtime (:mod:`~myelin.runtime.cuda.network`) never calls CUDA itself: a :class:`Driver`
allocates device memory, copies between host and device on streams, loads the network's
module, launches kernels and runs GEMMs. Device addresses and streams are plain ints. There
are two drivers: :class:`~myelin.runtime.cuda.cudadriver.CudaDriver` on the CUDA driver API and
cuBLAS, and the tests' emulated one (``tests/codegen/cuda/emulated_driver.py``: device memory
in host buffers, kernels compiled by g++), so the runtime's logic is tested without a GPU.

A planned :class:`~myelin.codegen.cuda.kernels.library.GemmCall` is row-major; cuBLAS is
column-major. :func:`column_major` turns one into the :class:`Gemm` the driver runs: a
row-major ``C = op(A) op(B)`` is the column-major ``C^T = op(B)^T op(A)^T``, so the operands
swap places (and m with n) and every matrix keeps its storage and leading dimension.
"""

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Gemm:
    """A column-major strided batched GEMM as cuBLAS takes it, operands at device addresses:
    ``C[i] = op(A[i]) op(B[i])``, op(A) m x k, op(B) k x n, C m x n, ``i < batch``; ``lda``
    etc. are the leading dimensions (column strides), ``stride_*`` the elements between
    batch entries."""

    dtype: str
    transpose_a: bool
    transpose_b: bool
    m: int
    n: int
    k: int
    a: int
    lda: int
    stride_a: int
    b: int
    ldb: int
    stride_b: int
    c: int
    ldc: int
    stride_c: int
    batch: int


def column_major(call, a, b, c):
    """The :class:`Gemm` computing the row-major ``call`` whose A, B and C are at device
    addresses ``a``, ``b``, ``c``."""
    return Gemm(call.dtype, call.transpose_b, call.transpose_a, call.n, call.m, call.k,
                b, call.ldb, call.stride_b, a, call.lda, call.stride_a,
                c, call.ldc, call.stride_c, call.batch)


class Arguments:
    """A kernel's arguments, each a device address: ``values`` (uint64), and ``pointer``, the
    address of the array of their addresses (the ``void**`` cuLaunchKernel takes)."""

    def __init__(self, values):
        self.values = np.array(values, np.uint64)
        self._slots = (self.values.ctypes.data
                       + self.values.itemsize * np.arange(len(self.values), dtype=np.uint64))
        self.pointer = self._slots.ctypes.data


class Driver:
    """What the runtime needs of a GPU. ``name`` is the device's name, ``ordinal`` its number,
    ``capability`` its compute capability (major, minor) and ``device`` its
    :class:`~myelin.codegen.cuda.target.Device` properties. Failures raise DeviceError.

    Copies and launches are asynchronous on a stream, in stream order; the host array of an
    :meth:`upload` may be reused as soon as it returns, the one of a :meth:`download` only
    after :meth:`synchronize`."""

    name = "?"
    ordinal = 0
    capability = (0, 0)
    device = None

    def allocate(self, nbytes):
        """The address of ``nbytes`` of new device memory (aligned to 256 bytes)."""
        raise NotImplementedError

    def free(self, address):
        """Release memory from :meth:`allocate` (errors are ignored: it runs in finalizers)."""
        raise NotImplementedError

    def create_stream(self):
        raise NotImplementedError

    def destroy_stream(self, stream):
        """Release a stream (errors are ignored, as for :meth:`free`)."""
        raise NotImplementedError

    def synchronize(self, stream):
        """Wait until everything queued on ``stream`` is done."""
        raise NotImplementedError

    def upload(self, address, array, stream):
        """Copy the C-contiguous ``array`` to device memory at ``address``."""
        raise NotImplementedError

    def download(self, array, address, stream):
        """Copy device memory at ``address`` into the C-contiguous ``array``."""
        raise NotImplementedError

    def zero(self, address, nbytes, stream):
        """Set ``nbytes`` of device memory at ``address`` to zero."""
        raise NotImplementedError

    def load(self, module):
        """Load a :class:`~myelin.codegen.cuda.module.CudaModule`: its functions by kernel
        name, each a handle for :meth:`configure` and :meth:`launch`."""
        raise NotImplementedError

    def configure(self, function, launch):
        """((grid), (block), dynamic shared bytes) of ``function`` whose code asks for
        ``launch`` (a :class:`~myelin.codegen.cuda.kernels.base.Launch`)."""
        raise NotImplementedError

    def launch(self, function, grid, block, shared, stream, arguments):
        """Queue ``function`` on ``stream`` with :class:`Arguments` ``arguments``."""
        raise NotImplementedError

    def enable_gemm(self):
        """Make :meth:`gemm` ready (load the BLAS library), or raise DeviceError."""
        raise NotImplementedError

    def gemm(self, gemm, stream):
        """Queue the :class:`Gemm` ``gemm`` on ``stream``."""
        raise NotImplementedError
