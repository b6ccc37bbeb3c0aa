"""The Trainer end to end: myelin.gradient, the loss, the optimizer and the compiled network
together. The same MLP, initial weights, data order and optimizer in PyTorch give the same
loss curve over 100 steps, and the digits example learns its task.

The curves agree to about 1e-6 relative. Rarely, a hidden unit's pre-activation lands within
rounding of zero, the two ReLUs take different sides, and the curves drift apart by up to about
1e-4 from then on. So the typical step is held to 1e-5 and the worst one to 1e-3."""

import importlib.util
import pathlib

import numpy as np
import pytest
import torch

import myelin
from myelin import train
from myelin.errors import FlowError, InputError

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "train_digits.py"
BATCH, LAYERS, STEPS = 16, [64, 32, 24, 10], 100


def _example():
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torch_mlp(trainer, layers):
    """The trainer's MLP as PyTorch parameters holding its initial values."""
    params = []
    for i in range(1, len(layers)):
        for name in (f"W{i}", f"b{i}"):
            params.append(torch.tensor(np.array(trainer.network[f"mlp/{name}"]),
                                       requires_grad=True))
    return params


def _torch_forward(params, x):
    h = x
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i + 2 < len(params):
            h = torch.relu(h)
    return h


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_loss_curve_matches_pytorch(kind):
    example = _example()
    rng = np.random.default_rng()
    images, _, labels, _ = example.load_data(int(rng.integers(1000)))
    flow, x, logits = example.build_mlp(BATCH, LAYERS)
    if kind == "sgd":
        optimizer = train.SGD(0.05, momentum=0.9, weight_decay=1e-3)
    else:
        optimizer = train.Adam(train.Cosine(1e-2, STEPS), weight_decay=1e-4)
    trainer = train.Trainer(flow, "mlp", x, logits, optimizer, seed=int(rng.integers(1000)))

    params = _torch_mlp(trainer, LAYERS)
    if kind == "sgd":
        reference = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3)
        schedule = None
    else:
        reference = torch.optim.Adam(params, lr=1e-2, weight_decay=1e-4)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(reference, STEPS)

    ours, theirs = [], []
    for step in range(STEPS):
        rows = rng.choice(len(images), BATCH, replace=False)
        ours.append(trainer.step(images[rows], labels[rows]))
        reference.zero_grad()
        logits = _torch_forward(params, torch.tensor(images[rows]))
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(labels[rows]).long())
        loss.backward()
        reference.step()
        if schedule:
            schedule.step()
        theirs.append(loss.item())

    relative = np.abs(np.subtract(ours, theirs)) / np.abs(theirs)
    assert np.median(relative) < 1e-5
    np.testing.assert_allclose(ours, theirs, rtol=1e-3)
    assert np.mean(ours[-10:]) < 0.5 * np.mean(ours[:10])
    error = np.abs(np.array(trainer.network["mlp/W1"]) - params[0].detach().numpy()).max()
    assert error < 1e-3


def test_digits_example_reaches_95_percent():
    trainer, losses, accuracies = _example().fit(epochs=20, seed=int(np.random.randint(1000)))
    assert accuracies[-1] >= 0.95
    assert len(losses) == 20 * (1437 // 32)


def test_mean_squared_error_regression():
    """A linear model fit by SGD under the MSE loss recovers the weights of its data."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "linear")
    x = f.var("x", myelin.DT_FLOAT, [32, 4])
    W = train.parameter(f, "W", [4, 2])
    y = f.matmul(x, W, name="y")
    trainer = train.Trainer(flow, "linear", x, y, train.SGD(0.1), loss="mean_squared_error")
    true_W = rng.standard_normal((4, 2)).astype(np.float32)
    for _ in range(300):
        batch = rng.standard_normal((32, 4)).astype(np.float32)
        last = trainer.step(batch, batch @ true_W)
    assert last < 1e-6
    np.testing.assert_allclose(trainer.network["linear/W"], true_W,
                               atol=1e-3)
    test = rng.standard_normal((45, 4)).astype(np.float32)
    np.testing.assert_allclose(trainer.predict(test), test @ true_W, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("loss", [train.softmax_cross_entropy, "softmax_cross_entropy",
                                  train.mean_squared_error])
def test_the_loss_is_a_function_of_train_or_its_name(loss):
    example = _example()
    flow, x, logits = example.build_mlp(8, [6, 5, 3])
    trainer = train.Trainer(flow, "mlp", x, logits, train.SGD(0.1), loss=loss)
    classes = loss is not train.mean_squared_error
    targets = np.zeros(8, np.int32) if classes else np.zeros((8, 3), np.float32)
    assert np.isfinite(trainer.step(np.ones((8, 6), np.float32), targets))


def test_bad_uses_are_errors():
    example = _example()
    flow, x, logits = example.build_mlp(8, [6, 5, 3])
    with pytest.raises(FlowError, match="no function"):
        train.Trainer(flow, "nope", x, logits, train.SGD(0.1))
    with pytest.raises(FlowError, match="unknown loss"):
        train.Trainer(flow, "mlp", x, logits, train.SGD(0.1), loss="hinge")
    with pytest.raises(FlowError, match="not a variable"):
        train.Trainer(flow, "mlp", "mlp/nothing", logits, train.SGD(0.1))
    trainer = train.Trainer(flow, "mlp", x, logits, train.SGD(0.1))
    with pytest.raises(InputError, match="rows of shape"):
        trainer.predict(np.zeros((3, 7), np.float32))
    with pytest.raises(InputError):
        trainer.step(np.zeros((8, 6), np.float32), np.zeros(7, np.int32))
    with pytest.raises(InputError, match="takes 1 inputs"):
        trainer.step([np.zeros((8, 6), np.float32)] * 2, np.zeros(8, np.int32))
