"""A :class:`~myelin.runtime.cuda.driver.Driver` without a GPU, for the runtime's tests.

"Device memory" is host buffers (poisoned with 0xFF when allocated) and device addresses are
their host addresses; kernels run on the host through :class:`emulator.Emulator` (one per
module source, compiled by g++ once), GEMMs with NumPy in cuBLAS's column-major convention,
so the runtime's row-major to column-major swap is checked too. Work runs when it is queued,
whatever the stream. Every copy, launch and GEMM checks that the bytes it touches lie in one
live allocation, and that a launch uses the grid its kernel's Launch chooses for the device;
``counts`` tallies the calls by kind.
"""

import collections
import itertools
import tempfile

import numpy as np

from emulator import DEVICE, Emulator
from myelin.flow import dtypes
from myelin.runtime.cuda.driver import Driver

ALIGNMENT = 256


class EmulatedDriver(Driver):
    """Emulated device 0 of compute capability 8.0 with the emulator's small Device; g++
    output goes under ``directory``."""

    name = "emulated"
    capability = (8, 0)
    device = DEVICE

    def __init__(self, directory):
        self.directory = directory
        self.allocations = {}           # address -> uint8 array
        self.streams = set()
        self._stream_numbers = itertools.count(1)
        self._emulators = {}            # module source -> Emulator
        self.gemm_enabled = False
        self.counts = collections.Counter()

    def allocate(self, nbytes):
        raw = np.full(max(nbytes, 1) + ALIGNMENT, 0xFF, np.uint8)
        start = (-raw.ctypes.data) % ALIGNMENT
        buffer = raw[start:start + max(nbytes, 1)]
        self.allocations[buffer.ctypes.data] = buffer
        return buffer.ctypes.data

    def free(self, address):
        del self.allocations[address]

    def memory(self, address, nbytes):
        """The bytes at ``address`` as a uint8 array; AssertionError unless they lie in one
        allocation."""
        for start, buffer in self.allocations.items():
            if start <= address and address + nbytes <= start + buffer.size:
                return buffer[address - start:address - start + nbytes]
        raise AssertionError(f"{nbytes} bytes at {address:#x} are not in device memory")

    def create_stream(self):
        stream = next(self._stream_numbers)
        self.streams.add(stream)
        return stream

    def destroy_stream(self, stream):
        self.streams.remove(stream)

    def _use(self, stream, kind):
        assert stream in self.streams, f"stream {stream} does not exist"
        self.counts[kind] += 1

    def synchronize(self, stream):
        self._use(stream, "synchronize")

    def upload(self, address, array, stream):
        self._use(stream, "upload")
        assert array.flags.c_contiguous
        self.memory(address, array.nbytes)[...] = array.reshape(-1).view(np.uint8)

    def download(self, array, address, stream):
        self._use(stream, "download")
        assert array.flags.c_contiguous
        array.reshape(-1).view(np.uint8)[...] = self.memory(address, array.nbytes)

    def zero(self, address, nbytes, stream):
        self._use(stream, "zero")
        self.memory(address, nbytes)[...] = 0

    def load(self, module):
        emulator = self._emulators.get(module.source)
        if emulator is None:
            emulator = Emulator(module.kernels, tempfile.mkdtemp(dir=self.directory))
            self._emulators[module.source] = emulator
        return {kernel.name: (emulator, kernel) for kernel in module.kernels}

    def configure(self, function, launch):
        return launch.configure(self.device)

    def launch(self, function, grid, block, shared, stream, arguments):
        self._use(stream, "launch")
        emulator, kernel = function
        assert (grid, block, shared) == kernel.launch.configure(self.device)
        addresses = [int(value) for value in arguments.values]
        sizes = [param.tensor.size for param in kernel.params] + [4] * kernel.status
        assert len(addresses) == len(sizes), f"{kernel.name}: wrong number of arguments"
        for address, size in zip(addresses, sizes):
            self.memory(address, size)
        emulator.launch(kernel, addresses, self.device)

    def enable_gemm(self):
        self.gemm_enabled = True

    def gemm(self, gemm, stream):
        self._use(stream, "gemm")
        assert self.gemm_enabled
        dtype = dtypes.to_numpy(gemm.dtype)
        itemsize = np.dtype(dtype).itemsize

        def matrices(address, rows, columns, leading, stride, transposed):
            """The batch of column-major ``rows`` x ``columns`` matrices (stored transposed
            if ``transposed``) at ``address``."""
            stored = (columns, rows) if transposed else (rows, columns)
            elements = (stored[0] - 1) + (stored[1] - 1) * leading \
                + (gemm.batch - 1) * stride + 1
            flat = self.memory(address, elements * itemsize).view(dtype)
            view = np.lib.stride_tricks.as_strided(
                flat, (gemm.batch,) + stored, (stride * itemsize, itemsize, leading * itemsize))
            return view.transpose(0, 2, 1) if transposed else view

        a = matrices(gemm.a, gemm.m, gemm.k, gemm.lda, gemm.stride_a, gemm.transpose_a)
        b = matrices(gemm.b, gemm.k, gemm.n, gemm.ldb, gemm.stride_b, gemm.transpose_b)
        product = np.matmul(a.astype(np.float64), b.astype(np.float64))
        c = matrices(gemm.c, gemm.m, gemm.n, gemm.ldc, gemm.stride_c, False)
        c[...] = product
