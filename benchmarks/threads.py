"""Instances of one cell computing on threads: wall time of the same work on one thread and
on two (``compute()`` releases the GIL, so the speedup approaches the number of cores), for
cells compiled to run each step on the caller's thread (``threads=1``: the parallelism is the
instances') and with the default worker pool (each large step split over every core already,
so a second calling thread has no idle core to take).

Run: ``python benchmarks/threads.py``.
"""

import threading
import time

import numpy as np

import myelin


def build(rng, batch=32, width=256):
    """A two-layer MLP heavy enough that one compute() is tens of microseconds."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "mlp")
    x = f.var("x", myelin.DT_FLOAT, [batch, width])
    w1 = f.array("w1", rng.standard_normal((width, width), dtype=np.float32) * 0.05)
    w2 = f.array("w2", rng.standard_normal((width, width), dtype=np.float32) * 0.05)
    hidden = f.relu(f.matmul(x, w1))
    f.softmax(f.matmul(hidden, w2), name="y")
    return flow, x


def run_threads(instances, runs):
    """Seconds of wall time for each instance computing ``runs`` times on its own thread."""
    threads = [threading.Thread(target=lambda d=d: [d.compute() for _ in range(runs)])
               for d in instances]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


def main(runs=3000):
    rng = np.random.default_rng(0)
    flow, x = build(rng)
    print("\ntwo threads vs one: 2-layer MLP [32x256] x [256x256], "
          f"{2 * runs} compute() calls in all")
    speedups = {}
    for label, threads in (("threads=1", 1), ("worker pool", None)):
        cell = myelin.Compiler(threads=threads).compile(flow).cell("mlp")
        instances = [cell.instance(), cell.instance()]
        for data in instances:
            data[x] = rng.random(x.shape, dtype=np.float32)
        one = min(run_threads(instances[:1], 2 * runs) for _ in range(3))
        two = min(run_threads(instances, runs) for _ in range(3))
        print(f"  {label:<12} one thread {one * 1e3:7.1f} ms   two threads {two * 1e3:7.1f} ms"
              f"   speedup {one / two:.2f}x")
        speedups[label] = one / two
    return speedups


if __name__ == "__main__":
    main()
