"""The demo: build the Myelin guide's example network, check it with the reference
interpreter, save and reload it as a .flow file, compile it to native code, and run it.

    y = softmax(relu(x W + b)),  x: float32[1x64], W: float32[64x256], b: float32[256]
"""

import os
import tempfile
import time

import numpy as np

import myelin


def build_flow(rng):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    W = f.array("W", rng.random((64, 256)).astype(np.float32))
    b = f.array("b", rng.random(256).astype(np.float32))
    x = f.var("x", myelin.DT_FLOAT, [1, 64])
    y = f.softmax(f.relu(f.add(f.matmul(x, W), b)), name="y")
    return flow, x, y


def main():
    rng = np.random.default_rng(42)
    flow, x, y = build_flow(rng)
    x_value = rng.random((1, 64)).astype(np.float32)

    # 1. The reference interpreter (float64 NumPy) is the oracle.
    expected = myelin.reference.run(flow, "f", {x: x_value})[y.name]
    print(f"reference: y sums to {expected.sum():.6f}, argmax {expected.argmax()}")

    # 2. Save as a .flow file (SLING's format, version 6) and load it back.
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "guide.flow")
        flow.save(path)
        loaded = myelin.Flow.load(path)
        print(f"saved and reloaded {path}: {os.path.getsize(path)} bytes, "
              f"{len(loaded.vars)} variables, {len(loaded.ops)} ops")
    print("\nthe loaded flow (without constant data):")
    print("\n".join(str(loaded).splitlines()[:24]) + "\n  ...")

    # 3. Compile the loaded flow to native code and show the cell.
    start = time.perf_counter()
    compiler = myelin.Compiler()
    net = compiler.compile(loaded)
    compile_ms = (time.perf_counter() - start) * 1e3
    cell = net.cell("f")
    print(f"compiled for {net.target.cpu} ({net.target.isa()}) in {compile_ms:.0f} ms:\n")
    print(cell)

    # 4. Compute and compare with the reference.
    data = cell.instance()
    data["f/x"] = x_value
    data.compute()
    result = np.asarray(data["f/y"])
    error = np.abs(result - expected).max()
    print(f"compiled: y sums to {result.sum():.6f}, argmax {result.argmax()}, "
          f"max |compiled - reference| = {error:.2e}")
    assert error < 1e-5, "compiled result differs from the reference"

    # 5. Time compute(): one native call per run.
    runs = 20000
    start = time.perf_counter()
    for _ in range(runs):
        data.compute()
    per_call = (time.perf_counter() - start) / runs
    print(f"compute(): {per_call * 1e6:.2f} us per call (mean of {runs})")


if __name__ == "__main__":
    main()
