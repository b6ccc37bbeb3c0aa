"""The README stays true: its Python examples run as written, in order, in one namespace (in a
temporary directory), and the counts it states are the ones the code has."""

import importlib
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import myelin
import myelin.onnx
import myelin.tf
from myelin.ops import registry

README = pathlib.Path(__file__).parents[1] / "README.md"


def _nvrtc():
    from myelin.codegen.cuda import nvrtc
    try:
        nvrtc.version()
    except myelin.CompileError:          # NVRTC is not installed
        return False
    return True


def _gpu():
    from myelin.runtime.cuda.cudadriver import default_driver
    try:
        default_driver()
    except myelin.DeviceError:
        return False
    return True


# Blocks that cannot run here, by a line they hold: why, and whether to skip them now.
SKIPPED = {
    'myelin.onnx.load("resnet18.onnx")': ("needs resnet18.onnx and images", lambda: True),
    'myelin.onnx.localize("model.onnx"': ("needs model.onnx and images", lambda: True),
    "from generate import Decoder": ("examples/generate.py, which "
                                     "tests/test_generate_example.py runs", lambda: True),
    "myelin.tf.import_graph(": ("needs graph.pbtxt, a concrete function and a SavedModel",
                                lambda: True),
    "myelin.cuda.compile(flow)": ("needs a GPU", lambda: not _gpu()),
    "planner.plan(flow": ("needs NVRTC", lambda: not _nvrtc()),
    'myelin.export(flow, "guide"': ("tests/test_export.py exports and runs it", lambda: True),
    "initializer=start": ("spawned workers import their functions from a module, and the "
                          "images are the reader's", lambda: True),
    'ray.data.read_parquet("images/")': ("needs resnet18.onnx and images", lambda: True),
    "myelin.ray.Predictor, batch_size=64": ("the block before's images, by hand",
                                            lambda: True),
}


def blocks():
    """(heading, code) of each Python block of the README, in order."""
    found, heading = [], None
    lines = iter(README.read_text().splitlines())
    for line in lines:
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.strip() == "```python":
            code = []
            for line in lines:
                if line.strip() == "```":
                    break
                code.append(line)
            found.append((heading, "\n".join(code) + "\n"))
    return found


def _skip_reason(code):
    for marker, (reason, skip) in SKIPPED.items():
        if marker in code and skip():
            return reason
    return None


def test_every_skipped_block_is_in_the_readme():
    codes = [code for _, code in blocks()]
    for marker in SKIPPED:
        assert any(marker in code for code in codes), f"no README block holds {marker!r}"


def test_python_examples_run_as_written(tmp_path, monkeypatch):
    """Each block runs on what the first one (Usage) defined, as the README's sections refer
    to "the example of Usage" (its flow, x and y)."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    # What the training example leaves to the reader: its batches and test images.
    usage = {
        "batches": [(rng.random((32, 64), np.float32), rng.integers(0, 10, 32, np.int32))
                    for _ in range(3)],
        "test_images": rng.random((32, 64), np.float32),
    }
    ran, skipped = [], []
    for number, (heading, code) in enumerate(blocks()):
        reason = _skip_reason(code)
        if reason:
            skipped.append(f"{heading}: {reason}")
            continue
        namespace = usage if number == 0 else dict(usage)
        try:
            exec(compile(code, f"README.md ({heading})", "exec"), namespace)
        except Exception as error:
            pytest.fail(f"the README's example under {heading!r} fails: "
                        f"{type(error).__name__}: {error}\n{code}")
        ran.append((heading, namespace))
    headings = [heading for heading, _ in ran]
    assert headings[0] == "Usage"
    assert {"Control flow", "Training", "Profiling"} <= set(headings), (headings, skipped)
    program = next(namespace["program"] for heading, namespace in ran
                   if heading == "Control flow")
    assert program.run("count", 1000) == 1000


def test_counts_are_the_code_s():
    text = " ".join(README.read_text().split())
    counts = {
        "ONNX op types are supported": len(myelin.onnx.supported_ops()),
        "TensorFlow op types convert": len(myelin.tf.supported_ops()),
    }
    try:
        front_end = importlib.import_module("myelin.torch")
        counts["ATen ops convert"] = len(front_end.supported_ops())
    except ImportError:           # (PyTorch is optional)
        pass
    for words, count in counts.items():
        stated = re.search(r"(\d+) " + words, text)
        assert stated and int(stated.group(1)) == count, (words, count)
    gradients = sum(1 for opdef in registry._REGISTRY.values() if opdef.gradient)
    assert f"({gradients} op types," in text
    opsets = myelin.importers.onnx.proto.OPSETS
    assert f"Opsets {opsets.start} to {opsets.stop - 1}" in text


def test_import_myelin_gives_its_subpackages_on_first_use():
    """`myelin.control.compile` works after `import myelin` alone (in a fresh process, where no
    other import loaded the subpackage first), and `import myelin` loads no LLVM."""
    script = ("import sys, myelin\n"
              "assert 'llvmlite' not in sys.modules\n"
              "print(myelin.control.compile.__module__, myelin.train.Trainer.__name__,\n"
              "      myelin.onnx.load.__name__)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["myelin.control.program", "Trainer", "load"]
