"""The verifier's checks by op definition: input and output counts from the registry, and
control-flow ops' functions, arguments and declared types. Each case is a class of .flow
file that fuzzing (scripts/fuzz_flow.py) found raising a foreign exception (IndexError,
KeyError, TypeError, ValueError) in a pass, the VM's lowering or the VM; saved and loaded
back, each must now be refused with FlowError, before anything runs."""

import numpy as np
import pytest

import myelin
import myelin.control
from myelin.builder import verify
from myelin.errors import FlowError, ShapeError


def _reloaded(flow):
    return myelin.Flow.from_bytes(flow.to_bytes())


def _mlp():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [1, 4])
    f.softmax(f.relu(f.matmul(x, f.array("w", np.ones((4, 3), np.float32)))), name="y")
    return flow


def _program():
    """fact(n, acc) by recursion, and a function taking a function value and a tuple."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "fact")
    n = f.param("n", "float32")
    acc = f.param("acc", "float32", [3])
    f.returns(("float32", [3]))
    f.ret(f.if_else(f.less_equal(n, 1.0), lambda b: acc,
                    lambda b: b.call("fact", b.sub(n, 1.0), b.mul(acc, n))))
    g = myelin.Builder(flow, "pair")
    v = g.param("v", "float32", [3])
    t = g.tuple(v, g.function("fact"))
    g.ret(g.call(g.tuple_get(t, 1), 2.0, g.tuple_get(t, 0)))
    return flow


def _op(flow, prefix):
    return next(op for name, op in flow.ops.items() if name.startswith(prefix))


def test_built_flows_verify():
    assert verify.problems(_mlp()) == []
    assert verify.problems(_reloaded(_program())) == []
    program = myelin.control.compile(_reloaded(_program()), cache=False)
    assert np.allclose(program.run("pair", np.ones(3, np.float32)), 2)


@pytest.mark.parametrize("prefix", ["f/MatMul", "f/Max", "f/Sub"])
def test_an_op_missing_its_output(prefix):
    """IndexError in fusion, simplification or kernel selection."""
    flow = _mlp()
    op = _op(flow, prefix)
    op.remove_output(op.outputs[0])
    with pytest.raises(FlowError, match=rf"{prefix}\S* \(\w+\) gives 1 outputs, has 0"):
        myelin.Compiler(cache=False).compile(_reloaded(flow))


def test_an_op_with_outputs_its_rule_does_not_give():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    parts = f.split(f.var("x", myelin.DT_FLOAT, [4]), 2)
    f.add(parts[0], parts[1], name="y")
    _op(flow, "f/Split").add_output(flow.var("f/extra", "float32", [2]))
    with pytest.raises(ShapeError, match=r"f/Split \(Split\) gives 2 outputs, has 3"):
        myelin.Compiler(cache=False).compile(_reloaded(flow))


def _broken(change):
    flow = _program()
    change(flow)
    return _reloaded(flow)


@pytest.mark.parametrize("change, message", [
    # KeyError in the VM's lowering.
    (lambda flow: _op(flow, "fact/If").attrs.pop("else_branch"), "else_branch None"),
    # ValueError in the VM: an argument of another shape than the parameter.
    (lambda flow: _op(flow, "fact/else/Call").inputs.reverse(), "argument .* parameter"),
    # ValueError in the VM: the truth value of an array (a condition that is not a scalar).
    (lambda flow: _op(flow, "fact/If").inputs.reverse(), "must be a scalar"),
    # TypeError in the lowering: no index.
    (lambda flow: _op(flow, "pair/TupleGet").attrs.pop("index"), "index is missing"),
    # IndexError in the lowering: the tuple lost an element its type still lists.
    (lambda flow: _op(flow, "pair/Tuple").remove_input(1), "declared"),
    # TypeError in the VM: a constant called as a function value.
    (lambda flow: _op(flow, "pair/Function").outputs[0].set_data(np.float32(1)),
     "not a function value|producer"),
])
def test_inconsistent_control_flow_is_refused_before_running(change, message):
    with pytest.raises(FlowError, match=message):
        myelin.control.compile(_broken(change), cache=False)


def test_a_dynamic_dimension_in_a_value_type():
    """ValueError (int('?')) reading the type of a result of dynamic shape."""
    flow = _program()
    _op(flow, "fact/If").outputs[0].shape = (-1,)
    with pytest.raises(FlowError, match=r"gives float32\[3\] as .*declared float32\[\?\]"):
        myelin.control.compile(_reloaded(flow), cache=False)
