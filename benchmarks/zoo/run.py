"""Check the zoo's built models against ONNX Runtime (``make zoo`` runs build.py, then this).

    python benchmarks/zoo/run.py                    # every built model
    python benchmarks/zoo/run.py resnet18 bert_tiny # these
    python benchmarks/zoo/run.py --match 'int8|fp16' --json out.json
    python benchmarks/zoo/run.py --fast             # the quick subset
    python benchmarks/zoo/run.py --cnn              # the CNNs, and their speed goals
    python benchmarks/zoo/run.py --transformers     # the transformers, their goals and profiles
    python benchmarks/zoo/run.py --report           # the table of the results kept so far
    python benchmarks/zoo/run.py --compile-time     # benchmarks/compile_time.py over the zoo

Each model is checked in a subprocess of its own with a time limit (zoo.check.check_model:
import, compile, error per output, 50 repeated runs, latency), with the compile cache off so
that compile times are cold ones. Prints one table row per model as it goes, then the table
again sorted, a summary (counts by outcome, median and worst latency ratios) and the details
of every model that is not ok. Results are kept as JSON (default: results.json in the zoo
folder), each model's latest result replacing its earlier one, so the zoo can be checked in
chunks and reported whole with --report.
"""

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import catalog  # noqa: E402
from zoo.build import select  # noqa: E402

HEADER = (f"{'model':<34} {'outcome':<16} {'compile s':>9} {'max rel err':>11} "
          f"{'myelin':>10} {'ORT':>10} {'ratio':>6}  note")


def check_in_subprocess(name, folder, timeout, env=None, profile=False):
    """Check model ``name`` in a subprocess (``profile``: with its top kernels); returns its
    result dict, with ``timeout`` or ``crash`` (and the stage it reached) when the subprocess
    does not finish."""
    onnx_path, json_path = catalog.paths(name, folder)
    if not json_path.exists():
        return {"name": name, "outcome": "not built"}
    with tempfile.TemporaryDirectory(prefix="myelin-zoo-") as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, __file__, "--one", name, "--dir", str(folder),
                   "--out", str(out)] + (["--profile"] if profile else [])
        env = dict(os.environ, **(env or {}))
        env.setdefault("MYELIN_CACHE", "off")
        env.pop("PYTHONDONTWRITEBYTECODE", None)    # (bytecode as installed: compile_time.py)
        start = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                  env=env)
            code, stderr = done.returncode, done.stderr
        except subprocess.TimeoutExpired:
            code, stderr = None, ""
        seconds = time.perf_counter() - start
        result = json.loads(out.read_text()) if out.exists() else {"name": name}
    result["seconds"] = round(seconds, 1)
    if code == 0 and result.get("outcome"):
        return result
    stage = result.pop("stage", "start")
    if code is None:
        result.update(outcome="timeout", message=f"over {timeout} s, in stage {stage}")
    elif code < 0:
        result.update(outcome="crash",
                      message=f"killed by {signal.Signals(-code).name} in stage {stage}")
    else:
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        result.update(outcome="crash", message=f"exit status {code} in stage {stage}: "
                                               f"{lines[-1] if lines else ''}"[:400])
    return result


def check_here(name, folder, out, profile=False):
    """The subprocess's work: check one model, writing the result to ``out``."""
    from zoo import check

    onnx_path, json_path = catalog.paths(name, folder)
    meta = catalog.read_meta(json_path)
    if meta.get("base"):
        meta["base_path"] = str(catalog.paths(meta["base"], folder)[0])
    result = check.check_model(onnx_path, meta, progress_path=out, profile=profile)
    result["source"] = meta.get("source")
    import myelin
    result["myelin"] = str(Path(myelin.__file__).parent)    # which copy of myelin was checked
    result["date"] = time.strftime("%Y-%m-%d %H:%M")
    tmp = f"{out}.tmp"
    Path(tmp).write_text(json.dumps(result))
    os.replace(tmp, out)


def row(r):
    def seconds(key):
        value = r.get(key)
        if value is None:
            return "-"
        return f"{value * 1e3:.2f}ms" if value < 1 else f"{value:.2f}s"

    def number(key, form):
        value = r.get(key)
        return "-" if value is None else format(value, form)

    outcome = r["outcome"] + (f" ({r['kind']})" if r.get("kind") else "")
    note = r.get("message") or r.get("note") or ""
    return (f"{r['name']:<34} {outcome[:16]:<16} {number('compile_s', '.1f'):>9} "
            f"{number('rel_error', '.1e'):>11} {seconds('latency_myelin'):>10} "
            f"{seconds('latency_ort'):>10} {number('ratio', '.2f'):>6}  {note[:90]}")


def markdown_row(r):
    """A row of the README's table."""
    def latency(key):
        value = r.get(key)
        return "–" if value is None else (f"{value * 1e3:.2f} ms" if value < 1 else
                                          f"{value:.2f} s")

    outcome = r["outcome"] + (f" ({r['kind']})" if r.get("kind") else "")
    note = (r.get("message") or r.get("note") or "").replace("|", "/")
    cells = [r["name"], outcome,
             f"{r['compile_s']:.1f}" if r.get("compile_s") else "–",
             f"{r['rel_error']:.1e}" if r.get("rel_error") is not None else "–",
             latency("latency_myelin"), latency("latency_ort"),
             f"{r['ratio']:.2f}" if r.get("ratio") else "–", note[:160]]
    return "| " + " | ".join(cells) + " |"


def summary(results):
    lines = []
    counts = collections.Counter(r["outcome"] for r in results)
    lines.append("outcomes: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    kinds = collections.Counter(r["kind"] for r in results if r["outcome"] == "wrong")
    if kinds:
        lines.append("wrong by kind: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))
    ratios = sorted((r["ratio"], r["name"]) for r in results if r.get("ratio"))
    if ratios:
        lines.append(f"latency ratio myelin/ORT over {len(ratios)} models: median "
                     f"{statistics.median(x for x, _ in ratios):.2f}, best {ratios[0][0]:.2f} "
                     f"({ratios[0][1]}), worst {ratios[-1][0]:.2f} ({ratios[-1][1]})")
        lines.append("worst ratios: " + ", ".join(f"{n} {x:.2f}" for x, n in ratios[::-1][:10]))
    compiles = [r["compile_s"] for r in results if r.get("compile_s")]
    if compiles:
        lines.append(f"compile (import + first run, cold): median "
                     f"{statistics.median(compiles):.1f} s, max {max(compiles):.1f} s")
    phased = [r["phases"] for r in results if r.get("phases")]
    if phased:
        names = list(dict.fromkeys(name for phases in phased for name in phases))
        lines.append("compile phases, median s: " + ", ".join(
            f"{name} {statistics.median(p.get(name, 0.0) for p in phased):.3f}"
            for name in names))
    return lines


# Speed goals: (what, models (None: all), statistic, goal) of myelin's latency / ORT's.
CNN_GOALS = [  # issue 24
    ("median over the zoo's CNNs", None, statistics.median, 0.9),
    ("worst zoo CNN", None, max, 1.3),
    ("ResNet-18 and ResNet-50, batch 1", ("resnet18", "resnet50"), max, 0.9),
    ("MobileNetV2, MobileNetV3-Small, EfficientNet-B0, batch 1",
     ("mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0"), max, 1.0),
    ("ResNet-50, batch 8", ("resnet50_batch8",), max, 0.9),
]
TRANSFORMER_GOALS = [  # issue 25
    ("median over the zoo's transformers", None, statistics.median, 0.8),
    ("worst zoo transformer", None, max, 1.2),
]


def goals_table(results, goals):
    """Speed ``goals`` (:data:`CNN_GOALS`, :data:`TRANSFORMER_GOALS`) as a Markdown table:
    each statistic of the latency ratios, its goal and whether it is met."""
    ratios = {r["name"]: r["ratio"] for r in results if r.get("ratio")}
    lines = ["| workload | myelin / ONNX Runtime | goal | met |", "|---|---|---|---|"]
    for what, names, statistic, goal in goals:
        values = [ratios[n] for n in names if n in ratios] if names else list(ratios.values())
        if not values or (names and len(values) < len(names)):
            lines.append(f"| {what} | not measured | <= {goal} | |")
            continue
        value = statistic(values)
        lines.append(f"| {what} | {value:.2f} | <= {goal} | {'yes' if value <= goal else 'no'} |")
    wrong = [r["name"] for r in results if r["outcome"] != "ok"]
    lines.append(f"\nall {len(results)} match ONNX Runtime" if not wrong
                 else f"\nnot ok: {', '.join(wrong)}")
    return lines


def top_kernels_lines(results):
    """Each profiled model's largest kinds of step: kernel, share of the time, GFLOP/s."""
    lines = []
    for r in results:
        if r.get("top_kernels"):
            lines.append(f"{r['name']}: " + ", ".join(
                f"{k['kernel']} x{k['steps']} {k['percent']:.0f}%"
                + (f" ({k['gflops']:.0f} GFLOP/s)" if k["gflops"] else "")
                for k in r["top_kernels"]))
    return lines


def details(results):
    lines = []
    for r in results:
        if r["outcome"] == "ok":
            continue
        text = r.get("message") or r.get("note") or ""
        extra = ""
        if "one_thread" in r:
            one = r["one_thread"]
            extra = (f"; with threads=1: {one['error']}" if "error" in one else
                     f"; with threads=1: rel error {one['rel_error']:.2g}, "
                     f"{one['repeat_differs']}/50 differ")
        if r["outcome"] == "nondeterministic":
            extra += f"; rel error of the first run {r.get('rel_error', 0):.2g}"
        lines.append(f"{r['name']}: {r['outcome']}"
                     f"{' (' + r['kind'] + ')' if r.get('kind') else ''}: {text}{extra}")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="models to check (default: all built)")
    parser.add_argument("--match", help="only models whose name matches this regex")
    parser.add_argument("--fast", action="store_true", help="only the quick subset")
    parser.add_argument("--cnn", action="store_true",
                        help="only the convolutional networks, with the speed goals they meet")
    parser.add_argument("--transformers", action="store_true",
                        help="only the transformers, with the speed goals they meet and each "
                             "one's top three kernels from a profiled run")
    parser.add_argument("--dir", type=Path, default=None, help="the zoo folder")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per model")
    parser.add_argument("--json", type=Path, default=None, help="where results are kept")
    parser.add_argument("--report", action="store_true",
                        help="print the kept results of the selected models; check nothing")
    parser.add_argument("--markdown", action="store_true", help="the table in Markdown")
    parser.add_argument("--compile-time", action="store_true",
                        help="run benchmarks/compile_time.py (its default models and the "
                             "median over every built model) instead of the checks")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    folder = args.dir or catalog.zoo_dir()
    if args.compile_time:
        import compile_time
        return compile_time.main(["--zoo", "--dir", str(folder)]
                                 + (["--models", ",".join(args.names)] if args.names else []))
    if args.one:
        check_here(args.one, folder, args.out, args.profile)
        return 0
    models = select(catalog.load_all(), args.names, args.match, args.fast, args.cnn,
                    args.transformers)
    path = args.json or folder / "results.json"
    if args.report:
        kept = _kept(path)
        results = [kept[m.name] for m in models if m.name in kept]
    else:
        print(HEADER, flush=True)
        results = []
        for model in models:
            result = check_in_subprocess(model.name, folder, args.timeout,
                                         profile=args.transformers)
            results.append(result)
            print(row(result), flush=True)
            kept = _kept(path)               # read again: another run may have added some
            kept[model.name] = result
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(list(kept.values()), indent=1))
            os.replace(tmp, path)
    report(results, args.markdown)
    if args.cnn:
        print("\n".join([""] + goals_table(results, CNN_GOALS)))
    if args.transformers:
        print("\n".join([""] + goals_table(results, TRANSFORMER_GOALS) + [""]
                         + top_kernels_lines(results)))
    if not args.report:
        print(f"\nresults kept in {path}")
    return 0


def _kept(path):
    """The results kept in ``path`` by model name."""
    return {r["name"]: r for r in json.loads(path.read_text())} if path.exists() else {}


def report(results, markdown=False):
    """The table sorted by outcome (as text or Markdown), the summary and the details of what
    is not ok."""
    order = ["ok", "wrong", "nondeterministic", "unsupported", "error", "timeout", "crash",
             "not built"]
    results = sorted(results, key=lambda r: (order.index(r["outcome"]), r["name"]))
    if markdown:
        print("| model | outcome | compile s | max rel err | myelin | ORT | ratio | note |")
        print("|---|---|---|---|---|---|---|---|")
        print("\n".join(markdown_row(r) for r in results))
    else:
        print("\n" + HEADER)
        print("\n".join(row(r) for r in results))
    print()
    for line in summary(results) + [""] + details(results):
        print(line)


if __name__ == "__main__":
    sys.exit(main())
