"""CudaDriver (the CUDA driver API behind the runtime) against fake bindings: every call is
bound to the real ``cuda.bindings.driver`` function's signature and answered from host
memory, so the driver's use of the API is checked without a GPU; launches are recorded."""

import ctypes
import importlib.util
import inspect
import sys
import types

import numpy as np
import pytest

import myelin
from emulator import require_nvrtc
from myelin.errors import DeviceError
from myelin.runtime.cuda import cudadriver
from myelin.runtime.cuda.network import compile

cu = pytest.importorskip("cuda.bindings.driver")
SUCCESS = cu.CUresult.CUDA_SUCCESS
ATTRIBUTES = {"COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0,
              "MAX_THREADS_PER_BLOCK": 1024, "MULTIPROCESSOR_COUNT": 132,
              "MAX_THREADS_PER_MULTIPROCESSOR": 2048}
BLOCKS_PER_SM = 2


class FakeBindings:
    """``cuda.bindings.driver`` with its enums, and functions answered by ``answer_*``."""

    def __init__(self, fail=()):
        self.fail = set(fail)
        self.buffers, self.launches = [], []

    def __getattr__(self, name):
        real = getattr(cu, name)
        if not name.startswith("cu"):
            return real
        signature = inspect.signature(real)

        def call(*args):
            signature.bind(*args)
            if name in self.fail:
                return (cu.CUresult.CUDA_ERROR_NO_DEVICE,)
            result = getattr(self, "answer_" + name, lambda *_: None)(*args)
            return (SUCCESS,) if result is None else (SUCCESS, result)
        return call

    def answer_cuDeviceGet(self, ordinal):
        return ordinal

    def answer_cuDevicePrimaryCtxRetain(self, device):
        return "context"

    def answer_cuDeviceGetName(self, length, device):
        return b"Fake GPU\0".ljust(length)

    def answer_cuDeviceGetAttribute(self, attribute, device):
        return ATTRIBUTES[attribute.name.replace("CU_DEVICE_ATTRIBUTE_", "")]

    def answer_cuMemAlloc(self, nbytes):
        self.buffers.append(np.zeros(nbytes, np.uint8))
        return self.buffers[-1].ctypes.data

    def answer_cuStreamCreate(self, flags):
        assert flags == cu.CUstream_flags.CU_STREAM_NON_BLOCKING
        return 7

    def answer_cuMemcpyHtoDAsync(self, device, host, nbytes, stream):
        ctypes.memmove(device, host, nbytes)

    def answer_cuMemcpyDtoHAsync(self, host, device, nbytes, stream):
        ctypes.memmove(host, device, nbytes)

    def answer_cuMemsetD8Async(self, device, value, nbytes, stream):
        ctypes.memset(device, value, nbytes)

    def answer_cuModuleLoadData(self, image):
        assert isinstance(image, bytes) and image
        return "module"

    def answer_cuModuleGetFunction(self, module, name):
        return name.decode()

    def answer_cuOccupancyMaxActiveBlocksPerMultiprocessor(self, function, block, shared):
        return BLOCKS_PER_SM

    def answer_cuLaunchKernel(self, function, *args):
        self.launches.append((function, args))


def fake_driver(monkeypatch, fail=()):
    bindings = FakeBindings(fail)
    monkeypatch.setattr(cudadriver, "_bindings", lambda: bindings)
    return cudadriver.CudaDriver(), bindings


def test_device_properties(monkeypatch):
    driver, _ = fake_driver(monkeypatch)
    assert (driver.name, driver.capability) == ("Fake GPU", (9, 0))
    assert (driver.device.max_threads_per_block, driver.device.sm_count,
            driver.device.max_threads_per_sm) == (1024, 132, 2048)


def test_failures_raise_device_errors(monkeypatch):
    with pytest.raises(DeviceError, match="no CUDA driver/GPU: cuInit failed with "
                                          "CUDA_ERROR_NO_DEVICE"):
        fake_driver(monkeypatch, fail={"cuInit"})
    driver, _ = fake_driver(monkeypatch, fail={"cuMemAlloc"})
    with pytest.raises(DeviceError, match="could not allocate 64 bytes"):
        driver.allocate(64)


def test_a_network_launches_through_the_driver_api(monkeypatch):
    require_nvrtc()
    driver, bindings = fake_driver(monkeypatch)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [1024, 1024])
    f.tanh(f.add(f.mul(x, 2.0), 1.0), name="y")
    data = compile(flow, driver).cell("f").instance()
    value = np.random.default_rng().random((1024, 1024), dtype=np.float32)
    data[x] = value
    np.testing.assert_array_equal(data[x].numpy(), value)     # through "device" memory
    data.compute()
    ((function, args),) = bindings.launches
    grid, block, shared, stream, params, extra = args[:3], args[3:6], args[6], *args[7:]
    assert grid == (BLOCKS_PER_SM * 132, 1, 1)                # capped by occupancy
    assert block[1:] == (1, 1) and shared == 0 and stream == data.stream and extra == 0
    pointers = [ctypes.c_uint64.from_address(ctypes.c_uint64.from_address(params + 8 * i)
                                             .value).value for i in range(2)]
    assert sorted(pointers) == sorted([data["f/x"].address, data["f/y"].address])


def matmul_flow():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    f.matmul(f.var("a", myelin.DT_FLOAT, [4, 8]), f.var("b", myelin.DT_FLOAT, [8, 2]), name="c")
    return flow


def test_matrix_products_need_cublas(monkeypatch):
    require_nvrtc()
    driver, _ = fake_driver(monkeypatch)
    if importlib.util.find_spec("nvmath") is not None:
        pytest.skip("nvmath-python is installed")
    with pytest.raises(DeviceError, match="cuBLAS cannot be used"):
        compile(matmul_flow(), driver)


class FakeCublas(types.ModuleType):
    """``nvmath.bindings.cublas``'s enums and the functions the driver calls (with their
    parameter names in nvmath-python 1.0), recording the GEMMs."""

    Operation = types.SimpleNamespace(N=0, T=1)
    ComputeType = types.SimpleNamespace(COMPUTE_32F=68, COMPUTE_64F=70)
    GemmAlgo = types.SimpleNamespace(DEFAULT=-1)

    def __init__(self):
        super().__init__("nvmath.bindings.cublas")
        self.calls = []

    def create(self):
        return 99

    def set_stream(self, handle, stream_id):
        self.calls.append(("set_stream", handle, stream_id))

    def gemm_strided_batched_ex(self, handle, transa, transb, m, n, k, alpha, a, atype, lda,
                                stride_a, b, btype, ldb, stride_b, beta, c, ctype, ldc,
                                stride_c, batch_count, compute_type, algo):
        scalars = (ctypes.c_float.from_address(alpha).value,
                   ctypes.c_float.from_address(beta).value)
        self.calls.append(("gemm", transa, transb, m, n, k, a, atype, lda, b, ldb, c, ldc,
                           batch_count, compute_type, algo, scalars))


def test_row_major_products_reach_cublas_swapped(monkeypatch):
    require_nvrtc()
    driver, _ = fake_driver(monkeypatch)
    cublas = FakeCublas()
    bindings = types.ModuleType("nvmath.bindings")
    bindings.cublas = cublas
    monkeypatch.setitem(sys.modules, "nvmath", types.ModuleType("nvmath"))
    monkeypatch.setitem(sys.modules, "nvmath.bindings", bindings)
    monkeypatch.setitem(sys.modules, "nvmath.bindings.cublas", cublas)
    data = compile(matmul_flow(), driver).cell("f").instance()
    data.compute()
    a, b, c = (data[name].address for name in ("f/a", "f/b", "f/c"))
    # C[4x2] = A[4x8] B[8x2] row-major is C^T = B^T A^T column-major: m=2, n=4, k=8.
    assert cublas.calls == [("set_stream", 99, data.stream),
                            ("gemm", 0, 0, 2, 4, 8, b, 0, 2, a, 8, c, 2, 1, 68, -1, (1.0, 0.0))]
