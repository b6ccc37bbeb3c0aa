"""Instances of one cell computing on threads: wall time of the same work on one thread and
on two (``compute()`` releases the GIL, so the speedup approaches the number of cores).

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
    cell = myelin.Compiler().compile(flow).cell("mlp")
    instances = [cell.instance(), cell.instance()]
    for data in instances:
        data[x] = rng.random(x.shape, dtype=np.float32)
    one = min(run_threads(instances[:1], 2 * runs) for _ in range(3))
    two = min(run_threads(instances, runs) for _ in range(3))
    print("\ntwo threads vs one: 2-layer MLP [32x256] x [256x256], "
          f"{2 * runs} compute() calls in all")
    print(f"  one thread   {one * 1e3:9.1f} ms")
    print(f"  two threads  {two * 1e3:9.1f} ms   speedup {one / two:.2f}x")
    return one / two


if __name__ == "__main__":
    main()
