"""The pass pipeline: levels, disabling passes, dumps, debug verification and the report."""

import numpy as np
import pytest

import myelin
from myelin import optimize
from myelin.errors import FlowError
from myelin.optimize import pipeline


def flow_with_work():
    """x*1 + (2*3), relu: something for folding, simplification and fusion to do."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [4, 5])
    six = f.mul(f.const(np.float32(2)), f.const(np.float32(3)))
    f.relu(f.add(f.mul(x, f.const(np.ones(5, np.float32))), six), name="y")
    flow.infer_inputs_and_outputs()
    return flow


def op_types(flow):
    return [op.type for op in flow.funcs["f"].ops]


def test_levels_choose_passes():
    flows = {}
    for level in range(optimize.MAX_LEVEL + 1):
        flow = flow_with_work()
        report = optimize.optimize(flow, level)
        flows[level] = [op.attrs.get("expr", op.type) for op in flow.funcs["f"].ops]
        ran = {run.name for run in report.runs}
        expected = {p.name for stage in pipeline.PIPELINE
                    for p in (stage.passes if isinstance(stage, pipeline.Fixpoint) else (stage,))
                    if p.level <= level}
        assert ran == expected
    assert flows[0] == ["Mul", "Mul", "Add", "Relu"]
    # Level 1 fuses everything, the constant product and the multiplication by one included;
    # level 2 folds 2*3 and drops x*1 first.
    assert flows[1] == ["@0=Relu(Add(Mul(%2,%3),Mul(%0,%1)))"]
    assert flows[2] == flows[3] == ["@0=Relu(Add(%0,%1))"]


def test_disable_by_name_and_environment(monkeypatch):
    flow = flow_with_work()
    report = optimize.optimize(flow, disable=["fuse"])
    assert "fuse" not in {run.name for run in report.runs}
    assert "Calculate" not in op_types(flow)
    monkeypatch.setenv("MYELIN_DISABLE_PASSES", "fuse,fold_constants")
    flow = flow_with_work()
    optimize.optimize(flow)
    assert op_types(flow)[0] == "Mul"
    with pytest.raises(ValueError, match="unknown passes nothing"):
        optimize.optimize(flow_with_work(), disable=["nothing"])
    with pytest.raises(ValueError, match="opt level 7"):
        optimize.optimize(flow_with_work(), 7)


def test_dump_after_each_changing_pass(monkeypatch, capsys):
    seen = []
    optimize.optimize(flow_with_work(), dump=lambda name, text: seen.append((name, text)))
    names = [name for name, _ in seen]
    assert names[-2:] == ["fuse", "eliminate_dead_code"]     # fusion leaves unused variables
    assert "Calculate" in seen[-2][1] and "expr = " in seen[-2][1]
    assert len(seen[-1][1].splitlines()) < len(seen[-2][1].splitlines())
    monkeypatch.setenv("MYELIN_DUMP_FLOW", "1")
    optimize.optimize(flow_with_work())
    assert "--- flow after fuse ---" in capsys.readouterr().err


def test_debug_verifies_after_each_pass(monkeypatch):
    def breaks_the_flow(flow, ctx):
        op = next(iter(flow.ops.values()))
        op.inputs[0].consumers.clear()           # an inconsistent link
        return True

    broken = pipeline.Pass("fuse", breaks_the_flow, 1)
    monkeypatch.setattr(pipeline, "PIPELINE", (broken,))
    with pytest.raises(FlowError, match="consumer list"):
        optimize.optimize(flow_with_work(), debug=True)
    optimize.optimize(flow_with_work(), debug=False)   # unverified: no error here


def test_report_times_every_run():
    report = optimize.optimize(flow_with_work())
    assert all(run.seconds >= 0 for run in report.runs)
    assert report.seconds() == pytest.approx(sum(run.seconds for run in report.runs))
    text = str(report)
    assert text.splitlines()[0].split() == ["pass", "runs", "changed", "ms"]
    assert any(line.startswith("fuse ") for line in text.splitlines())


def test_compiler_keeps_the_callers_flow():
    flow = flow_with_work()
    before = str(flow)
    compiler = myelin.Compiler()
    net = compiler.compile(flow)
    assert str(flow) == before
    assert op_types(net.flow) == ["Calculate"]
    assert "fuse" in str(compiler.report)
