"""Training steps per second: myelin's Trainer (compiled forward, loss, gradient and fused
optimizer update) against the same MLP, loss and optimizer in PyTorch eager, in one run.

Models: the digits MLP of ``examples/train_digits.py`` (64-128-64-10, batch 32) and a
784-512-512-10 MLP (batch 64), each with Adam and with SGD (momentum 0.9). A step is forward,
softmax cross-entropy, backward and update on one batch (the same batch every step).

Run: ``python benchmarks/training.py``. Prints steps per second and the speedup of myelin over
PyTorch (above 1: myelin is faster); the goal is 2x.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from common import time_call  # noqa: E402
from train_digits import build_mlp  # noqa: E402

from myelin import train  # noqa: E402

MODELS = {"digits MLP 64-128-64-10, batch 32": (32, [64, 128, 64, 10]),
          "MLP 784-512-512-10, batch 64": (64, [784, 512, 512, 10])}
OPTIMIZERS = {"Adam": (lambda: train.Adam(1e-3), lambda torch, p: torch.optim.Adam(p, 1e-3)),
              "SGD": (lambda: train.SGD(0.01, momentum=0.9),
                      lambda torch, p: torch.optim.SGD(p, 0.01, momentum=0.9))}
GOAL = 2.0


def myelin_step(batch, layers, optimizer, images, labels):
    """A function running one myelin training step."""
    flow, x, logits = build_mlp(batch, layers)
    trainer = train.Trainer(flow, "mlp", x, logits, optimizer)
    return lambda: trainer.step(images, labels)


def torch_step(torch, layers, make_optimizer, images, labels):
    """A function running one PyTorch eager training step of the same MLP."""
    modules = []
    for n_in, n_out in zip(layers, layers[1:]):
        modules += [torch.nn.Linear(n_in, n_out), torch.nn.ReLU()]
    model = torch.nn.Sequential(*modules[:-1])
    optimizer = make_optimizer(torch, model.parameters())
    x, y = torch.from_numpy(images), torch.from_numpy(labels).long()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return step


def main():
    import torch

    # Every myelin case first, then every PyTorch case: PyTorch's OpenMP threads keep
    # spinning for a while after it ran, which would take a core from the next case.
    rng = np.random.default_rng(0)
    cases = []
    for model, (batch, layers) in MODELS.items():
        images = rng.random((batch, layers[0]), dtype=np.float32)
        labels = rng.integers(0, layers[-1], batch).astype(np.int32)
        for name, (ours, theirs) in OPTIMIZERS.items():
            cases.append((model, name, batch, layers, ours, theirs, images, labels))
    mine = [time_call(myelin_step(batch, layers, ours(), images, labels), 1.0)
            for _, _, batch, layers, ours, _, images, labels in cases]
    eager = [time_call(torch_step(torch, layers, theirs, images, labels), 1.0)
             for _, _, _, layers, _, theirs, images, labels in cases]
    rows = [(case[0], case[1], 1 / ours, 1 / theirs, theirs / ours)
            for case, ours, theirs in zip(cases, mine, eager)]

    print("\n## Training steps per second (myelin Trainer vs PyTorch eager "
          f"{torch.__version__}, {torch.get_num_threads()} threads)\n")
    print("| model | optimizer | myelin steps/s | PyTorch steps/s | speedup |")
    print("|---|---|---|---|---|")
    for model, name, mine, eager, speedup in rows:
        print(f"| {model} | {name} | {mine:,.0f} | {eager:,.0f} | **{speedup:.2f}x** |")
    met = all(row[-1] >= GOAL for row in rows)
    print(f"\nGoal: at least {GOAL}x PyTorch eager's steps per second: "
          f"{'met' if met else 'not met'} (lowest {min(row[-1] for row in rows):.2f}x).")


if __name__ == "__main__":
    main()
