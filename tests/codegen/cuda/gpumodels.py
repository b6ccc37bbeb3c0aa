"""Small models the GPU runtime's tests run, on the emulated driver and on a real GPU."""

import numpy as np
import pytest

import myelin


def mlp_flow(batch, sizes, rng):
    """An MLP of float32 layers ``sizes`` (ReLU between, softmax last) in function "f";
    returns (flow, x)."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = value = f.var("x", myelin.DT_FLOAT, [batch, sizes[0]])
    for i, (inputs, outputs) in enumerate(zip(sizes, sizes[1:])):
        W = f.array(f"W{i}", rng.standard_normal((inputs, outputs)).astype(np.float32))
        b = f.array(f"b{i}", rng.standard_normal(outputs).astype(np.float32))
        value = f.add(f.matmul(value, W), b)
        if i < len(sizes) - 2:
            value = f.relu(value)
    f.softmax(value, name="y")
    return flow, x


def matmul_flow(rng):
    """A batched product with B transposed and a product with A transposed, of inputs;
    returns (flow, {input: value})."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    shapes = {"a": [2, 3, 5], "b": [2, 4, 5], "c": [5, 3], "d": [5, 4]}
    inputs = {f.var(name, myelin.DT_FLOAT, shape): rng.standard_normal(shape).astype(np.float32)
              for name, shape in shapes.items()}
    a, b, c, d = inputs
    f.matmul(a, b, transpose_b=True, name="p")
    f.matmul(c, d, transpose_a=True, name="q")
    return flow, inputs


def gather_flow(rng):
    """rows = table[indices] with a constant table[10, 6] and int32 indices[1, 3]; returns
    (flow, indices, table)."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    table = rng.standard_normal((10, 6)).astype(np.float32)
    indices = f.var("indices", myelin.DT_INT32, [1, 3])
    f.gather(f.array("table", table), indices, name="rows")
    return flow, indices, table


def imported_model(name, scale, rng):
    """A PyTorch model exported to ONNX and imported: "encoder" (transformer encoder, d = 32
    * scale) or "cnn" (ResNet-18 layout, width 4 * scale, 32 * scale pixels square); returns
    (the ImportedGraph, its input, PyTorch's output on the CPU)."""
    torch_models = pytest.importorskip("torch_models")     # (needs torch and onnx)
    import myelin.onnx
    import torch

    torch.manual_seed(0)
    if name == "encoder":
        module = torch_models.encoder(32 * scale, 2, 2, ff=64 * scale)
        x = rng.standard_normal((1, 8 * scale, 32 * scale)).astype(np.float32)
    else:
        module = torch_models.ResNet18(width=4 * scale, classes=10)
        x = rng.standard_normal((1, 3, 32 * scale, 32 * scale)).astype(np.float32)
    module.eval()
    tensor = torch.from_numpy(x)
    graph = myelin.onnx.import_model(torch_models.export(module, tensor, dynamic_batch=False),
                                     {"x": x.shape})
    with torch.no_grad():
        return graph, x, module(tensor).numpy()


def imported_model_error(driver, name, scale, rng):
    """The relative error of :func:`imported_model` ``name`` compiled for ``driver`` and run
    on its input, against PyTorch."""
    from jitcheck import relative_error
    from myelin.runtime.cuda.network import compile

    graph, x, want = imported_model(name, scale, rng)
    data = compile(graph.flow, driver).cells[0].instance()
    data[graph.inputs[0].var] = x
    data.compute()
    return relative_error(data[graph.outputs[0].var].numpy(), want)
