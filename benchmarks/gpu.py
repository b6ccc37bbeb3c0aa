"""The GPU back end on a real GPU, against PyTorch eager on CUDA, in one run:

1. a chain of 10 element-wise ops on a 4M-element float32 tensor, fused into one kernel
   (the default) and unfused (the "fuse" pass disabled: one kernel per op);
2. a 4-layer transformer encoder, d=256, 4 heads, feed-forward 1024, sequence 128, batch 1;
3. a ResNet-18-style CNN at batch 1, 224x224, 1000 classes.

Models 2 and 3 are PyTorch modules with random weights, exported to ONNX and imported by
myelin. Times are per compute on device-resident inputs, from the first launch until the
stream is done (``compute()`` and ``synchronize()``; PyTorch: the forward pass and
``torch.cuda.synchronize()``); each table prints myelin's latency over each system's (below
1: myelin is faster). Without a GPU (or without CUDA in PyTorch, for its column) it says so
and exits with status 0.

Run: ``python benchmarks/gpu.py``.
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "importers",
                                "onnx"))
from common import compare  # noqa: E402
from fusion import CHAINS, chain_flow, chain_numpy  # noqa: E402
from torch_models import ResNet18, encoder, export  # noqa: E402

import myelin.cuda  # noqa: E402
import myelin.onnx  # noqa: E402
from myelin.errors import DeviceError, UnsupportedOpError  # noqa: E402
from myelin.runtime.cuda.cudadriver import default_driver  # noqa: E402

TORCH_OPS = {"Mul": torch.mul, "Add": torch.add, "Sub": torch.sub, "Max": torch.clamp_min,
             "Min": torch.clamp_max, "Abs": torch.abs, "Neg": torch.neg}


def torch_cuda():
    """True if PyTorch can compute on the GPU (else its column is left out, saying why)."""
    if torch.cuda.is_available():
        return True
    print("  PyTorch eager on CUDA: left out (this PyTorch has no CUDA)")
    return False


def instance(net, inputs):
    """An instance of ``net``'s cell with ``inputs`` ({variable name: array}) copied in,
    and its timed call."""
    data = net.cells[0].instance()
    for name, value in inputs.items():
        data[name] = value

    def run():
        data.compute()
        data.synchronize()
    return data, run


def torch_timed(function, *arguments):
    def run():
        function(*arguments)
        torch.cuda.synchronize()
    return run


def bench_chain(chain=CHAINS["arithmetic"], elements=1 << 22):
    shape = [elements // 1024, 1024]
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    flow = chain_flow(chain, shape)
    fused, run_fused = instance(myelin.cuda.compile(flow), {"chain/x": x})
    _, run_unfused = instance(myelin.cuda.compile(flow, disable_passes=("fuse",)),
                              {"chain/x": x})
    run_fused()
    np.testing.assert_allclose(fused["chain/y"].numpy(), chain_numpy(chain, x), rtol=1e-5,
                               atol=1e-6)
    contenders = {"myelin": run_fused, "myelin unfused": run_unfused}
    if torch_cuda():
        tx = torch.from_numpy(x).cuda()

        def eager(value):
            for op, constant in chain:
                value = TORCH_OPS[op](value) if constant is None else TORCH_OPS[op](value,
                                                                                   constant)
            return value
        contenders["pytorch"] = torch_timed(eager, tx)
    compare(f"10 element-wise ops on float32[{shape[0]}x{shape[1]}] (GPU)", contenders)


def bench_model(title, module, x):
    """``module`` exported to ONNX, compiled for the GPU and timed on ``x``."""
    tensor = torch.from_numpy(x)
    imported = myelin.onnx.import_model(export(module, tensor, dynamic_batch=False),
                                        {"x": x.shape})
    try:
        net = myelin.cuda.compile(imported.flow)
    except UnsupportedOpError as error:
        print(f"\n{title}: left out, the GPU back end cannot compile it yet: {error}")
        return
    data, run = instance(net, {imported.inputs[0].var: x})
    run()
    with torch.no_grad():
        want = module(tensor).numpy()
    got = data[imported.outputs[0].var].numpy()
    print(f"\n  myelin vs PyTorch (CPU) outputs: relative difference "
          f"{np.linalg.norm(got - want) / np.linalg.norm(want):.2e}")
    contenders = {"myelin": run}
    if torch_cuda():
        device_module, device_x = module.cuda(), tensor.cuda()
        contenders["pytorch"] = torch_timed(torch.no_grad()(device_module), device_x)
    compare(f"{title} (GPU)", contenders)


def main():
    try:
        driver = default_driver()
    except DeviceError as error:
        print(f"no GPU: the GPU benchmarks need one ({error})")
        return 0
    print(f"GPU: {driver.name}, compute capability {driver.capability[0]}."
          f"{driver.capability[1]}, {driver.device.sm_count} multiprocessors")
    bench_chain()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    bench_model("transformer encoder d=256, 4 layers, sequence 128",
                encoder(256, 4, 4, ff=1024).eval(),
                rng.standard_normal((1, 128, 256), dtype=np.float32))
    bench_model("ResNet-18 224x224", ResNet18(width=64, classes=1000).eval(),
                rng.standard_normal((1, 3, 224, 224), dtype=np.float32))
    return 0


if __name__ == "__main__":
    sys.exit(main())
