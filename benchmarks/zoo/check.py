"""Checking one ONNX model against ONNX Runtime: the runner's and the test suite's functions.

:func:`check_model` imports and compiles a model with myelin, compares every output with ONNX
Runtime's on fresh random inputs of the right kinds, computes it 50 times to check that every
result is bit-identical to the first, and times both systems in paired, interleaved rounds.
It returns a dict whose ``outcome`` is one of:

- ``ok``: every output within the model's tolerance of ONNX Runtime's (:data:`TOLERANCE`), or,
  for float16 and int8 models, no farther from a higher-precision reference than twice ONNX
  Runtime's own distance from it;
- ``wrong``: outside it; ``kind`` tells ``mismatch`` (myelin is farther from the reference
  than ONNX Runtime), ``ORT off`` (myelin is closer to the reference: the difference is ONNX
  Runtime's, e.g. float32 Sigmoid tails in all-near-zero outputs) and ``float16 underflow``
  (a float16 model whose values are too small for float16; ONNX Runtime computes float16 ops
  in float32 behind casts). The reference is the float32 original run by ONNX Runtime for a
  float16 variant, else a float64 evaluation (myelin's reference interpreter on the imported
  graph);
- ``nondeterministic``: some of the 50 results differ from the first;
- ``unsupported``: myelin raised UnsupportedOpError or UnsupportedTypeError (its message);
- ``error``: any other exception (type and first line).

The runner adds ``timeout`` and ``crash`` for a check whose subprocess ran too long or died.
"""

import json
import os
import statistics
import time
import zlib

import numpy as np
from common import alternating

from zoo.phases import PhaseTimer

#: Per precision: relative tolerance (of the output's largest magnitude) and absolute floor.
#: float32: 1e-4 relative, and 1e-6 absolute for outputs that are all near zero (ONNX Runtime's
#: float32 Sigmoid is ~1e-7 off in its tail). float16: 1e-2, about 20 units of float16's last
#: place (2^-11): the two systems round intermediates to float16 at different points. int8: 1e-2,
#: a step of the quantization grid in some elements (the grid of a typical output is 1/100
#: of its range).
TOLERANCE = {"float32": (1e-4, 1e-6), "float16": (1e-2, 1e-4), "int8": (1e-2, 1e-4)}
#: How much farther from the reference than ONNX Runtime a float16 or int8 model may be.
REFERENCE_FACTOR = 2.0
REPEATS = 50


def make_inputs(specs, rng):
    """Random inputs by name for ``specs`` (name -> Input or its dict form)."""
    return {name: _make(_as_dict(spec), rng) for name, spec in specs.items()}


def _as_dict(spec):
    return spec if isinstance(spec, dict) else {**spec.__dict__, "shape": list(spec.shape)}


def _make(spec, rng):
    shape, dtype, kind = tuple(spec["shape"]), np.dtype(spec["dtype"]), spec["kind"]
    if kind in ("image", "float"):
        value = rng.standard_normal(shape)
    elif kind == "audio":
        value = rng.uniform(-0.5, 0.5, shape)
    elif kind == "tokens":
        value = rng.integers(0, spec["high"], shape)
    elif kind == "mask":
        value = np.ones(shape)
        if shape and shape[-1] >= 4:
            value[..., shape[-1] - shape[-1] // 4:] = 0          # a padded tail
    elif kind == "positions":
        value = np.broadcast_to(np.arange(shape[-1]), shape)
    elif kind == "value":
        value = np.full(shape, spec["value"])
    else:
        raise ValueError(f"unknown input kind {kind}")
    return np.array(value, dtype=dtype, order="C")      # 0-d stays 0-d


def ort_session(model):
    """An ONNX Runtime CPU session with its default options (threads, optimizations)."""
    import onnxruntime
    source = model if isinstance(model, (str, bytes)) else str(model)
    return onnxruntime.InferenceSession(source, providers=["CPUExecutionProvider"])


def errors(got, want):
    """Per output: (largest absolute difference, largest magnitude of ``want``); inf where
    shapes differ or NaNs are in different places."""
    result = []
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            result.append((float("inf"), 0.0))
            continue
        if g.size == 0:
            result.append((0.0, 0.0))
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        nan_g, nan_w = np.isnan(g64), np.isnan(w64)
        if (nan_g != nan_w).any():
            result.append((float("inf"), 0.0))
            continue
        same = g64 == w64                                    # equal infinities included
        diff = np.where(same | nan_g, 0.0, np.abs(g64 - w64))
        finite = np.abs(w64[np.isfinite(w64)])
        result.append((float(diff.max()), float(finite.max()) if finite.size else 0.0))
    return result


def relative(errs):
    """The largest difference over the largest magnitude, over all outputs."""
    return max((d / s if s else (0.0 if d == 0 else float("inf"))) for d, s in errs) \
        if errs else 0.0


def within(errs, precision):
    rtol, atol = TOLERANCE[precision]
    return all(d <= rtol * s + atol for d, s in errs)


def _first_line(error):
    text = str(error).strip().splitlines()
    return text[0] if text else ""


class _Progress:
    """The result so far, written to a JSON file after each stage, so that a subprocess that
    dies or runs out of time still tells the runner how far it got."""

    def __init__(self, path, result):
        self.path, self.result = path, result

    def stage(self, name, **fields):
        self.result.update(fields, stage=name)
        if self.path:
            tmp = f"{self.path}.tmp"
            with open(tmp, "w") as f:
                json.dump(self.result, f)
            os.replace(tmp, self.path)


def check_model(onnx_path, meta, progress_path=None, repeats=REPEATS, timing=True,
                rounds=10, round_seconds=0.05, compiler_options=None, profile=False):
    """Check one model (see the module docstring); ``meta`` is its description (inputs by
    kind, precision, base model file). Returns the result dict; with ``profile``, it has the
    model's :func:`top_kernels` too."""
    import myelin.onnx
    from myelin.errors import UnsupportedOpError, UnsupportedTypeError

    name = meta["name"]
    precision = meta.get("precision", "float32")
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    specs = {spec["name"]: spec for spec in meta["inputs"]}
    feeds = make_inputs(specs, rng)
    result = {"name": name, "precision": precision, "outcome": None}
    progress = _Progress(progress_path, result)

    progress.stage("onnxruntime")
    start = time.perf_counter()
    try:
        session = ort_session(onnx_path)
        want = session.run(None, feeds)
    except Exception as error:                              # noqa: BLE001 - reported
        session, want = None, None
        result["ort_error"] = f"{type(error).__name__}: {_first_line(error)}"[:300]
    result["ort_session_s"] = time.perf_counter() - start

    progress.stage("import")
    phases = PhaseTimer()
    options = {"progress": phases, **(compiler_options or {})}
    start = time.perf_counter()
    try:
        model = myelin.onnx.load(str(onnx_path), **options)
        progress.stage("compile")
        got = model.run(feeds)
    except (UnsupportedOpError, UnsupportedTypeError) as error:
        result.update(outcome="unsupported", message=_first_line(error)[:400])
        return result
    except Exception as error:                              # noqa: BLE001 - reported
        also = " (ONNX Runtime cannot run it either)" if want is None else ""
        result.update(outcome="error", message=f"{type(error).__name__}: "
                                               f"{_first_line(error)}"[:400] + also)
        return result
    result["compile_s"] = time.perf_counter() - start
    result["phases"] = phases.rounded()
    if want is None:
        result.update(outcome="error", message=f"ONNX Runtime failed: {result['ort_error']}")
        return result

    progress.stage("compare")
    errs = errors(got, want)
    result["rel_error"] = relative(errs)
    result["outputs"] = [{"max_abs_diff": d, "max_abs": s} for d, s in errs]
    ok = within(errs, precision)
    if ok and any(d > TOLERANCE[precision][0] * s for d, s in errs):
        result["note"] = "near zero: within the absolute floor"

    progress.stage("repeat")
    differing = repeat(model, feeds, got, repeats)
    result["repeat_differs"] = differing

    if not ok:
        result.update(outcome="wrong", kind="mismatch", note="no reference yet")
        progress.stage("reference")
        _classify(result, onnx_path, meta, feeds, got, want, errs, precision)
        if result["outcome"] == "ok":
            ok = True
    if differing:
        result["outcome"] = "nondeterministic"
        result["note"] = f"{differing} of {repeats} results differ from the first"
    elif ok:
        result["outcome"] = "ok"
    if result["outcome"] in ("wrong", "nondeterministic"):
        progress.stage("one thread")
        _one_thread_clue(result, onnx_path, feeds, want, repeats, options)

    if timing and session is not None:
        progress.stage("latency")
        result.update(latency(lambda: model.run(feeds), lambda: session.run(None, feeds),
                              rounds, round_seconds))
    if profile:
        progress.stage("profile")
        result["top_kernels"] = top_kernels(onnx_path, feeds, compiler_options)
    result.pop("stage", None)
    return result


def top_kernels(onnx_path, feeds, compiler_options=None, count=3, seconds=1.0):
    """Where a model's time goes: its steps grouped by kernel (the name without the variant),
    the ``count`` largest as dicts of ``kernel``, ``steps``, ``percent`` of the time and
    ``gflops`` (0 for kernels that do not count their operations), from a profiled compile
    computing ``feeds`` for about ``seconds``."""
    import myelin.onnx

    model = myelin.onnx.load(str(onnx_path), **{**(compiler_options or {}), "profile": True})
    model.run(feeds)
    cells = model.network().cells
    for cell in cells:
        cell.reset_profile()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        model.run(feeds)
    groups, total = {}, 0.0
    for cell in cells:
        for row in cell.profile().rows():
            if row.kind == "total":
                total += row.seconds
            elif row.kind == "step":
                group = groups.setdefault(row.kernel.split("[")[0], [0, 0.0, 0.0])
                group[0] += 1
                group[1] += row.seconds
                group[2] += row.flops * row.calls
    ranked = sorted(groups.items(), key=lambda item: -item[1][1])[:count]
    return [{"kernel": kernel, "steps": steps, "percent": 100.0 * spent / total if total else 0.0,
             "gflops": flops / spent / 1e9 if spent else 0.0}
            for kernel, (steps, spent, flops) in ranked]


def repeat(model, feeds, first, repeats=REPEATS):
    """How many of ``repeats`` runs give a result that is not bit-identical to ``first``."""
    first = [np.asarray(a).tobytes() for a in first]
    differing = 0
    for _ in range(repeats):
        if [np.asarray(a).tobytes() for a in model.run(feeds)] != first:
            differing += 1
    return differing


def _classify(result, onnx_path, meta, feeds, got, want, errs, precision):
    """Tell a disagreement's kind from a higher-precision reference (and accept a float16 or
    int8 model that is about as close to it as ONNX Runtime)."""
    try:
        reference, label = higher_precision(onnx_path, meta, feeds)
    except Exception as error:                              # noqa: BLE001 - reported
        result["note"] = (f"no reference ({type(error).__name__}: "
                          f"{_first_line(error)[:120]})")
        return
    ours, theirs = errors(got, reference), errors(want, reference)
    mine, ort = relative(ours), relative(theirs)
    result.update(reference=label, rel_error_ref=mine, ort_rel_error_ref=ort)
    scale = max((s for _, s in theirs), default=0.0)
    rtol, atol = TOLERANCE[precision]
    if precision != "float32" and all(
            d <= REFERENCE_FACTOR * dt + rtol * s + atol for (d, s), (dt, _) in zip(ours, theirs)):
        result.update(outcome="ok", kind=None,
                      note=f"as close to the {label} as ONNX Runtime "
                           f"(myelin {mine:.2g}, ONNX Runtime {ort:.2g})")
        return
    if precision == "float16" and (_more_zeros(got, want) or scale < 6.2e-5):
        kind = "float16 underflow"
    elif all(d <= dt for (d, _), (dt, _) in zip(ours, theirs)):
        kind = "ORT off"
    else:
        kind = "mismatch"
    near = ", outputs near zero" if scale < 1e-3 else ""
    result.update(kind=kind, note=f"against the {label}: myelin {mine:.2g}, "
                                  f"ONNX Runtime {ort:.2g}{near}")


def _more_zeros(got, want):
    return sum(int((np.asarray(g) == 0).sum()) for g in got) > \
        sum(int((np.asarray(w) == 0).sum()) for w in want)


def higher_precision(onnx_path, meta, feeds):
    """A higher-precision result and its label: the float32 original (``meta["base_path"]``)
    in ONNX Runtime for a float16 variant, else the imported graph evaluated in float64 by
    myelin's reference interpreter."""
    base = meta.get("base_path")
    if base and meta.get("precision") == "float16":
        session = ort_session(base)
        cast = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in feeds.items()}
        return session.run(None, cast), "float32 original (ONNX Runtime)"
    import myelin.reference
    from myelin.importers.onnx import import_model
    imported = import_model(str(onnx_path), values=feeds)
    values = myelin.reference.run(imported.flow, imported.func,
                                  {s.var: feeds[s.name] for s in imported.inputs})
    return [np.zeros(s.shape) if s.var is None else values[s.var] for s in imported.outputs], \
        "float64 evaluation"


def _one_thread_clue(result, onnx_path, feeds, want, repeats, options):
    """Compile again with one thread: does the result change, does it repeat?"""
    import myelin.onnx
    try:
        model = myelin.onnx.load(str(onnx_path), **dict(options, threads=1))
        got = model.run(feeds)
        result["one_thread"] = {"rel_error": relative(errors(got, want)),
                                "repeat_differs": repeat(model, feeds, got, repeats)}
    except Exception as error:                              # noqa: BLE001 - reported
        result["one_thread"] = {"error": f"{type(error).__name__}: {_first_line(error)}"}


def latency(run_myelin, run_ort, rounds=10, round_seconds=0.05, pause=0.1):
    """Median latencies and the median of per-round ratios, myelin over ONNX Runtime, from
    ``rounds`` paired rounds (:func:`common.alternating`)."""
    samples = alternating({"myelin": run_myelin, "ort": run_ort}, rounds, round_seconds, pause)
    ratios = [m / o for m, o in zip(samples["myelin"], samples["ort"])]
    return {"latency_myelin": statistics.median(samples["myelin"]),
            "latency_ort": statistics.median(samples["ort"]), "ratio": statistics.median(ratios)}
