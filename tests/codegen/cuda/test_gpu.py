"""The GPU runtime on a real GPU (the CUDA driver API and cuBLAS): the models of
test_runtime_emulated.py, instances computing on threads at once, and PyTorch taking device
tensors through __cuda_array_interface__ and DLPack. Skipped without a CUDA driver and GPU."""

import threading

import numpy as np
import pytest

import myelin
from gpumodels import gather_flow, imported_model_error, matmul_flow, mlp_flow
from jitcheck import guide_flow, relative_error
from myelin import reference
from myelin.errors import DeviceError
from myelin.runtime.cuda import cudadriver
from myelin.runtime.cuda.network import compile


@pytest.fixture(scope="module")
def driver():
    try:
        return cudadriver.default_driver()
    except DeviceError as error:
        reason = str(error)
        pytest.skip(reason if reason.startswith(cudadriver.NO_GPU)
                    else f"{cudadriver.NO_GPU}: {reason}")


def run(net, inputs):
    data = net.cell("f").instance()
    for var, value in inputs.items():
        data[var] = value
    data.compute()
    return data


def check(flow, data, inputs, tolerance=1e-4):
    for name, want in reference.run(flow, "f", inputs).items():
        error = relative_error(data[name].numpy(), want)
        assert error <= tolerance, f"{name}: relative error {error:.3g}"


def test_guide_example(driver):
    flow, x, y, W, b = guide_flow(np.random.default_rng(0))
    inputs = {x: np.random.default_rng().random((1, 64), dtype=np.float32)}
    check(flow, run(compile(flow, driver), inputs), inputs)


@pytest.mark.parametrize("batch", [1, 64])
def test_mlp(driver, batch):
    flow, x = mlp_flow(batch, [784, 512, 512, 10], np.random.default_rng(1))
    inputs = {x: np.random.default_rng().standard_normal((batch, 784)).astype(np.float32)}
    check(flow, run(compile(flow, driver), inputs), inputs)


def test_transposed_and_batched_products(driver):
    flow, inputs = matmul_flow(np.random.default_rng(2))
    check(flow, run(compile(flow, driver), inputs), inputs)


def test_gather_index_out_of_range(driver):
    flow, indices, table = gather_flow(np.random.default_rng(3))
    data = run(compile(flow, driver), {indices: np.array([[3, 0, 9]], np.int32)})
    np.testing.assert_array_equal(data["f/rows"].numpy(), table[[3, 0, 9]][None])
    data[indices] = np.array([[3, 10, 1]], np.int32)
    with pytest.raises(myelin.InputError, match=r"op f/Gather \(Gather\).*out of range"):
        data.compute()
    data[indices] = np.array([[1, 2, 3]], np.int32)
    data.compute()
    np.testing.assert_array_equal(data["f/rows"].numpy(), table[[1, 2, 3]][None])


def test_instances_compute_on_threads_at_once(driver):
    flow, x = mlp_flow(32, [256, 256, 256, 10], np.random.default_rng(4))
    cell = compile(flow, driver).cell("f")
    rng = np.random.default_rng()
    values = [rng.standard_normal((32, 256)).astype(np.float32) for _ in range(4)]
    instances = [cell.instance() for _ in values]
    errors = []

    def work(data, value):
        try:
            for _ in range(20):
                data[x] = value
                data.compute()
                check(flow, data, {x: value})
        except Exception as error:      # (reported by the main thread)
            errors.append(error)

    threads = [threading.Thread(target=work, args=pair) for pair in zip(instances, values)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_pytorch_takes_device_tensors(driver):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA")
    flow, x, y, W, b = guide_flow(np.random.default_rng(5))
    inputs = {x: np.random.default_rng().random((1, 64), dtype=np.float32)}
    data = run(compile(flow, driver), inputs)
    want = data[y].numpy()
    shared = torch.as_tensor(data[y], device="cuda")        # __cuda_array_interface__
    assert shared.data_ptr() == data[y].address
    np.testing.assert_array_equal(shared.cpu().numpy(), want)
    imported = torch.from_dlpack(data[y])
    assert imported.data_ptr() == data[y].address
    np.testing.assert_array_equal(imported.cpu().numpy(), want)


@pytest.mark.parametrize("model", ["encoder", "cnn"])
def test_imported_models(driver, model):
    """A transformer encoder and a ResNet-18-style CNN, against PyTorch on the CPU."""
    assert imported_model_error(driver, model, 4, np.random.default_rng(6)) <= 1e-4
