"""Compile progress (:mod:`myelin.progress`): the compiler's default callback shows long
compiles as a tqdm bar on a terminal or as log lines, nothing for short ones; False shows
nothing; a callable gets the phases; what was shown is cleared when a compile fails."""

import io
import logging
import sys
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

import myelin
from myelin import progress
from myelin.errors import CompileError, UnsupportedOpError
from myelin.progress import LogLines, Reporter, TqdmBar


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self):
        return True


class _Recorder(Reporter):
    """A reporter that keeps what it was asked to show and clear."""

    def __init__(self):
        super().__init__(delay=0)
        self.shown, self.cleared = [], 0

    def show(self, phase, done, total, elapsed):
        self.shown.append(phase)

    def clear(self):
        self.cleared += 1


def _flow():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [1, 8])
    f.relu(f.add(x, f.array("b", np.ones(8, np.float32))), name="y")
    return flow


def _progress_threads():
    return [t for t in threading.enumerate() if t.name == "myelin-progress"]


@pytest.fixture
def slow(monkeypatch):
    """Every compile counts as long: the default callback shows it at once."""
    monkeypatch.setattr(progress, "DELAY", 0.0)


def _terminal(monkeypatch):
    """Make stderr a terminal, in the test's body (pytest sets its own before each phase)."""
    stream = _Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


def test_false_shows_nothing(slow, monkeypatch, caplog, capsys):
    terminal = _terminal(monkeypatch)
    caplog.set_level(logging.INFO, "myelin.progress")
    myelin.Compiler(progress=False, cache=False).compile(_flow())
    assert terminal.getvalue() == "" and capsys.readouterr() == ("", "")
    assert not caplog.records and not _progress_threads()


def test_a_callable_gets_the_phases():
    seen = []
    myelin.Compiler(progress=lambda *news: seen.append(news), cache=False).compile(_flow())
    phases = [phase for phase, _, _ in seen]
    assert phases[:3] == ["optimize", "plan", "emit"] and phases[-2:] == ["llvm", "done"]
    emitted = [(done, total) for phase, done, total in seen if phase == "emit"]
    assert emitted[0] == (0, 1) and emitted[-1] == (1, 1)


def test_default_off_a_terminal_logs_long_compiles_only(monkeypatch, caplog, capsys):
    caplog.set_level(logging.INFO, "myelin.progress")
    compiler = myelin.Compiler(cache=False)      # stderr is pytest's capture: no terminal
    assert isinstance(compiler.progress, LogLines)
    compiler.compile(_flow())
    assert not caplog.records                    # a short compile: nothing

    monkeypatch.setattr(progress, "DELAY", 0.0)
    myelin.Compiler(cache=False).compile(_flow())
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0].startswith("compiling: optimize (") and lines[0].endswith(" s so far)")
    assert "compiling: emit, 1 steps" in lines[2] and lines[-1].startswith("compiling: llvm")
    assert len(lines) == len({line.split(" (")[0] for line in lines})   # one line a phase
    assert capsys.readouterr() == ("", "") and not _progress_threads()


def test_default_on_a_terminal_draws_a_tqdm_bar_and_clears_it(slow, monkeypatch):
    tqdm = pytest.importorskip("tqdm")
    terminal = _terminal(monkeypatch)
    compiler = myelin.Compiler(cache=False)
    assert isinstance(compiler.progress, TqdmBar)
    compiler.compile(_flow())
    drawn = terminal.getvalue()
    assert "compiling: optimize" in drawn and "compiling: llvm" in drawn
    assert not tqdm.tqdm._instances and not _progress_threads()


def test_default_without_tqdm_logs(slow, monkeypatch, caplog):
    terminal = _terminal(monkeypatch)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)     # import tqdm.auto fails
    caplog.set_level(logging.INFO, "myelin.progress")
    compiler = myelin.Compiler(cache=False)
    assert isinstance(compiler.progress, LogLines)
    compiler.compile(_flow())
    assert terminal.getvalue() == "" and caplog.records


def test_a_failed_compile_clears_the_bar():
    def select(step, target):
        raise CompileError("no kernel")

    recorder = _Recorder()
    with pytest.raises(CompileError, match="no kernel"):
        myelin.Compiler(progress=recorder, select=select, cache=False).compile(_flow())
    assert recorder.shown[:2] == ["optimize", "plan"] and recorder.cleared == 1
    assert not _progress_threads()


def test_a_failed_default_compile_leaves_no_thread(slow, monkeypatch):
    tqdm = pytest.importorskip("tqdm")
    _terminal(monkeypatch)
    with pytest.raises(UnsupportedOpError):       # (no kernel selected)
        myelin.Compiler(select=lambda step, target: None, cache=False).compile(_flow())
    assert not tqdm.tqdm._instances and not _progress_threads()


def test_not_a_callable():
    with pytest.raises(CompileError, match="progress must be a callable"):
        myelin.Compiler(progress=True)


def test_onnx_models_forward_progress(slow, caplog):
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    seen = []
    myelin.onnx.load(model, {"x": [2, 3]}, progress=lambda *news: seen.append(news[0]),
                     cache=False)
    assert seen[0] == "optimize" and seen[-1] == "done"

    caplog.set_level(logging.INFO, "myelin.progress")
    myelin.onnx.load(model, {"x": [2, 3]}, cache=False)          # the default: log lines
    assert any(r.getMessage().startswith("compiling: llvm") for r in caplog.records)
    caplog.clear()
    myelin.onnx.load(model, {"x": [2, 3]}, progress=False, cache=False)
    assert not caplog.records
