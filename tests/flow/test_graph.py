"""The flow IR: links kept by the API, the verifier, input/output inference and the dumps."""

import numpy as np
import pytest

import myelin
from myelin.builder import verify
from myelin.errors import FlowError
from myelin.flow.graph import FuncFlags, OpFlags, VarFlags


def small_flow():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [1, 4])
    w = f.array("W", np.ones((4, 3), np.float32))
    f.relu(f.matmul(x, w), name="y")
    return flow


def test_sling_flag_bits():
    assert (VarFlags.IN, VarFlags.OUT, VarFlags.REF, VarFlags.LEARNABLE) == (1, 2, 4, 8)
    assert (VarFlags.UNIQUE, VarFlags.DYNAMIC, VarFlags.ROW, VarFlags.COL) == (16, 32, 64, 128)
    assert VarFlags.NOGRADIENT == 256
    assert (FuncFlags.TRAINING, FuncFlags.BACKPROP) == (1, 2)
    assert OpFlags.NOGRADIENT == 1


def test_links_follow_the_api():
    flow = small_flow()
    matmul, relu = flow.ops["f/MatMul"], flow.ops["f/Relu"]
    hidden = flow.vars["f/MatMul:0"]
    assert hidden.producer is matmul and hidden.consumers == [relu]
    other = flow.var("other", "float32", [1, 3])
    relu.replace_input(hidden, other)
    assert hidden.consumers == [] and other.consumers == [relu]
    flow.delete_op(relu)
    assert other.consumers == [] and flow.vars["f/y"].producer is None
    assert relu not in flow.func("f").ops
    verify.check(flow)
    with pytest.raises(FlowError, match="already exists"):
        flow.var("f/x")
    with pytest.raises(FlowError, match="still in use"):
        flow.delete_var(flow.vars["f/x"])


def test_aliases_find_variables():
    flow = small_flow()
    x = flow.vars["f/x"]
    flow.add_alias(x, "input")
    assert flow.var_named("input") is x
    with pytest.raises(FlowError):
        flow.var("input")


def test_verifier_reports_every_problem():
    flow = small_flow()
    matmul, relu = flow.ops["f/MatMul"], flow.ops["f/Relu"]
    flow.vars["f/y"].producer = matmul          # 1: wrong producer (and 2: relu's output mismatch)
    flow.vars["f/x"].consumers.append(relu)     # 3: consumer that does not read it
    flow.func("f").ops.append(matmul)           # 4: listed twice
    flow.vars["f/W"].shape = (5, 3)             # 5: constant size does not match its shape
    with pytest.raises(FlowError) as error:
        verify.check(flow)
    text = str(error.value)
    assert "5 problems" in text
    for fragment in ("names producer f/MatMul", "names consumer f/Relu", "twice",
                     "constant f/W has 12 elements", "op f/Relu writes f/y"):
        assert fragment in text


def test_cycles_are_reported():
    flow = myelin.Flow()
    func = flow.func("loop")
    a, b = flow.var("a"), flow.var("b")
    flow.op("first", "Neg", func, [b], [a])
    flow.op("second", "Neg", func, [a], [b])
    with pytest.raises(FlowError, match="cycle through ops first, second"):
        verify.check(flow)


def test_topological_order_is_stable():
    flow = myelin.Flow()
    func = flow.func("f")
    x, y, z = flow.var("x"), flow.var("y"), flow.var("z")
    flow.op("late", "Neg", func, [y], [z])
    flow.op("early", "Neg", func, [x], [y])
    flow.sort()
    assert [op.name for op in func.ops] == ["early", "late"]


def test_input_output_inference():
    flow = small_flow()
    flow.infer_inputs_and_outputs()
    func = flow.func("f")
    assert [v.name for v in func.inputs()] == ["f/x"]
    assert [v.name for v in func.outputs()] == ["f/y"]
    assert not flow.vars["f/W"].is_input        # constants are never inputs
    # An explicit output attribute on the producer wins over the consumer rule.
    flow.ops["f/MatMul"].attrs["output"] = "true"
    flow.infer_inputs_and_outputs()
    assert flow.vars["f/MatMul:0"].is_output


def test_connector_refs_become_inputs_and_outputs():
    flow = myelin.Flow()
    func = flow.func("f")
    state, nxt, out = flow.var("state"), flow.var("next"), flow.var("out")
    state.ref = True
    flow.op("make", "Identity", func, [nxt], [state])
    flow.op("use", "Neg", func, [state], [out])
    flow.cnx("link", [state])
    flow.infer_inputs_and_outputs()
    assert state.flags & (VarFlags.IN | VarFlags.OUT) == VarFlags.IN | VarFlags.OUT


def test_text_dump():
    flow = small_flow()
    flow.infer_inputs_and_outputs()
    text = str(flow)
    assert "var f/x : float32[1x4] input" in text
    assert "var f/W : float32[4x3] const" in text
    assert "op f/MatMul : MatMul {" in text and "func f {" in text


def test_order_with_an_op_reading_a_variable_twice():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [2])
    y = f.exp(x)
    z = f.add(y, y)
    f.neg(z)
    assert [op.type for op in flow.order(flow.funcs["f"])] == ["Exp", "Add", "Neg"]
