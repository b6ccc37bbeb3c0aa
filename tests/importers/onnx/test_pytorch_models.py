"""Models exported from PyTorch with random weights: myelin's compiled code against ONNX Runtime."""

import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
import myelin.onnx  # noqa: E402
from torch_models import LstmCell, ResNet18, encoder, export, mlp  # noqa: E402

nn = torch.nn

def _onnxruntime(model_bytes, x):
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _relative_error(actual, expected):
    return np.linalg.norm(actual - expected) / np.linalg.norm(expected)


def _randomize_batch_norm(module, rng):
    """Give batch norms statistics that are not the identity."""
    for sub in module.modules():
        if isinstance(sub, nn.BatchNorm2d):
            sub.running_mean.copy_(torch.tensor(rng.normal(0, 0.2, sub.num_features)))
            sub.running_var.copy_(torch.tensor(rng.uniform(0.5, 2, sub.num_features)))
            sub.weight.data.copy_(torch.tensor(rng.uniform(0.5, 1.5, sub.num_features)))
            sub.bias.data.copy_(torch.tensor(rng.normal(0, 0.2, sub.num_features)))


MODELS = {
    "resnet18": (lambda: ResNet18(), (2, 3, 64, 64)),
    "encoder": (encoder, (2, 16, 64)),
    "mlp": (mlp, (5, 32)),
    "lstm": (lambda: LstmCell(), (3, 6, 12)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_matches_onnxruntime(name):
    rng = np.random.default_rng(7)
    factory, shape = MODELS[name]
    torch.manual_seed(int(rng.integers(1 << 30)))
    module = factory()
    with torch.no_grad():
        _randomize_batch_norm(module, rng)
    model_bytes = export(module, torch.randn(*shape), dynamic_batch=name != "lstm")
    model = myelin.onnx.load(model_bytes)
    for _ in range(2):
        x = rng.standard_normal(shape).astype(np.float32)
        (y,) = model.run({"x": x})
        assert _relative_error(y, _onnxruntime(model_bytes, x)) < 1e-4
    assert len(model.compiles) == 1


def test_new_batch_size_recompiles_once(caplog):
    rng = np.random.default_rng(3)
    model_bytes = export(mlp(), torch.randn(4, 32))
    model = myelin.onnx.load(model_bytes)
    with caplog.at_level(logging.INFO, logger="myelin.onnx"):
        for batch in (4, 9, 4, 9, 1):
            x = rng.standard_normal((batch, 32)).astype(np.float32)
            (y,) = model.run([x])
            assert _relative_error(y, _onnxruntime(model_bytes, x)) < 1e-5
    assert [reason for _, reason, _ in model.compiles] == [
        "first run", "x shape [4, 32] -> [9, 32]", "x shape [9, 32] -> [1, 32]"]
    assert sum("compiled" in r.message for r in caplog.records) == 3


def test_input_shapes_compile_ahead_of_time():
    model_bytes = export(mlp(), torch.randn(4, 32))
    model = myelin.onnx.load(model_bytes, input_shapes={"x": (6, 32)})
    assert [reason for _, reason, _ in model.compiles] == ["shapes given at load time"]
    x = np.random.default_rng(1).standard_normal((6, 32)).astype(np.float32)
    model.run([x])
    assert len(model.compiles) == 1
