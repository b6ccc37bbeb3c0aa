"""Check the zoo's PyTorch architectures through myelin's PyTorch front end, against eager
PyTorch: ``myelin.torch.compile`` (torch.export) and ``torch.compile(backend="myelin")``
(Dynamo).

    python benchmarks/zoo/torch_run.py                  # one model per architecture
    python benchmarks/zoo/torch_run.py resnet18 bert    # these
    python benchmarks/zoo/torch_run.py --all            # every float32 PyTorch model
    python benchmarks/zoo/torch_run.py --report         # the table of the results kept

The models are the zoo's torchvision, timm and transformers ones (benchmarks/zoo/*_models.py,
seeded random weights, no hub), built as PyTorch modules instead of ONNX files: nothing needs
to be built first. Each model is checked in a subprocess of its own with a time limit: its
eager outputs on fresh inputs, then each path's compile time, outputs (within 1e-4 of the
largest magnitude, as the zoo's float32 checks: "ok"; outside it but no farther from eager
PyTorch in float64 than eager PyTorch's float32 results are: "close"; else "wrong") and,
unless --no-latency, latency beside eager PyTorch's. Dynamo runs with ``fallback`` off, so a graph myelin cannot compile is an
error rather than eager PyTorch in disguise; graph breaks are counted. Prints one row per
model as it goes, then the table sorted, the count of architectures that pass both paths
and the errors. Results are kept as JSON (default: torch_results.json in the zoo folder).
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import alternating

from zoo import catalog

FAMILIES = {"torchvision": "zoo.torchvision_models", "timm": "zoo.timm_models",
            "transformers": "zoo.transformers_models"}
PATHS = ("export", "dynamo")
HEADER = (f"{'model':<30} {'arch':<28} {'export':<8} {'dynamo':<8} {'graphs':>6} "
          f"{'compile s':>9} {'dyn s':>6} {'rel err':>8} {'eager':>9} {'myelin':>9} "
          f"{'ratio':>5}  note")


def architecture(model):
    """What the model is an instance of: its torchvision/timm architecture, or its
    transformers class (the encoder part, where only that is taken)."""
    options = model.options
    if model.family == "transformers":
        return options["model"] + (".encoder" if options.get("part") == "encoder" else "")
    return options["arch"]


def torch_models(every=False):
    """The catalog's float32 PyTorch models: one per architecture (the first listed), or
    ``every`` one."""
    chosen, seen = {}, set()
    for model in catalog.load_all().values():
        if model.family not in FAMILIES or model.precision != "float32" or model.base:
            continue
        arch = architecture(model)
        if every or arch not in seen:
            chosen[model.name] = model
        seen.add(arch)
    return chosen


def build(model):
    """(module in eval mode, example arguments) of a zoo model."""
    import importlib
    return importlib.import_module(FAMILIES[model.family]).module(model)


def fresh_inputs(model, seed=1):
    """Inputs of the model's kinds and shapes other than the example ones, as tensors."""
    import numpy as np
    import torch

    from zoo import check
    arrays = check.make_inputs({f"input{i}": spec for i, spec in enumerate(model.inputs)},
                               np.random.default_rng(seed))
    return tuple(torch.from_numpy(arrays[f"input{i}"]) for i in range(len(model.inputs)))


def _flat(value):
    import torch
    from torch.utils import _pytree as pytree
    return [v.detach().numpy() for v in pytree.tree_leaves(value) if isinstance(v, torch.Tensor)]


def check_here(name, out, latency=True):
    """The subprocess's work: check one model through both paths, writing the result (and
    each stage reached, so that a crash says where) to ``out``."""
    import torch

    import myelin.torch
    from zoo import check

    model = catalog.load_all()[name]
    result = {"name": name, "arch": architecture(model), "family": model.family}

    def stage(label):
        result["stage"] = label
        Path(out).write_text(json.dumps(result))

    stage("build")
    net, args = build(model)
    inputs = fresh_inputs(model)
    with torch.no_grad():
        want = _flat(net(*inputs))
    runs = {"eager": lambda: net(*inputs)}
    for path in PATHS:
        stage(path)
        entry = result[path] = {}
        try:
            start = time.perf_counter()
            if path == "export":
                compiled = myelin.torch.compile(net, args)
                entry["timings"] = {k: round(v, 3) for k, v in compiled.timings[0].items()}
            else:
                torch._dynamo.reset()
                graphs = []
                registered = torch._dynamo.backends.registry.lookup_backend("myelin")

                def counting(gm, example_inputs, graphs=graphs, registered=registered,
                             **kwargs):
                    graphs.append(len(gm.graph.nodes))
                    return registered(gm, example_inputs, **kwargs)

                compiled = torch.compile(net, backend=counting, options={"fallback": False})
            with torch.no_grad():
                got = _flat(compiled(*args))      # (Dynamo compiles on the first call)
                entry["compile_s"] = round(time.perf_counter() - start, 2)
                got = _flat(compiled(*inputs))
            if path == "dynamo":
                entry["graphs"] = len(graphs)
            errs = check.errors(got, want)
            entry["rel_error"] = check.relative(errs)
            entry["outcome"] = "ok" if len(got) == len(want) and \
                check.within(errs, "float32") else "wrong"
            if entry["outcome"] == "wrong" and len(got) == len(want):
                _against_float64(entry, net, inputs, got, want)
            runs[path] = lambda compiled=compiled: compiled(*inputs)
        except Exception as error:          # noqa: BLE001  (reported, not raised)
            entry["outcome"] = "error"
            entry["message"] = f"{type(error).__name__}: {_first_line(error)}"
            entry["trace"] = traceback.format_exc()[-3000:]
    if latency and "export" in runs:
        stage("latency")
        with torch.no_grad():
            timed = _latencies(runs)
        result.update(timed)
    result.pop("stage", None)
    tmp = f"{out}.tmp"
    Path(tmp).write_text(json.dumps(result))
    os.replace(tmp, out)


def _against_float64(entry, net, inputs, got, want):
    """For results outside the tolerance: how far they and eager PyTorch's are from eager
    PyTorch in float64; "close" if myelin's are no farther than PyTorch's own float32
    results (float32's rounding in a deep random network, not a fault)."""
    import copy

    import torch

    from zoo import check
    try:
        wide = copy.deepcopy(net).double()
        with torch.no_grad():
            reference = _flat(wide(*(i.double() if i.is_floating_point() else i
                                     for i in inputs)))
    except Exception:               # noqa: BLE001  (a model that will not run in float64)
        return
    mine = check.relative(check.errors(got, reference))
    eager = check.relative(check.errors(want, reference))
    entry.update(rel_error_f64=mine, eager_rel_error_f64=eager)
    if mine <= eager:
        entry["outcome"] = "close"
        entry["message"] = (f"{entry['rel_error']:.1e} from eager float32, but closer to eager "
                            f"float64 ({mine:.1e}) than eager float32 is ({eager:.1e})")


def _latencies(runs, rounds=7, round_seconds=0.3):
    """Median seconds per call of each of ``runs`` (name -> function), in rounds that
    alternate their order (:func:`common.alternating`)."""
    samples = alternating(runs, rounds, round_seconds, pause=0.05)
    return {f"latency_{n}": statistics.median(s) for n, s in samples.items()}


def _first_line(error):
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return (lines[0] if lines else "")[:400]


def check_in_subprocess(name, timeout, latency=True):
    with tempfile.TemporaryDirectory(prefix="myelin-torch-zoo-") as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, __file__, "--one", name, "--out", str(out)] + \
            ([] if latency else ["--no-latency"])
        start = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                  env=dict(os.environ), check=False)
            code, stderr = done.returncode, done.stderr
        except subprocess.TimeoutExpired:
            code, stderr = None, ""
        result = json.loads(out.read_text()) if out.exists() else {"name": name}
    result["seconds"] = round(time.perf_counter() - start, 1)
    if code == 0 and "stage" not in result:
        return result
    stage = result.pop("stage", "start")
    message = f"over {timeout} s in stage {stage}" if code is None else \
        f"exit status {code} in stage {stage}: " + \
        ([line for line in stderr.strip().splitlines() if line.strip()] or [""])[-1][:300]
    for path in PATHS:
        entry = result.setdefault(path, {})
        if "outcome" not in entry:
            entry.update(outcome="timeout" if code is None else "crash", message=message)
    return result


def outcome(result, path):
    return result.get(path, {}).get("outcome", "-")


def row(r):
    def ms(key):
        value = r.get(key)
        return "-" if value is None else f"{value * 1e3:.2f}ms"

    export, dynamo = r.get("export", {}), r.get("dynamo", {})
    errors = [e.get("rel_error") for e in (export, dynamo) if e.get("rel_error") is not None]
    ratio = r["latency_export"] / r["latency_eager"] \
        if r.get("latency_export") and r.get("latency_eager") else None
    note = export.get("message") or dynamo.get("message") or ""
    if export.get("message") and dynamo.get("message") and \
            export["message"] != dynamo["message"]:
        note = f"export: {export['message']}; dynamo: {dynamo['message']}"
    return (f"{r['name']:<30} {r.get('arch', '?')[:28]:<28} {outcome(r, 'export'):<8} "
            f"{outcome(r, 'dynamo'):<8} {dynamo.get('graphs', '-')!s:>6} "
            f"{export.get('compile_s', '-')!s:>9} {dynamo.get('compile_s', '-')!s:>6} "
            f"{(f'{max(errors):.1e}' if errors else '-'):>8} {ms('latency_eager'):>9} "
            f"{ms('latency_export'):>9} {(f'{ratio:.2f}' if ratio else '-'):>5}  {note[:120]}")


def summary(results):
    both = sorted({r["arch"] for r in results if r.get("arch") and
                   outcome(r, "export") == "ok" and outcome(r, "dynamo") == "ok"})
    close = sorted({r["arch"] for r in results if r.get("arch") and r["arch"] not in both and
                    {outcome(r, "export"), outcome(r, "dynamo")} <= {"ok", "close"}})
    archs = {r.get("arch") for r in results}
    lines = [(f"architectures through both paths within 1e-4 of eager PyTorch: {len(both)} of "
              f"{len(archs)}")]
    if close:
        lines.append(f"and through both paths, beyond 1e-4 of eager float32 but closer than it "
                     f"to eager float64: {len(close)} ({', '.join(close)})")
    for path in PATHS:
        counts = collections.Counter(outcome(r, path) for r in results)
        lines.append(f"{path}: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    ratios = sorted((r["latency_export"] / r["latency_eager"], r["name"]) for r in results
                    if r.get("latency_export") and r.get("latency_eager") and
                    outcome(r, "export") == "ok")
    if ratios:
        lines.append(f"latency myelin / eager PyTorch over {len(ratios)} models: median "
                     f"{statistics.median(x for x, _ in ratios):.2f}, best {ratios[0][0]:.2f} "
                     f"({ratios[0][1]}), worst {ratios[-1][0]:.2f} ({ratios[-1][1]})")
    compiles = [r["export"]["compile_s"] for r in results if r.get("export", {}).get("compile_s")]
    if compiles:
        lines.append(f"compile (myelin.torch.compile, export included): median "
                     f"{statistics.median(compiles):.1f} s, max {max(compiles):.1f} s")
    return lines


def details(results):
    lines = []
    for r in results:
        for path in PATHS:
            entry = r.get(path, {})
            if entry.get("outcome") not in ("ok", None):  # ("close" has its message)
                error = f" rel error {entry['rel_error']:.2g}" if "rel_error" in entry else ""
                lines.append(f"{r['name']} ({path}): {entry['outcome']}: "
                             f"{entry.get('message') or ''}{error}")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="models to check (default: one per architecture)")
    parser.add_argument("--all", action="store_true", help="every float32 PyTorch model")
    parser.add_argument("--match", help="only models whose name matches this regex")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model")
    parser.add_argument("--no-latency", action="store_true", help="check outputs only")
    parser.add_argument("--json", type=Path, default=None, help="where results are kept")
    parser.add_argument("--report", action="store_true", help="print the kept results")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        check_here(args.one, args.out, latency=not args.no_latency)
        return 0
    models = torch_models(every=args.all or bool(args.names))
    if args.names:
        unknown = [n for n in args.names if n not in models]
        if unknown:
            raise SystemExit(f"not PyTorch zoo models: {', '.join(unknown)}")
        models = {n: models[n] for n in args.names}
    if args.match:
        import re
        models = {n: m for n, m in models.items() if re.search(args.match, n)}
    path = args.json or catalog.zoo_dir() / "torch_results.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    if args.report:
        results = [kept[n] for n in models if n in kept]
    else:
        print(HEADER, flush=True)
        results = []
        for name in models:
            result = check_in_subprocess(name, args.timeout, latency=not args.no_latency)
            results.append(result)
            print(row(result), flush=True)
            kept = json.loads(path.read_text()) if path.exists() else {}
            kept[name] = result
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(kept, indent=1))
            os.replace(tmp, path)
    order = {"ok": 0, "close": 1, "wrong": 2, "error": 3, "timeout": 4, "crash": 5, "-": 6}
    results.sort(key=lambda r: (order.get(outcome(r, "export"), 5) +
                                order.get(outcome(r, "dynamo"), 5), r["name"]))
    print("\n" + HEADER)
    print("\n".join(row(r) for r in results))
    print()
    print("\n".join(summary(results) + [""] + details(results)))
    if not args.report:
        print(f"\nresults kept in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
