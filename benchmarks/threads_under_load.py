"""Threads under load: the latency of zoo models when another program keeps one core busy.

For each model, myelin with its default worker pool and with ``threads=1``, and ONNX Runtime
with its default threads and with one, taking turns in each round, are timed with the machine
idle and again while a second process spins on the CPU (one core busy with other work). Under
load the default pool must not be slower than ``threads=1``: the column "pool / 1t" is the
default's latency over one thread's (below 1: the pool helps; issue 24 asks for at most 1.0
under load). The column "again / 1t" is a second ``threads=1`` model of the same code over the
first, timed in the same turns: how far two identical systems land apart in the same run (the
noise that a ratio of the other columns is within).

The models are the zoo's ONNX files (build them with ``make zoo``). Each system is timed in
rounds, taking turns, each turn after a pause, and the median is reported.

Run: ``python benchmarks/threads_under_load.py [MODEL ...] [--rounds N]``.
"""

import argparse
import multiprocessing
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import format_seconds, ort_session  # noqa: E402

import myelin.onnx  # noqa: E402

ZOO = os.path.join(os.path.dirname(__file__), "zoo", "models")
MODELS = ("resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0")


def spin():
    """Keep one core busy until terminated."""
    while True:
        pass


def measure(runs, rounds, calls=5, pause=0.1, warm_up=1.0):
    """The median over ``rounds`` of the mean seconds per call of each of ``runs`` (by name),
    the systems taking turns within each round (so that a machine whose speed drifts slows
    them alike). The pause before each system's turn outlasts ONNX Runtime's workers, which
    spin for about 50 ms after a run: within it they would be one more busy core for the
    next system. Each system first runs for ``warm_up`` seconds, so that what the last load
    taught a thread pool (myelin's runs its calls alone for up to 256 ms of their time after
    a verdict) has run out."""
    for run in runs.values():
        end = time.perf_counter() + warm_up
        while time.perf_counter() < end:
            run()
    samples = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            time.sleep(pause)
            start = time.perf_counter()
            for _ in range(calls):
                run()
            samples[name].append((time.perf_counter() - start) / calls)
    return {name: statistics.median(times) for name, times in samples.items()}


def contenders(path):
    """Callables computing the model at ``path`` in each system, on fixed random inputs."""
    ort = ort_session(path)
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.random([d if isinstance(d, int) else 1 for d in i.shape],
                                dtype=np.float32) for i in ort.get_inputs()}
    ort_one = ort_session(path, threads=1)
    pooled = myelin.onnx.load(path)
    single = myelin.onnx.load(path, threads=1)
    again = myelin.onnx.load(path, threads=1)
    return {"myelin pool": lambda: pooled.run(feeds), "myelin 1t": lambda: single.run(feeds),
            "myelin 1t again": lambda: again.run(feeds),
            "ORT": lambda: ort.run(None, feeds), "ORT 1t": lambda: ort_one.run(None, feeds)}


def main(models, rounds):
    print(f"{'model':<20}{'load':<10}{'myelin pool':>13}{'myelin 1t':>13}{'pool / 1t':>11}"
          f"{'again / 1t':>12}{'ORT':>13}{'ORT 1t':>13}{'ORT / 1t':>10}")
    for model in models:
        path = os.path.join(ZOO, f"{model}.onnx")
        if not os.path.exists(path):
            print(f"{model:<20}not built (make zoo)")
            continue
        runs = contenders(path)
        for load in ("idle", "1 core"):
            busy = None
            if load != "idle":
                busy = multiprocessing.Process(target=spin, daemon=True)
                busy.start()
                time.sleep(0.2)
            try:
                t = measure(runs, rounds)
            finally:
                if busy is not None:
                    busy.terminate()
                    busy.join()
            print(f"{model:<20}{load:<10}{format_seconds(t['myelin pool']):>13}"
                  f"{format_seconds(t['myelin 1t']):>13}{t['myelin pool'] / t['myelin 1t']:>11.2f}"
                  f"{t['myelin 1t again'] / t['myelin 1t']:>12.2f}"
                  f"{format_seconds(t['ORT']):>13}{format_seconds(t['ORT 1t']):>13}"
                  f"{t['ORT'] / t['ORT 1t']:>10.2f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS),
                        help=f"zoo model names (default: {' '.join(MODELS)})")
    parser.add_argument("--rounds", type=int, default=15, help="rounds per system and load")
    args = parser.parse_args()
    main(args.models, args.rounds)
