"""Build the zoo's models as ONNX files (``make zoo`` runs this, then run.py).

    python benchmarks/zoo/build.py                 # every model not built yet
    python benchmarks/zoo/build.py resnet18 bert   # these (names or --match a pattern)
    python benchmarks/zoo/build.py --fast --force  # the quick subset, rebuilt

Each model is built in a subprocess of its own (one failing exporter stops nothing else) and
written to the zoo folder ($MYELIN_ZOO_DIR, else benchmarks/zoo/models) as NAME.onnx with its
description NAME.json; models already there are skipped unless --force. No model hub is
asked for anything: weights are random (seeded), and shipped models come from PyPI wheels.
"""

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import catalog  # noqa: E402


def select(models, names=(), match=None, fast=False, cnn=False, transformers=False):
    """The catalog's models named in ``names`` (in that order; all if none), matching
    ``match``, in the quick subset (``fast``), the convolutional networks (``cnn``) or the
    transformers (``transformers``); unknown names raise SystemExit."""
    unknown = [name for name in names if name not in models]
    if unknown:
        raise SystemExit(f"unknown zoo models: {', '.join(unknown)}")
    chosen = [models[name] for name in names] if names else list(models.values())
    if match:
        chosen = [m for m in chosen if re.search(match, m.name)]
    if fast:
        chosen = [m for m in chosen if m.fast]
    if cnn:
        chosen = [m for m in chosen if m.cnn]
    if transformers:
        chosen = [m for m in chosen if m.transformer]
    return chosen


def build_one(name, folder):
    """Build one model here (the subprocess's work): the file, then its description."""
    model = catalog.load_all()[name]
    onnx_path, json_path = catalog.paths(name, folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = onnx_path.with_suffix(".onnx.tmp")
    start = time.perf_counter()
    source = model.build(model, tmp)
    import onnx
    proto = onnx.load(str(tmp), load_external_data=False)
    initializers = {t.name for t in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in initializers]
    if len(names) != len(model.inputs):
        raise RuntimeError(f"the file has inputs {names}, the catalog describes "
                           f"{len(model.inputs)}")
    os.replace(tmp, onnx_path)
    catalog.write_meta(json_path, dict(
        name=name, family=model.family, precision=model.precision, base=model.base,
        source=source, inputs=[spec.describe(n) for n, spec in zip(names, model.inputs)],
        build_seconds=round(time.perf_counter() - start, 2)))


def build(models, folder, force=False, timeout=1800):
    """Build ``models`` (in catalog order), each in a subprocess; one line per model.
    Returns the names that failed."""
    failed = []
    for model in models:
        onnx_path, json_path = catalog.paths(model.name, folder)
        if not force and onnx_path.exists() and json_path.exists():
            print(f"{model.name:<40} present", flush=True)
            continue
        if model.base and not catalog.paths(model.base, folder)[1].exists():
            print(f"{model.name:<40} FAILED: its base model {model.base} is not built",
                  flush=True)
            failed.append(model.name)
            continue
        start = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, __file__, "--one", model.name,
                                   "--dir", str(folder)], capture_output=True, text=True,
                                  timeout=timeout)
            error = None if done.returncode == 0 else _last_error(done.stderr, done.returncode)
        except subprocess.TimeoutExpired:
            error = f"timed out after {timeout} s"
        seconds = time.perf_counter() - start
        if error is None:
            size = onnx_path.stat().st_size / 2**20
            print(f"{model.name:<40} built in {seconds:6.1f} s  {size:7.1f} MiB", flush=True)
        else:
            failed.append(model.name)
            print(f"{model.name:<40} FAILED after {seconds:.1f} s: {error}", flush=True)
    return failed


def _last_error(stderr, code):
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[\w.]+(Error|Exception|Exit)\b", line):
            return line[:300]
    return (lines[-1][:300] if lines else "") + f" (exit status {code})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="models to build (default: all)")
    parser.add_argument("--match", help="only models whose name matches this regex")
    parser.add_argument("--fast", action="store_true", help="only the quick subset")
    parser.add_argument("--force", action="store_true", help="rebuild models already built")
    parser.add_argument("--dir", type=Path, default=None, help="the zoo folder")
    parser.add_argument("--list", action="store_true", help="list the catalog and stop")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    folder = args.dir or catalog.zoo_dir()
    if args.one:
        build_one(args.one, folder)
        return 0
    models = select(catalog.load_all(), args.names, args.match, args.fast)
    if args.list:
        for m in models:
            print(f"{m.name:<40} {m.family:<13} {m.precision:<8} "
                  f"{' '.join('x'.join(map(str, i.shape)) for i in m.inputs)}")
        return 0
    failed = build(models, folder, args.force)
    print(f"{len(models) - len(failed)} of {len(models)} models built in {folder}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
