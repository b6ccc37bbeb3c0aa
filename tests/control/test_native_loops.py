"""Cells that loop (``Compiler(loops=...)``): the loop's rounds, the work hoisted before it,
the input projection computed at once (:mod:`myelin.optimize.loops`), and the control
pipeline's step that makes them (:mod:`myelin.control.loops`)."""

import numpy as np
import pytest

import myelin
from jitcheck import relative_error
from myelin import reference
from myelin.control.loops import Loop, native_loops
from myelin.control.lower import Instr, Segment
from myelin.errors import CompileError
from myelin.optimize import loops


def power_flow():
    """One round: i' = i + 1, y = tanh(x·I · Σ scale²), go on while i' < n. Σ scale² does
    not change from round to round."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "power")
    i = f.var("i", "int32")
    x, scale = f.var("x", "float32", [37]), f.var("scale", "float32", [37])
    n = f.var("n", "int32")
    for var in (i, x, scale, n):
        var.is_input = True
    squares = f.sum(f.mul(scale, scale))
    y = f.tanh(f.mul(f.matmul(f.reshape(x, [1, 37]), f.const(np.eye(37, dtype=np.float32))),
                     squares))
    outputs = {"i_next": f.add(i, 1), "y": f.reshape(f.mul(y, 1.0), [37])}
    outputs["more"] = f.less(outputs["i_next"], n)
    for name, var in outputs.items():
        f.rename(var, name)
        var.is_output = True
    return flow


def power_loops():
    return {"power": ("power/more", [("power/i_next", "power/i"), ("power/y", "power/x")])}


def test_a_cell_loops_while_its_condition_holds():
    rng = np.random.default_rng()
    network = myelin.Compiler(loops=power_loops()).compile(power_flow())
    cell = network.cell("power")
    first = cell.steps[0]           # Σ scale², hoisted out of the loop
    assert cell.spec("power/scale") in first.inputs
    assert all(t.name == "power/scale" or t.is_global for t in first.inputs)
    data = cell.instance()
    x = rng.uniform(-1, 1, 37).astype(np.float32)
    scale = rng.uniform(0.05, 0.25, 37).astype(np.float32)
    data["power/i"], data["power/x"], data["power/scale"], data["power/n"] = 0, x, scale, 7
    data.compute()
    expected = x.astype(np.float64)
    for _ in range(7):
        expected = np.tanh(expected * np.sum(scale.astype(np.float64) ** 2))
    assert int(data["power/i_next"]) == 7
    assert relative_error(data["power/y"], expected) < 1e-5


@pytest.mark.parametrize("spec, message", [
    (("power/missing", [("power/y", "power/x")]), "power/missing"),
    (("power/y", [("power/i_next", "power/i")]), "37 elements"),
    (("power/more", [("power/y", "power/i")]), "copies"),
    (("power/more", [("power/y", "power/y")]), "input"),
])
def test_a_loop_that_cannot_be_is_a_compile_error(spec, message):
    with pytest.raises(CompileError, match=message):
        myelin.Compiler(loops={"power": spec}).compile(power_flow())


def projection_flow():
    """rows = reshape(gather(xs, t)) · W, xs[20, 1, 8] and W constant."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "step")
    xs, t = f.var("xs", "float32", [20, 1, 8]), f.var("t", "int32", [1])
    xs.is_input = t.is_input = True
    w = f.const(rng.standard_normal((8, 5)).astype(np.float32))
    out = f.matmul(f.reshape(f.gather(xs, t), [1, 8]), w)
    out.is_output = True
    return flow, xs, t, out


def test_the_input_projection_is_computed_for_every_row_at_once():
    flow, xs, t, out = projection_flow()
    values = {xs: np.random.default_rng().standard_normal((20, 1, 8)).astype(np.float32),
              t: np.array([13], np.int32)}
    before = reference.run(flow, "step", values, [out])[out.name]
    assert loops.project_rows(flow, flow.funcs["step"], state={"step/t"})
    products = [op for op in flow.funcs["step"].ops if op.type == "MatMul"]
    assert [list(op.outputs[0].shape) for op in products] == [[20, 5]]
    invariant = loops.invariant_ops(flow, flow.funcs["step"], {"step/t"})
    assert products[0] in invariant and all(op.type != "Gather" for op in invariant)
    assert relative_error(reference.run(flow, "step", values, [out])[out.name], before) < 1e-6


def test_a_changing_matrix_is_not_projected():
    flow, *_ = projection_flow()
    assert not loops.project_rows(flow, flow.funcs["step"], state={"step/xs", "step/t"})


def _loop_codes(exit_arguments):
    """W: run a segment on parameter 0 giving (next value, test), then go again or leave."""
    segment = Segment("s", [])
    return {"W": [Instr("pad_stack", (4,)), Instr("external", (segment, (0,), (1, 2))),
                  Instr("tailbranch", (2, "again", "leave", exit_arguments))],
            "again": [Instr("pad_stack", (2,)), Instr("tailcall_graph", ("W", (0,)))],
            "leave": [Instr("pad_stack", (2,)), Instr("return", ((0,),))]}


def test_a_loop_becomes_one_looping_external():
    rewritten = native_loops(_loop_codes((1, 1)))["W"]
    assert [i.op for i in rewritten] == ["pad_stack", "external", "tailcall_graph"]
    assert rewritten[1].args[0].loop == Loop(condition=1, feedback=[(0, 0)])
    assert rewritten[2].args == ("leave", (1, 1))


def test_a_loop_whose_exit_reads_the_old_state_stays_in_the_vm():
    codes = _loop_codes((1, 0))         # the exit reads parameter 0, which changes
    assert native_loops(codes) == codes
