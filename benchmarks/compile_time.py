"""Time to first result: how long myelin takes to import and compile the zoo's models, phase by
phase, against ONNX Runtime's session creation in the same run.

    python benchmarks/compile_time.py                       # the default models
    python benchmarks/compile_time.py --models resnet50,bert --runs 5
    python benchmarks/compile_time.py --zoo                 # also every built zoo model, cold
    python benchmarks/compile_time.py --json out.json

Every measurement is a fresh Python process (nothing compiled or imported before it), with
its own cache directory ($MYELIN_CACHE_DIR) for each run of a model:

- ``cold``: the cache directory is empty; the model is loaded from its ONNX file, imported
  and compiled (``import``: reading and importing the model, then the compiler's phases as
  its progress callback reports them, :mod:`zoo.phases`);
- ``warm``: the same again in that directory (the whole network comes from the compile cache);
- ``batch 2``: the model at batch 2 in that directory after batch 1 (a new network, whose
  kernels may come from a cache; "-" where the model's batch cannot be changed);
- ``ORT``: ONNX Runtime creating a session for the model (its import not counted), in a
  process of its own.

Python's own start and imports of myelin are not counted in any of them (they are printed
apart); the first run's time is. Times are medians over ``--runs`` runs. The zoo's
models are the built ones in the zoo folder (``benchmarks/zoo/build.py``); ``--zoo`` compiles
each once, cold, and prints the median and slowest.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from zoo import catalog  # noqa: E402

DEFAULT_MODELS = ("resnet18", "resnet50", "bert", "mobilenet_v2", "densenet121", "vit_tiny")
PHASES = ("import", "optimize", "plan", "emit", "llvm", "cache")
GOALS = (  # (what, the measurement's key in the results, goal in seconds)
    ("ResNet-50 batch 1, cold", ("resnet50", "cold"), 1.0),
    ("BERT encoder seq 128, cold", ("bert", "cold"), 1.0),
    ("ResNet-50 batch 2 after batch 1", ("resnet50", "batch2"), 0.3),
)
ZOO_GOALS = (("median cold compile over the zoo", statistics.median, 0.5),
             ("slowest zoo model, cold", max, 3.0))


def measure_here(name, folder, mode, batch):
    """The child's work: one measurement of model ``name`` (``mode`` "myelin" or "ort" at
    ``batch``, None for the model's own), as a dict printed as JSON."""
    start = time.perf_counter()
    if mode == "ort":
        import onnxruntime
    else:
        import myelin.onnx
    imports = time.perf_counter() - start
    from zoo.check import make_inputs, ort_session
    from zoo.phases import PhaseTimer
    import numpy as np

    onnx_path, json_path = catalog.paths(name, folder)
    specs = {spec["name"]: spec for spec in catalog.read_meta(json_path)["inputs"]}
    if batch is not None:
        for spec in specs.values():
            spec["shape"] = [batch] + list(spec["shape"][1:])
    feeds = make_inputs(specs, np.random.default_rng(0))
    source = str(onnx_path) if batch is None else _with_batch(onnx_path, batch)
    result = {"imports": imports}
    if mode == "ort":
        onnxruntime.set_default_logger_severity(3)
        start = time.perf_counter()
        session = ort_session(onnx_path)
        result["total"] = time.perf_counter() - start
        start = time.perf_counter()
        session.run(None, feeds)
        result["first_run"] = time.perf_counter() - start
        return result
    timer = PhaseTimer()
    shapes = {name: value.shape for name, value in feeds.items()}
    model = myelin.onnx.load(source, base_dir=str(folder), input_shapes=shapes, progress=timer)
    result["total"] = sum(timer.phases.values())
    result["phases"] = timer.rounded()
    start = time.perf_counter()
    model.run(feeds)
    result["first_run"] = time.perf_counter() - start
    return result


def _with_batch(onnx_path, batch):
    """The bytes of the model at ``onnx_path`` with the first dimension of its inputs and
    outputs made dynamic (its declared intermediate shapes dropped), for ``batch``."""
    import onnx
    model = onnx.load(str(onnx_path))
    for value in list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims:
            dims[0].dim_param = "batch"
    del model.graph.value_info[:]
    return model.SerializeToString()


def measure(name, folder, cache, mode="myelin", batch=None, timeout=600):
    """One measurement in a fresh process with ``cache`` as $MYELIN_CACHE_DIR: its dict, or
    one with ``error``."""
    command = [sys.executable, os.path.abspath(__file__), "--one", name, "--dir", str(folder),
               "--mode", mode] + (["--batch", str(batch)] if batch else [])
    env = dict(os.environ, MYELIN_CACHE_DIR=str(cache))
    env.pop("MYELIN_CACHE", None)
    # Bytecode as an installed package has it: else every process compiles the modules it
    # imports while compiling the model (0.2-0.4 s of "import" where this is set).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout} s"}
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return {"error": (lines[-1] if lines else f"exit status {done.returncode}")[:200]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_model(name, folder, runs, scenarios):
    """Median measurements of ``name`` over ``runs`` runs, per scenario ("cold", "warm",
    "batch2", "ort"), each run in a cache directory of its own."""
    samples = {scenario: [] for scenario in scenarios}
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="myelin-compile-time-") as cache:
            for scenario in scenarios:
                mode = "ort" if scenario == "ort" else "myelin"
                batch = 2 if scenario == "batch2" else None
                samples[scenario].append(measure(name, folder, cache, mode, batch))
    return {scenario: _median(results) for scenario, results in samples.items()}


def _median(results):
    """The median of each number of the runs' results (the first error if any failed)."""
    errors = [r for r in results if "error" in r]
    if errors:
        return errors[0]
    merged = {key: statistics.median(r[key] for r in results)
              for key in ("imports", "total", "first_run")}
    phases = {name for r in results for name in r.get("phases", {})}
    if phases:
        merged["phases"] = {name: statistics.median(r.get("phases", {}).get(name, 0.0)
                                                    for r in results)
                            for name in PHASES if name in phases}
    return merged


def table(results):
    """The lines of the per-model table."""
    lines = [f"{'model':<14} {'cold s':>7} " + " ".join(f"{p:>8}" for p in PHASES)
             + f" {'warm s':>7} {'batch2 s':>8} {'ORT s':>7} {'1st run':>8} {'imports':>8}"]
    for name, r in results.items():
        cold = r["cold"]
        if "error" in cold:
            lines.append(f"{name:<14} error: {cold['error']}")
            continue
        phases = cold["phases"]
        cells = [f"{phases.get(p, 0.0):8.3f}" for p in PHASES]
        lines.append(f"{name:<14} {cold['total']:7.3f} " + " ".join(cells)
                     + f" {_total(r.get('warm')):>7} {_total(r.get('batch2')):>8}"
                     + f" {_total(r.get('ort')):>7} {cold['first_run']:8.3f}"
                     + f" {cold['imports']:8.3f}")
    return lines


def _total(result):
    return "-" if not result or "error" in result else f"{result['total']:.3f}"


def goals(results, zoo):
    """The issue's goals, met or not, as lines."""
    lines = []
    for what, (name, scenario), goal in GOALS:
        r = results.get(name, {}).get(scenario)
        if not r or "error" in r:
            lines.append(f"  {what:<36} not measured      (goal <= {goal} s)")
            continue
        met = "met" if r["total"] <= goal else "not met"
        lines.append(f"  {what:<36} {r['total']:6.3f} s (goal <= {goal} s): {met}")
    colds = [r["total"] for r in zoo.values() if "error" not in r]
    for what, statistic, goal in ZOO_GOALS:
        if not colds:
            continue
        value = statistic(colds)
        lines.append(f"  {what:<36} {value:6.3f} s (goal <= {goal} s): "
                     f"{'met' if value <= goal else 'not met'}")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="comma-separated zoo models (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=3, help="runs per model (median)")
    parser.add_argument("--zoo", action="store_true",
                        help="also compile every built zoo model once, cold")
    parser.add_argument("--dir", type=Path, default=None, help="the zoo folder")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="myelin", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    folder = args.dir or catalog.zoo_dir()
    if args.one:
        print(json.dumps(measure_here(args.one, folder, args.mode, args.batch)))
        return 0
    names = [name for name in args.models.split(",") if name]
    missing = [name for name in names if not catalog.paths(name, folder)[1].exists()]
    if missing:
        raise SystemExit(f"not built: {', '.join(missing)} (run benchmarks/zoo/build.py)")
    results = {}
    for name in names:
        results[name] = measure_model(name, folder, args.runs,
                                      ("cold", "warm", "batch2", "ort"))
        print(f"measured {name}", file=sys.stderr, flush=True)
    zoo = {}
    if args.zoo:
        for json_path in sorted(folder.glob("*.json")):
            if json_path.stem in ("results",):
                continue
            zoo[json_path.stem] = measure_model(json_path.stem, folder, 1, ("cold",))["cold"]
            print(f"zoo {json_path.stem}: {_total(zoo[json_path.stem])}", file=sys.stderr,
                  flush=True)
    print(f"compile time, fresh processes, median of {args.runs} runs (seconds)")
    print("\n".join(table(results)))
    if zoo:
        ok = sorted((r["total"], name) for name, r in zoo.items() if "error" not in r)
        print(f"\nzoo: {len(ok)} of {len(zoo)} models compiled; slowest: "
              + ", ".join(f"{name} {seconds:.2f}" for seconds, name in ok[::-1][:5]))
    print("\ngoals:")
    print("\n".join(goals(results, zoo)))
    if args.json:
        args.json.write_text(json.dumps({"models": results, "zoo": zoo}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
