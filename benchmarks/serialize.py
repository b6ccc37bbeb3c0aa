"""Loading a compiled model against compiling it: ResNet-18 (ImageNet's layout, batch 1,
224 x 224, ``tests/resnet_onnx.py``) compiled from ONNX, then its pickled network loaded.

    python benchmarks/serialize.py [--runs 3] [--json out.json]

Every measurement is a fresh Python process, after its imports (``myelin.onnx`` and the
compiler, or ``myelin.runtime.serialize``: timed apart, and printed):

- ``compile``: ``myelin.onnx.load(model, input_shapes=...)`` with no compile cache
  (importing the ONNX model and compiling it, cold);
- ``unpickle network``: ``pickle.loads`` of the compiled Network's pickle (read from a file
  before timing), then its output checked bit for bit against the compiling process's;
- ``load network file``: ``myelin.load(path)`` of the network saved with ``network.save``;
- ``unpickle OnnxModel``: ``pickle.loads`` of the whole OnnxModel (its ONNX model kept as
  bytes, parsed only if it compiles a new signature), then its output checked;
- ``pool of 4``: a spawned ``multiprocessing`` pool of 4 workers (started, myelin imported),
  each given the network's pickle, or the path of its saved file: the time each worker's
  ``pickle.loads`` or ``myelin.load`` took (and the CPU time it used), and until all four
  had loaded it (the pickle or path sent to each included). On a machine with fewer than 4
  free cores the four loads share them.

Times are medians over ``--runs`` runs. The processes keep Python's bytecode cache (in the
temporary folder, filled by a first compile), as an installed package has it, whatever
``PYTHONDONTWRITEBYTECODE`` says.
"""

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPE = (1, 3, 224, 224)


def _child(mode, folder):
    """One measurement in this (fresh) process; prints a JSON dict."""
    import numpy as np

    start = time.perf_counter()
    import myelin.onnx
    if mode == "compile":
        import myelin.compiler
    else:
        import myelin.runtime.serialize
    imports = time.perf_counter() - start
    x = np.load(os.path.join(folder, "x.npy"))
    if mode == "compile":
        start = time.perf_counter()
        model = myelin.onnx.load(os.path.join(folder, "resnet18.onnx"),
                                 input_shapes={"x": SHAPE}, cache=False)
        seconds = time.perf_counter() - start
        y = model.run({"x": x})[0]
        np.save(os.path.join(folder, "y.npy"), y)
        network = model.network()
        with open(os.path.join(folder, "network.pickle"), "wb") as file:
            pickle.dump(network, file)
        with open(os.path.join(folder, "model.pickle"), "wb") as file:
            pickle.dump(model, file)
        network.save(os.path.join(folder, "network.myelin"))
        size = os.path.getsize(os.path.join(folder, "network.pickle"))
        return {"imports": imports, "seconds": seconds, "bytes": size}
    want = np.load(os.path.join(folder, "y.npy"))
    if mode == "file":
        start = time.perf_counter()
        network = myelin.load(os.path.join(folder, "network.myelin"))
        seconds = time.perf_counter() - start
        return {"imports": imports, "seconds": seconds, "same": _same(network, x, want)}
    name = "model.pickle" if mode == "model" else "network.pickle"
    with open(os.path.join(folder, name), "rb") as file:
        data = file.read()
    start = time.perf_counter()
    loaded = pickle.loads(data)
    seconds = time.perf_counter() - start
    if mode == "model":
        same = loaded.run({"x": x})[0].tobytes() == want.tobytes() and \
            len(loaded.compiles) == 1
        return {"imports": imports, "seconds": seconds, "same": same}
    if mode == "network":
        return {"imports": imports, "seconds": seconds, "same": _same(loaded, x, want)}
    raise SystemExit(f"unknown mode {mode}")


def _same(network, x, want):
    cell = network.cells[0]
    data = cell.instance()
    data["main/x"] = x
    data.compute()
    return data.array(cell.outputs[0]).reshape(want.shape).tobytes() == want.tobytes()


def _imports():
    """A worker's start: its imports, as the other loading processes'."""
    import myelin.onnx
    import myelin.runtime.serialize  # noqa: F401


def _started(_):
    time.sleep(0.5)
    return os.getpid()


def _worker(sent):
    """Seconds and CPU seconds this worker took to load the network ``sent`` to it: its
    pickle, or its file's path."""
    import myelin

    start, cpu = time.perf_counter(), time.process_time()
    if isinstance(sent, bytes):
        pickle.loads(sent)
    else:
        myelin.load(sent)
    return time.perf_counter() - start, time.process_time() - cpu


def _pool(folder, sent):
    """The loads of a pool of 4 workers, each ``sent`` "pickle" (the network's pickle) or
    "file" (the path of its saved file)."""
    import multiprocessing

    if sent == "pickle":
        with open(os.path.join(folder, "network.pickle"), "rb") as file:
            sent = file.read()
    else:
        sent = os.path.join(folder, "network.myelin")
    context = multiprocessing.get_context("spawn")
    with context.Pool(4, initializer=_imports) as pool:
        while len(set(pool.map(_started, range(8), chunksize=1))) < 4:
            pass                            # every worker started and imported
        start = time.perf_counter()
        loads = pool.map(_worker, [sent] * 4, chunksize=1)
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "loads": loads}


def _run(mode, folder):
    # (compiling modules' source is not part of compiling or loading a model)
    env = dict(os.environ, PYTHONPYCACHEPREFIX=os.path.join(folder, "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, __file__, "--child", mode, folder], check=True,
                         capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, folder = args.child
        result = _pool(folder, mode[5:]) if mode.startswith("pool") else \
            _child(mode, folder)
        print(json.dumps(result))
        return

    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import numpy as np
    import resnet_onnx

    results = {}
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "resnet18.onnx"), "wb") as file:
            file.write(resnet_onnx.resnet().SerializeToString())
        np.save(os.path.join(folder, "x.npy"),
                np.random.default_rng(0).standard_normal(SHAPE, np.float32))
        _run("compile", folder)             # (fills the bytecode cache)
        for _ in range(args.runs):
            for mode in ("compile", "network", "file", "model", "pool-pickle", "pool-file"):
                results.setdefault(mode, []).append(_run(mode, folder))
    compile_ = statistics.median(r["seconds"] for r in results["compile"])
    imports = {mode: statistics.median(r["imports"] for r in results[mode])
               for mode in ("compile", "network")}
    print(f"ResNet-18 (batch 1, 224x224), medians of {args.runs} runs, "
          f"{os.cpu_count()} CPUs; pickle {results['compile'][0]['bytes'] / 2**20:.1f} MiB")
    print(f"{'':24}{'seconds':>9}{'of compile':>12}")
    print(f"{'compile (cold)':24}{compile_:9.3f}{'':>12}")
    for mode, label in (("network", "unpickle network"), ("file", "load network file"),
                        ("model", "unpickle OnnxModel")):
        seconds = statistics.median(r["seconds"] for r in results[mode])
        same = all(r["same"] for r in results[mode])
        print(f"{label:24}{seconds:9.3f}{seconds / compile_:11.1%}"
              f"{'' if same else '  OUTPUTS DIFFER'}")
    for mode, sent in (("pool-pickle", "pickle"), ("pool-file", "path")):
        loads = [load for r in results[mode] for load, _ in r["loads"]]
        cpu = statistics.median(cpu for r in results[mode] for _, cpu in r["loads"])
        pool = statistics.median(r["seconds"] for r in results[mode])
        print(f"{f'pool of 4, {sent}: each':24}{statistics.median(loads):9.3f}"
              f"{statistics.median(loads) / compile_:11.1%}  (slowest {max(loads):.3f}; "
              f"CPU {cpu:.3f} s, {cpu / compile_:.1%})")
        print(f"{f'pool of 4, {sent}: all':24}{pool:9.3f}{pool / compile_:11.1%}")
    print(f"imports before timing: {imports['compile']:.3f} s (myelin.onnx, compiler), "
          f"{imports['network']:.3f} s (myelin.onnx, serialize)")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
