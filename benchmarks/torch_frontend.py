"""The PyTorch front end against PyTorch itself (issue 28): latency and compile time of eager
PyTorch, ``torch.compile`` with its default backend (Inductor) and ``torch.compile(backend=
"myelin")``, with ``myelin.torch.compile`` beside them, on ResNet-50, MobileNetV3-Large, a
BERT-base-sized encoder and a GPT-2-small-sized decoder (random weights, batch 1, default
threads, inference under ``torch.no_grad()``).

    python benchmarks/torch_frontend.py                 # all four
    python benchmarks/torch_frontend.py resnet50 bert   # these

Each model runs in a fresh process (so every compile is cold: the compile caches of both
compilers point to empty temporary folders, and each backend first compiles a tiny module, so
that the time to import its machinery is not counted). Compile time is the first call's time
less an eager call's. Latencies are medians of rounds that alternate the systems' order.
The goals: myelin's latency at most 0.7 of eager PyTorch's and at most Inductor's, and
myelin compiling faster than Inductor.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import alternating

MODELS = ("resnet50", "mobilenet_v3_large", "bert_base", "gpt2_small")
SYSTEMS = ("eager", "inductor", "myelin", "myelin_export")
LABELS = {"eager": "eager PyTorch", "inductor": "torch.compile (Inductor)",
          "myelin": "torch.compile(backend=\"myelin\")",
          "myelin_export": "myelin.torch.compile"}


def make(name):
    """(module in eval mode, example arguments, description) of a benchmark model."""
    import torch
    from zoo import exporting
    torchvision = exporting.import_torchvision()   # (PyPI's wheel beside CPU torch; and
    torch.manual_seed(0)                           # transformers imports it)
    if name in ("resnet50", "mobilenet_v3_large"):
        module = getattr(torchvision.models, name)(weights=None).eval()
        return module, (torch.randn(1, 3, 224, 224),), f"torchvision {name}, 1x3x224x224"
    import transformers
    if name == "bert_base":
        config = transformers.BertConfig(hidden_size=768, num_hidden_layers=12,
                                         num_attention_heads=12, intermediate_size=3072)
        model = transformers.BertModel(config)
        description = "BertModel 12 x 768 (BERT-base), sequence 128"
    else:
        config = transformers.GPT2Config(n_embd=768, n_layer=12, n_head=12, n_positions=1024,
                                         use_cache=False)
        model = transformers.GPT2LMHeadModel(config)
        description = "GPT2LMHeadModel 12 x 768, 50257 tokens (GPT-2 small), sequence 128"
    model.eval()

    class Tokens(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids):
            out = self.model(input_ids=ids)
            return out.logits if hasattr(out, "logits") else out.last_hidden_state

    return Tokens(model).eval(), (torch.randint(0, config.vocab_size, (1, 128)),), description


def run_one(name, out):
    """The subprocess's work: time every system on model ``name``, write JSON to ``out``."""
    import torch

    import myelin.torch
    tiny = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    with torch.no_grad():                    # import each compiler's machinery first
        torch.compile(tiny)(torch.randn(2, 4))
        torch._dynamo.reset()
        torch.compile(tiny, backend="myelin")(torch.randn(2, 4))
        torch._dynamo.reset()
        myelin.torch.compile(tiny, (torch.randn(2, 4),))
    module, args, description = make(name)
    result = {"name": name, "description": description, "threads": torch.get_num_threads(),
              "compile_s": {}, "latency_s": {}, "load_before": os.getloadavg()[0]}
    with torch.no_grad():
        want = module(*args)
        start = time.perf_counter()
        module(*args)
        eager_call = time.perf_counter() - start
        runs = {"eager": lambda: module(*args)}
        for system in SYSTEMS[1:]:
            torch._dynamo.reset()
            start = time.perf_counter()
            if system == "inductor":
                compiled = torch.compile(module)
            elif system == "myelin":
                compiled = torch.compile(module, backend="myelin",
                                         options={"fallback": False})
            else:            # (cold: not from the kernels the backend's compile cached)
                compiled = myelin.torch.compile(module, args, cache=False)
            got = compiled(*args)
            result["compile_s"][system] = time.perf_counter() - start - eager_call
            error = ((got - want).abs().max() / want.abs().max()).item()
            result.setdefault("rel_error", {})[system] = error
            runs[system] = lambda compiled=compiled: compiled(*args)
        result["latency_s"] = latencies(runs)
    result["load_after"] = os.getloadavg()[0]
    with open(out, "w") as f:
        json.dump(result, f)


def latencies(runs, rounds=7, round_seconds=1.0):
    """Median seconds per call of each of ``runs``, over rounds of about ``round_seconds``
    per system whose order alternates (:func:`common.alternating`)."""
    samples = alternating(runs, rounds, round_seconds)
    return {n: statistics.median(s) for n, s in samples.items()}


def table(results):
    lines = [("| model | eager PyTorch | Inductor | myelin backend | myelin / eager | "
              "myelin / Inductor | compile: Inductor | compile: myelin backend | "
              "myelin.torch.compile (latency, compile) |"),
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lat, comp = r["latency_s"], r["compile_s"]
        lines.append(
            f"| {r['name']} | {lat['eager'] * 1e3:.1f} ms | {lat['inductor'] * 1e3:.1f} ms | "
            f"{lat['myelin'] * 1e3:.1f} ms | **{lat['myelin'] / lat['eager']:.2f}** | "
            f"**{lat['myelin'] / lat['inductor']:.2f}** | {comp['inductor']:.1f} s | "
            f"{comp['myelin']:.1f} s | {lat['myelin_export'] * 1e3:.1f} ms, "
            f"{comp['myelin_export']:.1f} s |")
    lines.append("")
    for r in results:
        lat, comp = r["latency_s"], r["compile_s"]
        goals = [("latency <= 0.7 x eager", lat["myelin"] <= 0.7 * lat["eager"]),
                 ("latency <= Inductor", lat["myelin"] <= lat["inductor"]),
                 ("compiles faster than Inductor", comp["myelin"] < comp["inductor"])]
        errors = ", ".join(f"{k} {v:.1e}" for k, v in r.get("rel_error", {}).items())
        lines.append(f"{r['name']} ({r['description']}, {r['threads']} threads): " +
                     "; ".join(f"{g} {'met' if ok else 'NOT met'}" for g, ok in goals) +
                     f"; error vs eager: {errors}; load average {r['load_before']:.1f} "
                     f"before, {r['load_after']:.1f} after")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS), help=f"of {MODELS}")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        run_one(args.one, args.out)
        return 0
    results = []
    for name in args.models:
        if name not in MODELS:
            raise SystemExit(f"unknown model {name}; the models are {', '.join(MODELS)}")
        with tempfile.TemporaryDirectory(prefix="torch-frontend-") as tmp:
            out = os.path.join(tmp, "result.json")
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                       MYELIN_CACHE_DIR=os.path.join(tmp, "myelin"))
            start = time.perf_counter()
            done = subprocess.run([sys.executable, __file__, "--one", name, "--out", out],
                                  env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0 or not os.path.exists(out):
                print(f"{name}: FAILED (exit status {done.returncode}):\n{done.stderr[-3000:]}",
                      flush=True)
                continue
            with open(out) as f:
                result = json.load(f)
        results.append(result)
        lat, comp = result["latency_s"], result["compile_s"]
        print(f"{name:<20} " + "  ".join(f"{s} {lat[s] * 1e3:.1f} ms" for s in SYSTEMS) +
              "  compile " + "  ".join(f"{s} {comp[s]:.1f} s" for s in SYSTEMS[1:]) +
              f"  ({time.perf_counter() - start:.0f} s)", flush=True)
    print()
    print("\n".join(table(results)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
