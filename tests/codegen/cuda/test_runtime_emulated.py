"""The GPU runtime (myelin.runtime.cuda.network) on the emulated driver: networks, instances,
copies between host and device, status words, tensor interfaces and errors, without a GPU.
The same models run on a real GPU in test_gpu.py."""

import ctypes
import gc

import numpy as np
import pytest

import myelin
import myelin.cuda
from emulated_driver import EmulatedDriver
from emulator import require_nvrtc
from gpumodels import gather_flow, imported_model_error, matmul_flow, mlp_flow
from jitcheck import guide_flow, relative_error
from myelin import reference
from myelin.runtime.cuda import cudadriver, dlpack
from myelin.runtime.cuda.network import compile


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    require_nvrtc()
    return EmulatedDriver(tmp_path_factory.mktemp("emulated"))


@pytest.fixture(scope="module")
def guide(driver):
    flow, x, y, W, b = guide_flow(np.random.default_rng(0))
    return compile(flow, driver), flow, x, y


def check_outputs(flow, data, inputs, tolerance=1e-5):
    for name, want in reference.run(flow, "f", inputs).items():
        error = relative_error(data[name].numpy(), want)
        assert error <= tolerance, f"{name}: relative error {error:.3g}"


def test_guide_example_copies_only_inputs_and_outputs(guide, driver):
    net, flow, x, y = guide
    cell = net.cell("f")
    data = cell.instance()
    xv = np.random.default_rng().random((1, 64), dtype=np.float32)
    launches = sum(function is not None for _, _, function, _ in cell.work)
    driver.counts.clear()
    data[x] = xv
    data.compute()
    got = data[y].numpy()
    assert driver.counts == {"upload": 1, "launch": launches, "gemm": 1, "download": 1,
                             "synchronize": 1}
    want = reference.run(flow, "f", {x: xv})["f/y"]
    assert relative_error(got, want) <= 1e-5
    assert isinstance(data[y], myelin.cuda.DeviceTensor)
    np.testing.assert_array_equal(np.asarray(data[y]), got)
    assert data[y][0, 3] == got[0, 3]


def test_mlp(driver):
    flow, x = mlp_flow(5, [33, 47, 19, 10], np.random.default_rng(1))
    data = compile(flow, driver).cell("f").instance()
    xv = np.random.default_rng().standard_normal((5, 33)).astype(np.float32)
    data[x] = xv
    data.compute()
    check_outputs(flow, data, {x: xv})


def test_transposed_and_batched_products(driver):
    """The row-major GemmCall reaches the column-major GEMM with its operands swapped."""
    flow, inputs = matmul_flow(np.random.default_rng(2))
    data = compile(flow, driver).cell("f").instance()
    for var, value in inputs.items():
        data[var] = value
    data.compute()
    check_outputs(flow, data, inputs)


def test_gather_index_out_of_range_raises_and_recovers(driver):
    flow, indices, table = gather_flow(np.random.default_rng(3))
    data = compile(flow, driver).cell("f").instance()
    data[indices] = np.array([[3, 0, 9]], np.int32)
    data.compute()
    np.testing.assert_array_equal(data["f/rows"].numpy(), table[[3, 0, 9]][None])
    data[indices] = np.array([[3, 10, 1]], np.int32)
    with pytest.raises(myelin.InputError, match=r"op f/Gather \(Gather\).*out of range"):
        data.compute()
    data[indices] = np.array([[1, 2, 3]], np.int32)       # the status word was reset
    data.compute()
    np.testing.assert_array_equal(data["f/rows"].numpy(), table[[1, 2, 3]][None])


def test_instances_are_independent(guide, driver):
    net, flow, x, y = guide
    cell = net.cell("f")
    first, second = cell.instance(), cell.instance()
    assert first.stream != second.stream and first.address != second.address
    rng = np.random.default_rng()
    values = [rng.random((1, 64), dtype=np.float32) for _ in range(2)]
    for data, value in zip((first, second), values):
        data[x] = value
    first.compute()
    second.compute()
    for data, value in zip((first, second), values):
        want = reference.run(flow, "f", {x: value})["f/y"]
        assert relative_error(data[y].numpy(), want) <= 1e-5
    second.clear()
    assert not second[x].numpy().any() and not second[y].numpy().any()
    np.testing.assert_array_equal(first[x].numpy(), values[0])


def test_cuda_array_interface(guide):
    net, flow, x, y = guide
    data = net.cell("f").instance()
    interface = data[y].__cuda_array_interface__
    assert interface == {"shape": (1, 256), "typestr": "<f4", "data": (data[y].address, False),
                         "version": 3, "strides": None, "stream": data.stream}
    assert data.address <= data[y].address < data.address + net.cell("f").instance_size
    weights = net.tensor("f/W").__cuda_array_interface__
    assert weights["data"] == (net.address("f/W"), True) and weights["shape"] == (64, 256)


def test_dlpack_capsule(guide):
    net, flow, x, y = guide
    data = net.cell("f").instance()
    tensor = data[y]
    assert tensor.__dlpack_device__() == (dlpack.KDL_CUDA, 0)
    live = len(dlpack._LIVE)
    capsule = tensor.__dlpack__(stream=None)
    assert len(dlpack._LIVE) == live + 1
    get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    managed = dlpack.DLManagedTensor.from_address(get(capsule, b"dltensor"))
    dl = managed.dl_tensor
    assert dl.data == tensor.address and (dl.device.device_type, dl.device.device_id) == (2, 0)
    assert [dl.shape[i] for i in range(dl.ndim)] == [1, 256] and not dl.strides
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (2, 32, 1)
    del capsule, managed, dl                   # never consumed: the destructor frees it
    assert len(dlpack._LIVE) == live
    capsule = tensor.__dlpack__(stream=-1)     # consumed: the consumer calls the deleter
    rename = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_SetName", ctypes.pythonapi))
    pointer = get(capsule, b"dltensor")
    assert rename(capsule, b"used_dltensor") == 0
    managed = dlpack.DLManagedTensor.from_address(pointer)
    managed.deleter(ctypes.pointer(managed))
    assert len(dlpack._LIVE) == live
    del capsule, managed                       # and the destructor leaves it alone
    assert len(dlpack._LIVE) == live
    with pytest.raises(BufferError):
        tensor.__dlpack__(dl_device=(1, 0))


def test_wrong_inputs_raise_input_errors(guide):
    net, flow, x, y = guide
    data = net.cell("f").instance()
    with pytest.raises(myelin.InputError, match="shape"):
        data[x] = np.zeros((2, 64), np.float32)
    with pytest.raises(myelin.InputError, match="float32"):
        data[x] = np.zeros((1, 64), np.complex64)
    data[x] = np.zeros((1, 64), np.float64)           # same-kind conversion is allowed
    with pytest.raises(myelin.InputError, match="no tensor"):
        data["f/nothing"]
    with pytest.raises(myelin.InputError):
        data[1000]
    with pytest.raises(myelin.InputError, match="no cell"):
        net.cell("g")
    with pytest.raises(myelin.InputError, match="is a constant"):
        net["f/b"] = np.zeros(256, np.float32)
    with pytest.raises(myelin.InputError, match="no global"):
        net["f/none"]


def test_learnable_globals_and_reference_inputs(driver):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [3, 4])
    x.ref = True
    w = f.var("w", myelin.DT_FLOAT, [4, 2])
    w.learnable = True
    f.tanh(f.matmul(x, w), name="y")
    net = compile(flow, driver)
    assert not net[w].numpy().any()                  # learnables start at zero
    rng = np.random.default_rng()
    wv, xv = rng.standard_normal((4, 2)), rng.standard_normal((3, 4))
    net[w] = wv
    data = net.cell("f").instance()
    data[x] = xv
    data.compute()
    np.testing.assert_allclose(data["f/y"].numpy(), np.tanh(xv @ wv), rtol=1e-5, atol=1e-6)
    data[x][1, 2] = 5.0                               # an element, through a host copy
    assert data[x][1, 2] == 5.0


def test_instances_and_networks_free_their_memory(driver):
    flow, x, y, W, b = guide_flow(np.random.default_rng(4))
    gc.collect()
    allocations, streams = len(driver.allocations), len(driver.streams)
    net = compile(flow, driver)
    data = net.cell("f").instance()
    tensor = data[y]
    del data, net
    gc.collect()
    assert len(driver.allocations) > allocations       # the tensor keeps its instance
    del tensor
    gc.collect()
    assert (len(driver.allocations), len(driver.streams)) == (allocations, streams)


def test_without_a_gpu_compile_raises_device_error(monkeypatch):
    try:
        cudadriver.CudaDriver()
    except myelin.errors.DeviceError:
        pass
    else:
        pytest.skip("this machine has a GPU")
    monkeypatch.setattr(cudadriver, "_default", None)
    flow, *_ = guide_flow(np.random.default_rng(5))
    with pytest.raises(myelin.errors.DeviceError, match="no CUDA driver/GPU"):
        myelin.cuda.compile(flow)
    with pytest.raises(myelin.errors.DeviceError, match="no CUDA driver/GPU"):
        myelin.Compiler(backend="cuda").compile(flow)


@pytest.mark.parametrize("model", ["encoder", "cnn"])
def test_imported_models(driver, model):
    """A transformer encoder and a ResNet-18-style CNN, against PyTorch on the CPU."""
    assert imported_model_error(driver, model, 1, np.random.default_rng(6)) <= 1e-4


def test_the_compiler_with_backend_cuda(driver):
    """``Compiler(backend="cuda")`` is myelin.cuda.compile with the compiler's options."""
    flow, x = mlp_flow(3, [16, 24, 8], np.random.default_rng(7))
    net = myelin.Compiler(backend="cuda", driver=driver, opt_level=2).compile(flow)
    assert isinstance(net, myelin.cuda.CudaNetwork)
    data = net.cell("f").instance()
    xv = np.random.default_rng().standard_normal((3, 16)).astype(np.float32)
    data[x] = xv
    data.compute()
    check_outputs(flow, data, {x: xv})


def test_the_compiler_s_backends_and_their_options():
    with pytest.raises(myelin.CompileError, match="backend 'tpu' is not one of cpu, cuda"):
        myelin.Compiler(backend="tpu")
    with pytest.raises(myelin.CompileError, match="CPU back end given to backend='cuda': "
                                                 "threads, tune"):
        myelin.Compiler(backend="cuda", threads=2, tune=True)
    with pytest.raises(myelin.CompileError, match="a driver is for backend='cuda'"):
        myelin.Compiler(driver=object())
