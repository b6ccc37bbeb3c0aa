"""Training demo: an MLP learns scikit-learn's bundled digits (8x8 images, 10 classes) with
myelin-compiled forward, loss, gradient and Adam update code, shows its progress and saves
its loss curve as a PNG.

    python examples/train_digits.py [--epochs N] [--plot digits_loss.png]

or ``make train``.

The model is 64-128-64-10 with ReLUs, trained in batches of 32 on 80% of the 1,797 images;
the other 20% measure the test accuracy (above 95% after a few epochs).
"""

import argparse
import time

import numpy as np

import myelin
from myelin import train

BATCH = 32
LAYERS = [64, 128, 64, 10]


def load_data(seed=0):
    """(train images, train labels, test images, test labels): pixels scaled to [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.data / 16).astype(np.float32)
    labels = digits.target.astype(np.int32)
    return train_test_split(images, labels, test_size=0.2, stratify=labels,
                            random_state=seed)


def build_mlp(batch=BATCH, layers=LAYERS):
    """The MLP as a flow: function ``mlp`` from ``mlp/x`` [batch, layers[0]] to the logits
    ``mlp/logits``; returns (flow, x, logits)."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "mlp")
    x = f.var("x", myelin.DT_FLOAT, [batch, layers[0]])
    h = x
    last = len(layers) - 1
    for i, (n_in, n_out) in enumerate(zip(layers, layers[1:]), 1):
        W = train.parameter(f, f"W{i}", [n_in, n_out], "uniform")
        b = train.parameter(f, f"b{i}", [n_out], "uniform", fan_in=n_in)
        h = f.add(f.matmul(h, W), b, name="logits" if i == last else None)
        if i < last:
            h = f.relu(h)
    return flow, x, h


def fit(epochs=20, lr=3e-3, seed=0, progress=None):
    """Train the MLP with Adam, the learning rate falling from ``lr`` to 0 on a cosine;
    returns (trainer, losses per step, test accuracy per epoch). ``progress(epoch, loss,
    accuracy)`` is called after each epoch."""
    train_x, test_x, train_y, test_y = load_data(seed)
    flow, x, logits = build_mlp()
    steps = epochs * (len(train_x) // BATCH)
    trainer = train.Trainer(flow, "mlp", x, logits, train.Adam(train.Cosine(lr, steps)),
                            seed=seed)
    rng = np.random.default_rng(seed)
    losses, accuracies = [], []
    for epoch in range(epochs):
        order = rng.permutation(len(train_x))
        for start in range(0, len(order) - BATCH + 1, BATCH):
            rows = order[start:start + BATCH]
            losses.append(trainer.step(train_x[rows], train_y[rows]))
        predicted = trainer.predict(test_x).argmax(1)
        accuracies.append(float((predicted == test_y).mean()))
        if progress:
            progress(epoch, float(np.mean(losses[-len(order) // BATCH:])), accuracies[-1])
    return trainer, losses, accuracies


def plot(losses, path):
    """Save the loss per step (and its running mean over 20 steps) as a PNG at ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.arange(1, len(losses) + 1)
    smooth = np.convolve(losses, np.ones(20) / 20, mode="valid")
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot(steps, losses, alpha=0.35, label="batch loss")
    axes.plot(steps[19:], smooth, label="mean of 20 steps")
    axes.set(xlabel="step", ylabel="cross-entropy loss", yscale="log",
             title="MLP on scikit-learn digits, trained by myelin")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main():
    from tqdm import tqdm

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--plot", default="digits_loss.png", help="where to save the plot")
    args = parser.parse_args()

    bar = tqdm(total=args.epochs, unit="epoch")

    def progress(epoch, loss, accuracy):
        bar.set_postfix(loss=f"{loss:.4f}", test_accuracy=f"{accuracy:.1%}")
        bar.update()

    start = time.perf_counter()
    trainer, losses, accuracies = fit(args.epochs, progress=progress)
    seconds = time.perf_counter() - start
    bar.close()
    print(f"{len(losses)} steps in {seconds:.2f} s including compiling "
          f"({len(losses) / seconds:.0f} steps per second)")
    print(f"test accuracy: {accuracies[-1]:.1%}")
    plot(losses, args.plot)
    print(f"loss curve saved to {args.plot}")


if __name__ == "__main__":
    main()
