"""The ``myelin`` command on small models: compile and profile reports, run, bench, graph and
convert, and its errors."""

import io
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import myelin
from jitcheck import guide_flow
from myelin.cli import main
from myelin.cli.progress import ProgressBar
from myelin.flow import dot


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


@pytest.mark.parametrize("command, options", [
    ("compile", ["--cpu-features", "--dump-flow", "--dump-llvm", "--dump-asm", "--target",
                 "--output", "--no-cache", "--progress"]),
    ("profile", ["--cpu-features", "--runs", "--seconds"]),
    ("run", ["--cpu-features", "--input", "--random", "--seed", "--output-dir"]),
    ("bench", ["--cpu-features", "--runs", "--seconds", "--warmup", "--onnxruntime"]),
    ("graph", ["--cpu-features", "--output"]),
    ("convert", ["--optimize", "--version"]),
    ("compare", ["--input", "--random", "--rtol", "--atol", "--ort-unoptimized", "--all"]),
])
def test_help_of_each_command(command, options):
    result = subprocess.run([sys.executable, "-m", "myelin.cli", command, "--help"],
                            capture_output=True, text=True, check=True)
    for option in ["--shape", "--opt-level", "--debug"] + options:
        assert option in result.stdout


def weights(onnx_path):
    model = onnx.load(onnx_path)
    return numpy_helper.to_array(model.graph.initializer[0])


def test_run_prints_and_saves_the_outputs(onnx_file, tmp_path):
    x = np.random.default_rng().standard_normal((3, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = np.maximum(x @ weights(onnx_file), 0)
    status, text = run("run", onnx_file, "--input", f"x={tmp_path / 'x.npy'}")
    assert status == 0
    head, values = text.split("\n", 1)
    assert head == "y: float32[3x5]"
    printed = [float(v) for v in re.findall(r"-?\d+\.\d*(?:e[-+]\d+)?", values)]
    np.testing.assert_allclose(printed, want.ravel(), rtol=1e-5, atol=1e-6)

    status, text = run("run", onnx_file, "--input", f"x={tmp_path / 'x.npy'}",
                       "--output-dir", str(tmp_path / "out"))
    assert (status, text) == (0, f"y: float32[3x5] saved to {tmp_path / 'out' / 'y.npy'}\n")
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), want, rtol=1e-5)


def test_run_with_bfloat16_weights(onnx_file, tmp_path):
    """--weights bfloat16: the product reads its weights rounded to bfloat16."""
    import ml_dtypes
    x = np.random.default_rng().standard_normal((3, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    rounded = weights(onnx_file).astype(ml_dtypes.bfloat16).astype(np.float64)
    status, _ = run("run", onnx_file, "--input", f"x={tmp_path / 'x.npy'}", "--weights",
                    "bfloat16", "--output-dir", str(tmp_path / "out"))
    assert status == 0
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"),
                               np.maximum(x.astype(np.float64) @ rounded, 0), rtol=1e-5,
                               atol=1e-6)


def test_run_a_bfloat16_model(tmp_path):
    """A bfloat16 input read from a .npy file (which numpy.save writes as raw 2-byte
    elements) and a bfloat16 output saved."""
    import ml_dtypes
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [4])])
    model = tmp_path / "relu.onnx"
    model.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                      .SerializeToString())
    np.save(tmp_path / "x.npy", np.array([-1, 0.5, 2, -3], ml_dtypes.bfloat16))
    status, text = run("run", str(model), "--input", f"x={tmp_path / 'x.npy'}",
                       "--output-dir", str(tmp_path / "out"))
    assert status == 0 and text.startswith("y: bfloat16[4]")
    saved = np.load(tmp_path / "out" / "y.npy").view(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(saved.astype(np.float32), [0, 0.5, 2, 0])


def test_run_a_flow_file_on_random_inputs(flow_file, tmp_path):
    flow = myelin.Flow.load(flow_file)
    status, text = run("run", flow_file, "--random", "--seed", "7", "--output-dir",
                       str(tmp_path))
    assert (status, text) == (0, f"f/y: float32[1x256] saved to {tmp_path / 'f_y.npy'}\n")
    x = np.random.default_rng(7).standard_normal((1, 64), np.float32)  # as --seed 7
    h = np.maximum(x @ flow.vars["f/W"].data + flow.vars["f/b"].data, 0)
    want = np.exp(h - h.max()) / np.exp(h - h.max()).sum()
    np.testing.assert_allclose(np.load(tmp_path / "f_y.npy"), want, rtol=1e-4)


def test_run_errors_name_the_inputs(onnx_file, tmp_path, capsys):
    np.save(tmp_path / "x7.npy", np.ones((3, 7), np.float32))
    np.save(tmp_path / "x64.npy", np.ones((3, 8)))
    (tmp_path / "text.npy").write_text("not an array")
    cases = [
        ([], "no value for input x",
         "the model's inputs are x float32[?x8]: give --input NAME=FILE.npy for each, or "
         "--random"),
        (["--random"], "input x has dynamic shape float32[?x8]",
         "give the input's shape with --shape NAME=D0,D1,..."),
        (["--input", f"z={tmp_path / 'x7.npy'}"], "the model has no input z",
         "the model's inputs are x float32[?x8]"),
        (["--input", f"x={tmp_path / 'x7.npy'}"],
         "input x has shape [3, 7], the model declares [batch, 8]",
         "the model's inputs are x float32[?x8]"),
        (["--input", f"x={tmp_path / 'x64.npy'}"], "input x is float32, got an array of float64",
         "the model's inputs are x float32[?x8]"),
        (["--input", f"x={tmp_path / 'missing.npy'}"],
         f"cannot read {tmp_path / 'missing.npy'} for input x: No such file or directory",
         "give a .npy file of the input's value (numpy.save writes them)"),
        (["--input", f"x={tmp_path / 'text.npy'}"],
         f"{tmp_path / 'text.npy'} (input x) is not a .npy file",
         "give a .npy file of the input's value (numpy.save writes them)"),
    ]
    for options, message, hint in cases:
        assert run("run", onnx_file, *options)[0] == 1
        assert capsys.readouterr().err.splitlines() == [f"myelin run: error: {message}",
                                                        f"  hint: {hint}"]


def bench_table(text):
    """The columns of a bench table: {column: {row: value}}."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("myelin"))
    columns = lines[start].split()
    table = {column: {} for column in columns}
    for line in lines[start + 1:]:
        match = re.match(r"(\S.*?)\s+([\d.]+(?:\s+[\d.]+)*)$", line)
        if not match:
            break
        for column, value in zip(columns, match.group(2).split()):
            table[column][match.group(1)] = float(value)
    return table


def test_bench_against_onnxruntime(onnx_file):
    status, text = run("bench", onnx_file, "--shape", "x=16,8", "--runs", "30", "--warmup", "2",
                       "--threads", "1", "--onnxruntime")
    assert status == 0
    assert re.match(r"compiled in [\d.]+ s\ninputs x float32\[16x8\] \(random\); timed: "
                    r"model\.run\(inputs\)", text)
    table = bench_table(text)
    assert list(table) == ["myelin", "onnxruntime"]
    for rows in table.values():
        assert rows["runs"] == 30
        latency = [rows[f"{row} (us)"] for row in ("min", "p50", "p90", "p99", "max")]
        assert latency == sorted(latency) and latency[0] > 0
        assert rows["min (us)"] <= rows["mean (us)"] <= rows["max (us)"]
        assert rows["samples/s (batch x.shape[0]=16)"] == pytest.approx(
            16 * rows["computes/s"], rel=1e-3)
    ratio = float(re.search(r"^myelin/onnxruntime p50: ([\d.]+) \(below 1: myelin is "
                            r"faster\)$", text, re.MULTILINE).group(1))
    assert ratio == pytest.approx(table["myelin"]["p50 (us)"] / table["onnxruntime"]["p50 (us)"],
                                  rel=0.05, abs=0.01)


def test_bench_a_flow_file(flow_file):
    status, text = run("bench", flow_file, "--seconds", "0.05")
    assert status == 0
    assert ("cell f, inputs f/x float32[1x64] (random); timed: data.compute() on one instance"
            in text)
    rows = bench_table(text)["myelin"]
    assert rows["runs"] > 10 and rows["min (us)"] <= rows["p50 (us)"] <= rows["max (us)"]


def test_bench_errors(onnx_file, flow_file, monkeypatch, capsys):
    assert run("bench", flow_file, "--onnxruntime")[0] == 1
    assert capsys.readouterr().err.splitlines() == [
        "myelin bench: error: --onnxruntime applies to ONNX models only",
        "  hint: ONNX Runtime cannot run a .flow file: leave out --onnxruntime"]
    monkeypatch.setitem(sys.modules, "onnxruntime", None)      # as if not installed
    assert run("bench", onnx_file, "--shape", "x=2,8", "--onnxruntime")[0] == 1
    assert capsys.readouterr().err.splitlines() == [
        "myelin bench: error: --onnxruntime needs ONNX Runtime, which is not installed",
        "  hint: pip install onnxruntime"]


def test_graph_draws_both_flows(onnx_file, flow_file, tmp_path):
    status, text = run("graph", flow_file, "-o", str(tmp_path / "g.dot"))
    assert (status, text) == (0, f"wrote {tmp_path / 'g.dot'}: the input flow has 9 ops, the "
                                 f"optimized flow 4 ops\n")
    flow = myelin.Flow.load(flow_file)
    optimized = myelin.Compiler().compile(flow).flow
    drawing = (tmp_path / "g.dot").read_text()
    assert drawing == dot.compare({"input": flow, "optimized": optimized}, "guide.flow")
    for caption, drawn in (("input", flow), ("optimized", optimized)):
        for name in drawn.ops:
            assert f'"{caption}:op:{name}" [' in drawing
    status, _ = run("graph", onnx_file, "--shape", "x=3,8", "-o", str(tmp_path / "o.dot"))
    assert status == 0 and '"optimized:op:main/MatMul" [' in (tmp_path / "o.dot").read_text()


def test_graph_svg_and_html_without_graphviz(flow_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))                 # no dot there
    assert run("graph", flow_file, "-o", str(tmp_path / "g.svg"))[0] == 1
    assert capsys.readouterr().err.splitlines() == [
        f"myelin graph: error: GraphViz is not installed: wrote {tmp_path / 'g.dot'}, not "
        f"{tmp_path / 'g.svg'}",
        f"  hint: install graphviz and run dot -Tsvg {tmp_path / 'g.dot'} -o "
        f"{tmp_path / 'g.svg'}, or draw to a .html file"]
    assert (tmp_path / "g.dot").read_text().startswith("digraph {")
    assert not (tmp_path / "g.svg").exists()
    status, text = run("graph", flow_file, "-o", str(tmp_path / "g.html"))
    assert status == 0 and "the page shows the DOT text" in text
    page = (tmp_path / "g.html").read_text()
    assert "<pre>digraph {" in page and "&quot;optimized:op:f/Calculate_1&quot;" in page
    assert run("graph", flow_file, "-o", str(tmp_path / "g.png"))[0] == 1
    assert "hint: give an output file ending in .dot, .svg or .html" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("dot") is None, reason="GraphViz is not installed")
def test_graph_svg_and_html_with_graphviz(flow_file, tmp_path):
    assert run("graph", flow_file, "-o", str(tmp_path / "g.svg"))[0] == 0
    assert "optimized:op:f/Calculate_1" in (tmp_path / "g.svg").read_text()
    assert run("graph", flow_file, "-o", str(tmp_path / "g.html"))[0] == 0
    assert "<svg" in (tmp_path / "g.html").read_text()


@pytest.mark.parametrize("options", [[], ["--optimize"], ["--version", "3"]])
def test_convert_writes_a_flow_that_computes_the_same(onnx_file, tmp_path, options):
    path = tmp_path / "linear.flow"
    status, text = run("convert", onnx_file, str(path), "--shape", "x=3,8", *options)
    assert status == 0 and text.startswith(f"wrote {path} (.flow version ")
    flow = myelin.Flow.load(str(path))
    assert [op.type for op in flow.ops.values()] == (
        ["FusedMatMul"] if options == ["--optimize"] else ["MatMul", "Relu"])
    data = myelin.Compiler().compile(flow).cell("main").instance()
    x = np.random.default_rng().standard_normal((3, 8)).astype(np.float32)
    data["main/x"] = x
    data.compute()
    np.testing.assert_allclose(data["main/y"].numpy(), np.maximum(x @ weights(onnx_file), 0),
                               rtol=1e-5)


def test_compile_dumps_passes_ir_and_assembly(onnx_file):
    status, text = run("compile", onnx_file, "--shape", "x=3,8", "--dump-flow", "--dump-llvm",
                       "--dump-asm")
    assert status == 0
    passes, rest = text.split("compiled in ")
    assert passes.startswith("--- flow after ") and "op main/MatMul : FusedMatMul {" in passes
    report, rest = rest.split("\n--- llvm ---\n")
    ir, asm = rest.split("\n--- asm ---\n")
    assert "cell main: 1 steps" in report
    assert re.search(r"^define .*@cell_main\w*\(", ir, re.MULTILINE)
    assert re.search(r"^\s+retq?\b", asm, re.MULTILINE) and re.search(r"^\s+v?mov", asm,
                                                                     re.MULTILINE)


def test_a_closed_pipe_ends_quietly(flow_file):
    # As in `myelin run ... | head -1`: the reader is gone before the output is written.
    process = subprocess.Popen([sys.executable, "-m", "myelin.cli", "run", flow_file,
                                "--random"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()
    assert process.wait() == 141
    assert process.stderr.read() == b""
    process.stderr.close()


def test_compile_for_other_targets(onnx_file, tmp_path):
    status, text = run("compile", onnx_file, "--shape", "x=64,8", "--target",
                       "aarch64-unknown-linux-gnu")
    assert status == 0
    assert text.startswith("compiled for aarch64-unknown-linux-gnu (generic) in ")
    assert re.search(r"^\s+fmla\s+v\d+\.4s", text, re.MULTILINE)      # NEON multiply-adds
    assert "cell_main_0:" in text and "ymm" not in text
    status, text = run("compile", onnx_file, "--shape", "x=64,8", "--target",
                       "riscv64-unknown-linux-gnu", "--target-features", "+v", "-o",
                       str(tmp_path / "model.s"))
    assert status == 0 and "bytes of assembly" in text
    assert re.search(r"^\s+vf\w+\.v[vf]\s", (tmp_path / "model.s").read_text(), re.MULTILINE)
    status, text = run("compile", onnx_file, "--shape", "x=64,8", "--target",
                       "aarch64-unknown-linux-gnu", "-o", str(tmp_path / "model.o"))
    assert status == 0 and "bytes of an object file" in text
    assert (tmp_path / "model.o").read_bytes()[:4] == b"\x7fELF"


def test_compile_for_a_target_llvm_does_not_know(onnx_file, capsys):
    assert run("compile", onnx_file, "--shape", "x=4,8", "--target", "z80-none-none")[0] == 1
    assert "LLVM does not know target 'z80-none-none'" in capsys.readouterr().err


def test_the_cache_is_used_listed_and_cleared(flow_file, tmp_path, monkeypatch):
    monkeypatch.setenv("MYELIN_CACHE_DIR", str(tmp_path))
    status, text = run("compile", flow_file)
    assert status == 0 and " llvm " in text.splitlines()[0]
    status, text = run("compile", flow_file)
    assert " cache " in text.splitlines()[0] and " llvm " not in text.splitlines()[0]
    status, text = run("compile", flow_file, "--no-cache")
    assert " llvm " in text.splitlines()[0]
    status, text = run("cache", "list")
    lines = text.splitlines()
    assert status == 0 and lines[0].startswith(f"compile cache {tmp_path / 'code'}: 1 entries")
    entry = r"\s+[0-9a-f]{12}\s+[\d.]+ KiB\s+\d{4}-\d\d-\d\d \d\d:\d\d\s+\S+ \w+\s+4\s+f$"
    # the 4 steps' kernels and the matrix product's tile helper; the 4 kernels by signature
    assert lines[1].startswith("  and the code of 5 kernel and helper functions and 4 "
                               "kernels by signature"), lines[1]
    assert re.match(entry, lines[3]), lines[3]       # the guide's 4 steps, cell f
    status, text = run("cache", "clear")
    assert status == 0 and text.startswith("removed 10 entries")  # network, 5 + 4 functions

    assert run("cache", "list")[1].startswith(f"compile cache {tmp_path / 'code'}: 0 entries")


def test_progress_bar_draws_phases_and_steps_then_clears():
    stream = io.StringIO()
    with ProgressBar(stream, width=10, delay=0) as bar:
        bar("optimize", 0, 0)
        bar("emit", 0, 4)
        bar("emit", 2, 4)
        assert re.search(r"\rcompiling: emit     \[#####-----\] 2/4 steps\s+[\d.]+ s\s*$",
                         stream.getvalue())
        bar("llvm", 0, 0)
        assert re.search(r"\rcompiling: llvm     [|/\\-]\s+[\d.]+ s\s*$", stream.getvalue())
        bar("done", 0, 0)
        assert stream.getvalue().endswith("\r")    # the line cleared
        drawn = len(stream.getvalue())
    assert len(stream.getvalue()) == drawn          # nothing drawn after "done"
    assert bar.line("emit", 1, 4, 2.5) == "compiling: emit     [##--------] 1/4 steps   2.5 s"


def test_progress_of_a_compile(flow_file, monkeypatch):
    seen = []
    compiler = myelin.Compiler(progress=lambda *news: seen.append(news), cache=False)
    compiler.compile(myelin.Flow.load(flow_file))
    phases = [phase for phase, _, _ in seen]
    assert phases[:3] == ["optimize", "plan", "emit"] and phases[-2:] == ["llvm", "done"]
    emitted = [done for phase, done, total in seen if phase == "emit"]
    assert emitted == list(range(len(emitted))) and emitted[-1] == seen[-3][2] == 4


def test_compile_a_flow_with_control_flow(tmp_path):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "count")
    n = f.param("n", "int32")
    f.ret(f.while_loop(lambda b, i: b.less(i, n), lambda b, i: b.add(i, 1), f.const(0, "int32")))
    path = tmp_path / "count.flow"
    flow.save(str(path))
    status, text = run("compile", str(path))
    assert status == 0
    assert re.match(r"compiled 6 functions with control flow into 2 cells in [\d.]+ s", text)
    assert "count/while:" in text and "tailbranch" in text and "external <segment" in text
    assert re.search(r"cell segment\d: \d+ steps", text)


def fails(capsys, *argv):
    """The exit status and stderr lines of a command line that fails (argparse exits)."""
    capsys.readouterr()
    try:
        status = main(list(argv), io.StringIO())
    except SystemExit as exit:
        status = exit.code
    return status, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("argv, message", [
    (["run", "M", "--shape", "x=-1,8", "--random"],
     "argument --shape: sizes are 0 or more, not [-1, 8]: 'x=-1,8'"),
    (["run", "M", "--shape", "x=2,,8", "--random"],
     "argument --shape: not NAME=D0,D1,... with integer sizes: 'x=2,,8'"),
    (["run", "M", "--shape", "=2,8"], "argument --shape: not NAME=D0,D1,...: '=2,8'"),
    (["run", "M", "--random", "--seed", "-1"], "argument --seed: -1 is not at least 0"),
    (["bench", "M", "--runs", "-5"], "argument --runs: -5 is not at least 0"),
    (["bench", "M", "--warmup", "-1"], "argument --warmup: -1 is not at least 0"),
    (["bench", "M", "--seconds", "0"], "argument --seconds: 0 is not above 0"),
    (["profile", "M", "--seconds", "nan"], "argument --seconds: nan is not above 0"),
    (["bench", "M", "--seconds", "inf"], "argument --seconds: inf is not above 0"),
    (["compile", "M", "--threads", "0"], "argument --threads: 0 is not at least 1"),
    (["compile", "M", "--opt-level", "x"], "argument --opt-level: invalid int value: 'x'"),
])
def test_bad_arguments_are_one_line_with_a_hint(onnx_file, capsys, argv, message):
    argv = [onnx_file if arg == "M" else arg for arg in argv]
    status, error = fails(capsys, *argv)
    assert status == 2
    assert error == [f"myelin {argv[0]}: error: {message}",
                     f"  hint: myelin {argv[0]} --help lists the arguments"]


def test_bad_models_shapes_and_files_are_one_line_with_a_hint(onnx_file, tmp_path, capsys):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    folder = tmp_path / "folder.onnx"
    folder.mkdir()
    np.save(tmp_path / "x.npy", np.ones((2, 8), np.float32))
    x = f"x={tmp_path / 'x.npy'}"
    cases = [
        (["run", str(empty), "--random"], f"{empty} is not an ONNX model: it has no graph"),
        (["compile", str(empty)], f"{empty} is not an ONNX model: it has no graph"),
        (["run", str(folder), "--random"], f"{folder} is not an ONNX model"),
        (["run", onnx_file, "--shape", "y=2,8", "--random"],
         "--shape names y, which the model does not take"),
        (["compile", onnx_file, "--shape", "y=2,8"],
         "--shape names y, which the model does not take"),
        (["run", onnx_file, "--shape", "x=2,8", "--shape", "x=3,8", "--random"],
         "--shape gives input x twice"),
        (["run", onnx_file, "--input", x, "--input", x], "--input gives x more than once"),
        (["run", onnx_file, "--shape", "x=1000000000,1000000000,8", "--random"],
         "random inputs up to x float32[1000000000x1000000000x8] would take 2.98e+10 GiB, "
         "more than this machine's"),
        (["run", onnx_file, "--input", x, "--output-dir", onnx_file],
         f"{onnx_file}: File exists"),
        (["convert", onnx_file, str(folder), "--shape", "x=2,8"], f"{folder}: Is a directory"),
        (["graph", onnx_file, "--shape", "x=2,8", "-o", str(tmp_path / "no" / "g.dot")],
         f"{tmp_path / 'no' / 'g.dot'}: No such file or directory"),
    ]
    for argv, message in cases:
        status, error = fails(capsys, *argv)
        assert status == 1 and len(error) == 2, (argv, error)
        assert error[0].startswith(f"myelin {argv[0]}: error: {message}"), (argv, error)
        assert error[1].startswith("  hint: ")


def test_internal_errors_are_one_line_and_a_traceback_with_debug(flow_file, monkeypatch,
                                                                  capsys):
    def broken(*args, **kwargs):
        raise ValueError("a bug")

    monkeypatch.setattr(myelin.Compiler, "compile", broken)
    assert fails(capsys, "compile", flow_file) == (1, [
        "myelin compile: internal error: ValueError: a bug",
        "  hint: this is a bug in myelin; run with --debug for the traceback and report it"])
    status, error = fails(capsys, "compile", flow_file, "--debug")
    assert status == 1 and error[0] == "Traceback (most recent call last):"
    assert error[-2] == "myelin compile: internal error: ValueError: a bug"


def test_bench_times_at_least_one_run(onnx_file):
    status, text = run("bench", onnx_file, "--shape", "x=2,8", "--seconds", "1e-9",
                       "--warmup", "0")
    assert status == 0 and bench_table(text)["myelin"]["runs"] >= 1


def test_compare_names_the_first_wrong_value(onnx_file, monkeypatch):
    status, text = run("compare", onnx_file, "--shape", "x=4,8", "--random")
    assert status == 0 and "every value agrees with ONNX Runtime" in text
    assert "Relu" not in text                    # only wrong values are listed by default
    status, text = run("compare", onnx_file, "--shape", "x=4,8", "--random", "--all")
    assert status == 0 and "MatMul" in text and "Relu" in text
    from myelin.importers.onnx import compare, model

    class Faulty(model.OnnxModel):
        def run(self, feeds):
            return [r if n != "h" else r + 1 for n, r in zip(self.output_names, super().run(feeds))]
    monkeypatch.setattr(compare, "OnnxModel", Faulty)
    status, text = run("compare", onnx_file, "--shape", "x=4,8", "--random")
    assert status == 3 and "first wrong: h of node h (MatMul)" in text
