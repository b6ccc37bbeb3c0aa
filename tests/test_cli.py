"""The ``myelin`` command: compile and profile reports on small models, and its errors."""

import io
import re
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import myelin
from jitcheck import guide_flow
from myelin.cli import main


@pytest.fixture
def onnx_file(tmp_path):
    """y = relu(x W) with x: float32[batch, 8] (a dynamic batch), W: [8, 5]."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 5), np.float32),
                                "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])], [w])
    path = tmp_path / "linear.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                     .SerializeToString())
    return str(path)


@pytest.fixture
def flow_file(tmp_path):
    flow, *_ = guide_flow(np.random.default_rng(0))
    path = tmp_path / "guide.flow"
    flow.save(str(path))
    return str(path)


def run(*argv):
    out = io.StringIO()
    status = main(list(argv), out)
    return status, out.getvalue()


def test_compile_reports_phases_steps_and_instance(onnx_file, flow_file):
    status, text = run("compile", onnx_file, "--shape", "x=3,8")
    assert status == 0
    assert re.match(r"compiled in [\d.]+ s: import [\d.]+ s, optimize [\d.]+ s, plan", text)
    assert "cell main: 1 steps" in text and "instance" in text
    assert re.search(r"main/MatMul\s+FusedMatMul\s+FusedMatMul\[\w+\]\s+0\.000", text)
    status, text = run("compile", flow_file, "--dump-cells", "--opt-level", "0")
    assert status == 0
    net = myelin.Compiler(opt_level=0).compile(myelin.Flow.load(flow_file))
    for step in net.cell("f").steps:
        assert step.name in text
    assert "cell f {" in text            # the layout dump


def test_profile_rows_sum_to_the_total(onnx_file):
    status, text = run("profile", onnx_file, "--shape", "x=64,8", "--runs", "25",
                       "--threads", "1")
    assert status == 0
    assert text.startswith("Profile of cell main: 25 calls")
    shares = [float(m) for m in re.findall(r"^\|\s+([\d.]+)%\s+\|", text, re.MULTILINE)]
    rows, total = shares[:-1], shares[-1]       # steps and entry & exit, then TOTAL
    assert total == 100.0 and sum(rows) == pytest.approx(100.0, abs=0.05 * len(rows))
    assert "FusedMatMul" in text and "entry & exit" in text


def test_errors_are_one_line_with_a_hint(onnx_file, tmp_path, capsys):
    assert run("compile", onnx_file)[0] == 1
    error = capsys.readouterr().err.splitlines()
    assert error[0].startswith("myelin compile: error: input x has dynamic shape")
    assert error[1] == "  hint: give the input's shape with --shape NAME=D0,D1,..."
    assert run("compile", str(tmp_path / "model.txt"))[0] == 1
    assert "hint: give a .onnx or a .flow file" in capsys.readouterr().err
    assert run("profile", str(tmp_path / "missing.flow"), "--debug")[0] == 1
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["compile", "profile"])
def test_help_of_each_command(command):
    result = subprocess.run([sys.executable, "-m", "myelin.cli", command, "--help"],
                            capture_output=True, text=True, check=True)
    assert "--shape" in result.stdout and "--cpu-features" in result.stdout
