"""Batch inference on Ray Data: a CNN exported to ONNX classifies a data set with myelin and,
in the same predictor shape, with ONNX Runtime; the results go to Parquet.

    python examples/ray_batch.py [--rows 8192] [--batch-size 128] [--model-batch 8]
                                 [--repeats 3] [--out DIR] [--address HEAD:6379]

The data set is scikit-learn's bundled digits (8x8 images) scaled to 32x32 and augmented
(shifted by up to 2 pixels, noise added) to ``--rows`` rows of an id, an image and a label;
a small CNN (three stages of two 3x3 convolutions, 32-64-128 channels) learns them in PyTorch
(``--train-steps`` batches of 32) and is exported to ONNX. Ray starts here with this
machine's cores (or joins the cluster at ``--address``); each engine classifies the data set
in three layouts: one actor of one thread, one actor per CPU with one thread each, and one
actor per machine with all its cores. Each prints rows per second over the whole job
(``materialize``, the actors' start included) and over its compute (the first batch's start
to the last batch's end, the times the predictors record), the median of ``--repeats``
runs, and the load average. myelin compiles the model once here, for chunks of
``--model-batch`` rows, and sends it to the actors, which load it
(:class:`myelin.ray.Shipped`); ONNX Runtime computes each Ray batch of ``--batch-size`` rows
at once. The last myelin job's rows (id, label, logits) are written to Parquet in
``--out`` (replaced; on a cluster, a folder every machine writes to), and the CNN's accuracy
printed.
"""

import argparse
import io
import os
import shutil
import statistics
import tempfile
import time

import numpy as np

import myelin.onnx
from myelin.ray import Predictor, Shipped

SIZE = 32


def digits(rows, seed=0):
    """(images float32[rows, 1, 32, 32], labels int64[rows]): the bundled digits, scaled,
    shifted and with noise."""
    from sklearn.datasets import load_digits

    data = load_digits()
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(data.target), rows)
    small = (data.images[pick] / 16).astype(np.float32)
    large = np.kron(small, np.ones((SIZE // 8, SIZE // 8), np.float32))
    shifts = rng.integers(-2, 3, (rows, 2))
    images = np.stack([np.roll(image, tuple(shift), axis=(0, 1))
                       for image, shift in zip(large, shifts)])
    images += rng.normal(0, 0.1, images.shape).astype(np.float32)
    return images[:, None], data.target[pick].astype(np.int64)


def train_cnn(images, labels, steps):
    """A small CNN trained on the images for ``steps`` batches of 32 (PyTorch), exported to ONNX:
    input ``image`` [N, 1, 32, 32] -> ``logits`` [N, 10]. Returns the ONNX bytes."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def stage(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]

    model = nn.Sequential(*stage(1, 32), nn.MaxPool2d(2), *stage(32, 64), nn.MaxPool2d(2),
                          *stage(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), 3e-3)
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    start = time.perf_counter()
    for _ in range(steps):
        batch = torch.randint(0, len(x), (32,))
        loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"trained the CNN for {steps} steps of 32 images in "
          f"{time.perf_counter() - start:.1f} s (loss {loss.item():.3f})")
    model.eval()
    exported = io.BytesIO()
    torch.onnx.export(model, (x[:2],), exported, dynamo=False, input_names=["image"],
                      output_names=["logits"],
                      dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}})
    return exported.getvalue()


class Timed:
    """A predictor's calls (its ``predict``) with their start and end times added to each
    row (``t0``, ``t1``), so that a job's compute span can be read from its results."""

    def __call__(self, batch):
        start = time.time()
        out = self.predict(batch)
        rows = len(out["id"])
        out["t0"], out["t1"] = np.full(rows, start), np.full(rows, time.time())
        return out


class MyelinPredictor(Timed, Predictor):
    """myelin.ray's Predictor, timed."""

    def predict(self, batch):
        return Predictor.__call__(self, batch)


class OnnxRuntimePredictor(Timed):
    """ONNX Runtime in the predictor's shape: a session per actor, ``threads`` intra-op
    threads, the ``image`` column in and a ``logits`` column out, the other columns kept."""

    def __init__(self, model, threads):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(model, options,
                                                    providers=["CPUExecutionProvider"])

    def predict(self, batch):
        kept = {k: v for k, v in batch.items() if k != "image"}
        (kept["logits"],) = self.session.run(["logits"], {"image": batch["image"]})
        return kept


def run(ray, dataset, engine, model, workers, threads, batch_size):
    """One job: (its results materialized, seconds of the whole job)."""
    if engine == "myelin":
        fn, kwargs = MyelinPredictor, {"model": model, "inputs": {"image": "image"},
                                       "outputs": {"logits": "logits"}}
    else:
        fn, kwargs = OnnxRuntimePredictor, {"model": model, "threads": threads}
    start = time.perf_counter()
    results = dataset.map_batches(
        fn, fn_constructor_kwargs=kwargs, batch_size=batch_size, batch_format="numpy",
        num_cpus=threads, compute=ray.data.ActorPoolStrategy(size=workers)).materialize()
    return results, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8192, help="rows of the data set")
    parser.add_argument("--batch-size", type=int, default=128, help="rows per Ray batch")
    parser.add_argument("--model-batch", type=int, default=8,
                        help="rows myelin's compiled model computes at once (each Ray batch "
                             "in chunks of that many)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each job")
    parser.add_argument("--train-steps", type=int, default=60, help="training steps")
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "ray_digits"),
                        help="Parquet output folder (default: ray_digits in the temporary "
                             "folder)")
    parser.add_argument("--address", default=None,
                        help="a Ray cluster's address (default: start Ray here)")
    args = parser.parse_args()

    import ray

    images, labels = digits(args.rows)
    onnx_model = train_cnn(*digits(4096, seed=1), args.train_steps)
    cores = os.cpu_count() if args.address is None else None
    ray.init(address=args.address, num_cpus=cores, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    cores = int(ray.cluster_resources()["CPU"])
    machines = [node["Resources"].get("CPU", 0) for node in ray.nodes() if node["Alive"]]
    per_machine = int(min(machines))
    dataset = ray.data.from_items(
        [{"id": i, "image": image, "label": label}
         for i, (image, label) in enumerate(zip(images, labels))],
        override_num_blocks=4 * cores).materialize()

    # myelin compiles once here, for each thread count; the actors load the artifact.
    shipped = {}
    for threads in sorted({1, per_machine}):
        start = time.perf_counter()
        compiled = myelin.onnx.load(onnx_model, threads=threads,
                                    input_shapes={"image": (args.model_batch, 1, SIZE, SIZE)})
        shipped[threads] = Shipped(compiled)
        print(f"myelin compiled the CNN for batches of {args.model_batch}, {threads} "
              f"thread(s), in {time.perf_counter() - start:.1f} s")

    layouts = [(1, 1), (cores, 1)] + \
        ([(len(machines), per_machine)] if per_machine > 1 else [])
    print(f"\n{args.rows} rows, batches of {args.batch_size}, {cores} CPUs, medians of "
          f"{args.repeats} runs (load average before: {os.getloadavg()[0]:.2f})")
    print(f"{'engine':<12}{'actors x threads':>18}{'job rows/s':>12}{'compute rows/s':>16}")
    last = None
    for workers, threads in layouts:
        for engine in ("myelin", "onnxruntime"):
            model = shipped[threads] if engine == "myelin" else onnx_model
            jobs, spans = [], []
            for _ in range(args.repeats):
                results, seconds = run(ray, dataset, engine, model, workers, threads,
                                       args.batch_size)
                times = results.select_columns(["t0", "t1"]).to_pandas()
                jobs.append(seconds)
                spans.append(times["t1"].max() - times["t0"].min())
                if engine == "myelin":
                    last = results
            print(f"{engine:<12}{f'{workers} x {threads}':>18}"
                  f"{args.rows / statistics.median(jobs):>12.0f}"
                  f"{args.rows / statistics.median(spans):>16.0f}", flush=True)
    print(f"(load average after: {os.getloadavg()[0]:.2f})")

    out = last.select_columns(["id", "label", "logits"])
    rows = out.to_pandas()
    predicted = np.stack(rows["logits"].to_numpy()).argmax(1)
    print(f"\naccuracy of the CNN on the augmented digits: "
          f"{np.mean(predicted == rows['label'].to_numpy()):.3f}")
    folder = os.path.abspath(args.out)
    shutil.rmtree(folder, ignore_errors=True)       # (Ray adds files to a folder's)
    out.write_parquet(folder)
    print(f"wrote the predictions to {folder}")
    ray.shutdown()


if __name__ == "__main__":
    main()
