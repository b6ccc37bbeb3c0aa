"""Control-flow converters (If, Loop, Scan) against ONNX Runtime: subgraphs become functions
run by myelin.control's VM (or, for an If whose condition is known at import, the branch
taken inline; for a short loop whose body needs its iteration number at import, unrolled)."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import myelin.onnx
from myelin.errors import ShapeError

rng = np.random.default_rng()
FLOAT, BOOL, INT64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
_TYPES = {np.dtype(np.float32): FLOAT, np.dtype(np.bool_): BOOL, np.dtype(np.int64): INT64}


def _info(name, elem_type=FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem_type, shape)


def _model(nodes, feeds, outputs, opset=17):
    """A model of ``nodes`` reading ``feeds`` (name -> array) and giving ``outputs`` (names, or
    (name, type) pairs; float by default)."""
    outputs = [(o, FLOAT) if isinstance(o, str) else o for o in outputs]
    graph = helper.make_graph(nodes, "g", [_info(n, _TYPES[a.dtype], a.shape)
                                           for n, a in feeds.items()],
                              [_info(n, t) for n, t in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _graph(name, nodes, inputs, outputs):
    """A subgraph; inputs and outputs are names or (name, type, shape) triples."""
    def infos(values):
        return [_info(v) if isinstance(v, str) else _info(*v) for v in values]
    return helper.make_graph(nodes, name, infos(inputs), infos(outputs))


def _const(name, value, elem_type=INT64):
    value = np.asarray(value)
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, elem_type, value.shape, value.reshape(-1).tolist()))


def _check(model, feeds, compiled=None):
    """Run ``model`` on ``feeds`` with myelin (``compiled``: an OnnxModel to reuse) and ONNX
    Runtime; the outputs must agree. Returns the myelin model."""
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    compiled = compiled or myelin.onnx.load(model)
    got = compiled.run(feeds)
    assert len(got) == len(want)
    for index, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, index
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"output {index}")
    return compiled


def _ops(compiled):
    return sorted(op.type for op in compiled.flow.ops.values() if op.type in ("If", "Call"))


def _random(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# If.
def _if_model():
    """y = If(c) then relu(s * x) + w else (y - s) * w, with s = x + w computed outside and
    w an initializer-like constant: both branches read outer values."""
    then_branch = _graph("then", [helper.make_node("Mul", ["s", "x"], ["m"]),
                                  helper.make_node("Relu", ["m"], ["r"]),
                                  helper.make_node("Add", ["r", "w"], ["t"])], [], ["t"])
    else_branch = _graph("else", [helper.make_node("Sub", ["y", "s"], ["d"]),
                                  helper.make_node("Mul", ["d", "w"], ["e"])], [], ["e"])
    nodes = [_const("w", _random(3, 4), FLOAT),
             helper.make_node("Add", ["x", "w"], ["s"]),
             helper.make_node("If", ["c"], ["out"], then_branch=then_branch,
                              else_branch=else_branch),
             helper.make_node("Tanh", ["out"], ["z"])]
    feeds = {"c": np.array(True), "x": _random(3, 4), "y": _random(3, 4)}
    return _model(nodes, feeds, ["z"]), feeds


def test_if_with_outer_values_runs_either_branch():
    model, feeds = _if_model()
    compiled = None
    for condition in (True, False, True):
        feeds = {"c": np.array(condition), "x": _random(3, 4), "y": _random(3, 4)}
        compiled = _check(model, feeds, compiled)
    assert len(compiled.compiles) == 1 and _ops(compiled) == ["If"]


def test_nested_if():
    """The inner branches read values of both graphs around them."""
    inner_then = _graph("inner_then", [helper.make_node("Mul", ["a", "x"], ["p"])], [], ["p"])
    inner_else = _graph("inner_else", [helper.make_node("Sub", ["a", "x"], ["q"])], [], ["q"])
    outer_then = _graph("outer_then", [
        helper.make_node("Exp", ["x"], ["a"]),
        helper.make_node("If", ["d"], ["b"], then_branch=inner_then, else_branch=inner_else),
        helper.make_node("Add", ["b", "y"], ["u"])], [], ["u"])
    outer_else = _graph("outer_else", [helper.make_node("Neg", ["y"], ["v"])], [], ["v"])
    nodes = [helper.make_node("If", ["c"], ["z"], then_branch=outer_then,
                              else_branch=outer_else)]
    compiled = None
    for c, d in ((True, True), (True, False), (False, True)):
        feeds = {"c": np.array(c), "d": np.array([d]), "x": _random(5), "y": _random(5)}
        compiled = _check(_model(nodes, feeds, ["z"]), feeds, compiled)
    assert _ops(compiled) == ["If", "If"]


def test_if_known_at_import_takes_one_branch_inline():
    """A constant condition: only the branch taken is imported, so the other may give
    another shape."""
    then_branch = _graph("then", [helper.make_node("Relu", ["x"], ["r"])], [], ["r"])
    else_branch = _graph("else", [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0)],
                         [], ["s"])
    nodes = [_const("k", 2), helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Greater", ["n", "k"], ["c"]),
             helper.make_node("If", ["c"], ["z"], then_branch=then_branch,
                              else_branch=else_branch)]
    feeds = {"x": _random(2, 3)}
    compiled = _check(_model(nodes, feeds, ["z"]), feeds)
    assert _ops(compiled) == [] and len(compiled.flow.funcs) == 1


def test_if_on_a_setting_that_one_branch_cannot_take_specializes():
    """silero-vad: If(sr == 16000), whose 8 kHz branch is not valid for a 16 kHz frame's
    shape. The condition comes only from a small integer input, so the model is compiled
    for its value, the branch taken alone; a new value is a new signature."""
    then_branch = _graph("then", [_const("rows", [-1, 4]),
                                  helper.make_node("Reshape", ["x", "rows"], ["r"]),
                                  helper.make_node("ReduceSum", ["r", "one"], ["s"],
                                                   keepdims=0)], [], ["s"])
    else_branch = _graph("else", [_const("rows", [-1, 5]),
                                  helper.make_node("Reshape", ["x", "rows"], ["r"]),
                                  helper.make_node("ReduceMax", ["r"], ["s"], axes=[1],
                                                   keepdims=0)], [], ["s"])
    nodes = [_const("one", [1]), _const("rate", 16000),
             helper.make_node("Equal", ["sr", "rate"], ["c"]),
             helper.make_node("If", ["c"], ["z"], then_branch=then_branch,
                              else_branch=else_branch)]
    graph = helper.make_graph(nodes, "g", [_info("sr", INT64, []), _info("x", FLOAT, ["n", "m"])],
                              [_info("z", FLOAT)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = _check(model, {"sr": np.array(16000), "x": _random(3, 4)})
    assert _ops(compiled) == []
    _check(model, {"sr": np.array(8000), "x": _random(2, 5)}, compiled)
    assert len(compiled.compiles) == 2


# Loop.
def _loop_body(extra_nodes=(), cond_out="cond_in"):
    """Body (i, cond_in, acc, count) -> (cond, acc + x[i % 4] * w, count + 1, scan: acc
    row, i as float): reads the outer x and w."""
    nodes = [_const("four", 4), helper.make_node("Mod", ["i", "four"], ["j"]),
             helper.make_node("Gather", ["x", "j"], ["row"]),
             helper.make_node("Mul", ["row", "w"], ["step"]),
             helper.make_node("Add", ["acc", "step"], ["acc_out"]),
             _const("one", 1.0, FLOAT), helper.make_node("Add", ["count", "one"], ["count_out"]),
             helper.make_node("Cast", ["i"], ["fi"], to=FLOAT),
             helper.make_node("Identity", ["acc_out"], ["acc_row"]), *extra_nodes]
    return nodes


@pytest.mark.parametrize("trip", [7, 90])      # 90: run blocked (two nested loops)
def test_loop_with_trip_count_condition_carried_values_and_scan_outputs(trip):
    body = _graph("body", _loop_body(), [("i", INT64, []), ("cond_in", BOOL, []), "acc",
                                         "count"],
                  [("cond_in", BOOL, []), "acc_out", "count_out", "acc_row", "fi"])
    nodes = [_const("m", trip), helper.make_node("Loop", ["m", "c", "acc0", "count0"],
                                                ["acc", "count", "rows", "steps"], body=body)]
    feeds = {"c": np.array(True), "acc0": _random(3), "count0": _random(1),
             "x": _random(4, 3), "w": _random(3)}
    model = _model(nodes, feeds, ["acc", "count", "rows", "steps"])
    compiled = _check(model, feeds)
    assert _ops(compiled).count("Call") == (4 if trip > 64 else 2)
    # No iteration when the condition starts false: the scan outputs are empty (ONNX Runtime
    # gives them shape [0], not knowing their rows).
    feeds["c"] = np.array(False)
    acc, count, rows, steps = compiled.run(feeds)
    assert len(compiled.compiles) == 2     # the condition decides the scan outputs' length
    np.testing.assert_array_equal(acc, feeds["acc0"])
    np.testing.assert_array_equal(count, feeds["count0"])
    assert rows.shape == (0, 3) and steps.shape == (0,)


def test_loop_stops_early_by_condition():
    """While the sum stays under a run-time limit (M a run-time input too, or absent): the
    number of iterations depends on the data."""
    extra = [helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
             helper.make_node("Less", ["total", "limit"], ["going"])]
    body = _graph("body", _loop_body(extra), [("i", INT64, []), ("cond_in", BOOL, []), "acc",
                                              "count"],
                  [("going", BOOL, []), "acc_out", "count_out"])
    for inputs in (["m", "c", "acc0", "count0"], ["", "c", "acc0", "count0"]):
        nodes = [helper.make_node("Abs", ["x0"], ["x"]),
                 helper.make_node("Loop", inputs, ["acc", "count"], body=body)]
        compiled = None
        for limit in (0.5, 3.0, 12.0):
            feeds = {"c": np.array(True), "acc0": np.zeros(3, np.float32),
                     "count0": np.zeros(1, np.float32), "x0": _random(4, 3),
                     "w": np.abs(_random(3)) + 0.1, "limit": np.array(limit, np.float32)}
            if inputs[0]:
                feeds["m"] = np.array(50, np.int64)
            compiled = _check(_model(nodes, feeds, ["acc", "count"]), feeds, compiled)
        assert len(compiled.compiles) == 1 and "Call" in _ops(compiled)


def test_loop_reading_its_iteration_number_as_a_shape_is_unrolled():
    """A Slice from i to i + 1 (as ONNX's test_loop11): its bounds must be known at import,
    so the short loop is unrolled."""
    body = _graph("body", [
        _const("one", 1), helper.make_node("Add", ["i", "one"], ["end"]),
        _const("zero", [0]), helper.make_node("Unsqueeze", ["i", "zero"], ["start1"]),
        helper.make_node("Unsqueeze", ["end", "zero"], ["end1"]),
        helper.make_node("Slice", ["x", "start1", "end1"], ["piece"]),
        helper.make_node("Add", ["y_in", "piece"], ["y_out"])],
        [("i", INT64, []), ("cond_in", BOOL, []), "y_in"],
        [("cond_in", BOOL, []), "y_out", "y_out"])
    nodes = [_const("m", 5), helper.make_node("Loop", ["m", "", "y"], ["res", "scan"],
                                             body=body)]
    feeds = {"x": _random(6), "y": _random(1)}
    compiled = _check(_model(nodes, feeds, ["res", "scan"]), feeds)
    assert _ops(compiled) == []


# Scan.
def _scan_model(directions, input_axes, output_axes, opset=17):
    """Running sum and product of the rows of x (and of y, 3 wide) with a state, scan outputs
    the running sum and the sum times the outer value w."""
    body = _graph("body", [helper.make_node("Add", ["sum_in", "a"], ["sum_out"]),
                           helper.make_node("Mul", ["prod_in", "b"], ["prod_out"]),
                           helper.make_node("Mul", ["sum_out", "w"], ["scaled"]),
                           helper.make_node("Identity", ["sum_out"], ["sum_row"])],
                  ["sum_in", "prod_in", "a", "b"], ["sum_out", "prod_out", "sum_row",
                                                    "scaled"])
    attrs = {"num_scan_inputs": 2, "scan_input_directions": directions,
             "scan_input_axes": input_axes, "scan_output_axes": output_axes,
             "scan_output_directions": [directions[0], 0]}
    nodes = [helper.make_node("Scan", ["s0", "p0", "x", "y"], ["s", "p", "sums", "scaled"],
                              body=body, **attrs)]
    return nodes


@pytest.mark.parametrize("directions, input_axes, output_axes, steps", [
    ([0, 0], [0, 0], [0, 0], 5),
    ([1, 0], [0, 1], [0, 1], 5),
    ([0, 1], [1, -1], [-1, 1], 5),
    ([1, 1], [0, 1], [0, 0], 150)])      # 150 steps: run blocked (two nested loops)
def test_scan(directions, input_axes, output_axes, steps):
    x_shape = [steps, 3]
    y_shape = [3, steps]
    if input_axes[0] == 1:
        x_shape = x_shape[::-1]
    if input_axes[1] == 0:
        y_shape = y_shape[::-1]
    feeds = {"s0": _random(3), "p0": _random(3), "x": _random(*x_shape),
             "y": 1 + 0.05 * _random(*y_shape), "w": _random(3)}
    nodes = _scan_model(directions, input_axes, output_axes)
    compiled = _check(_model(nodes, feeds, ["s", "p", "sums", "scaled"]), feeds)
    assert _ops(compiled).count("Call") == (4 if steps > 64 else 2)


def test_scan_opset8_with_a_batch_axis():
    body = _graph("body", [helper.make_node("Add", ["sum_in", "a"], ["sum_out"]),
                           helper.make_node("Identity", ["sum_out"], ["sum_row"])],
                  ["sum_in", "a"], ["sum_out", "sum_row"])
    nodes = [helper.make_node("Scan", ["", "s0", "x"], ["s", "sums"], body=body,
                              num_scan_inputs=1, directions=[1])]
    feeds = {"s0": _random(2, 3), "x": _random(2, 4, 3)}
    _check(_model(nodes, feeds, ["s", "sums"], opset=8), feeds)


# Errors.
def _errors(nodes, feeds, outputs=("z",)):
    return myelin.onnx.load(_model(nodes, feeds, list(outputs)))


def test_errors_name_the_node():
    x = _random(3)
    same = _graph("same", [helper.make_node("Relu", ["x"], ["r"])], [], ["r"])
    summed = _graph("summed", [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0)], [],
                    ["s"])
    # A condition of two elements.
    nodes = [helper.make_node("If", ["c"], ["z"], then_branch=same, else_branch=same,
                              name="two")]
    feeds = {"c": np.array([True, False]), "x": x}
    with pytest.raises(ShapeError, match="two .*condition must have one element"):
        _errors(nodes, feeds).run(feeds)
    # Branches of different shapes, the condition known only at run time (computed from
    # data, so not a setting to specialize on).
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             _const("zero", 0.0, FLOAT), helper.make_node("Greater", ["total", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["z"], then_branch=same, else_branch=summed,
                              name="mixed")]
    feeds = {"x": x}
    with pytest.raises(ShapeError, match="mixed .*branches give different types"):
        _errors(nodes, feeds).run(feeds)
    feeds = {"c": np.array(True), "x": x}
    # Scan outputs of a loop without a trip count.
    body = _graph("body", [helper.make_node("Add", ["v", "x"], ["v_out"])],
                  [("i", INT64, []), ("cond_in", BOOL, []), "v"],
                  [("cond_in", BOOL, []), "v_out", "v_out"])
    nodes = [helper.make_node("Loop", ["", "c", "x"], ["z", "rows"], body=body, name="open")]
    with pytest.raises(ShapeError, match="open .*no trip count M"):
        _errors(nodes, feeds, ["z", "rows"]).run(feeds)
    # Scan outputs of a loop its run-time condition may end early.
    body = _graph("body", [helper.make_node("Add", ["v", "x"], ["v_out"]),
                           helper.make_node("ReduceSum", ["v_out"], ["t"], keepdims=0),
                           _const("zero", 0.0, FLOAT),
                           helper.make_node("Less", ["t", "zero"], ["going"])],
                  [("i", INT64, []), ("cond_in", BOOL, []), "v"],
                  [("going", BOOL, []), "v_out", "v_out"])
    nodes = [_const("m", 100), helper.make_node("Loop", ["m", "c", "x"], ["z", "rows"],
                                               body=body, name="early")]
    with pytest.raises(ShapeError, match="early .*may end it before the trip count"):
        _errors(nodes, feeds, ["z", "rows"]).run(feeds)
    # A loop-carried value that changes shape.
    body = _graph("body", [helper.make_node("Concat", ["v", "x"], ["v_out"], axis=0)],
                  [("i", INT64, []), ("cond_in", BOOL, []), "v"],
                  [("cond_in", BOOL, []), "v_out"])
    nodes = [helper.make_node("Loop", ["m", "", "x"], ["z"], body=body, name="grows")]
    feeds = {"m": np.array(3, np.int64), "x": x}
    with pytest.raises(ShapeError, match="grows .*keep their types"):
        _errors(nodes, feeds).run(feeds)
    # A loop that never ends.
    nodes = [helper.make_node("Loop", ["", "", "x"], ["z"], body=body, name="forever")]
    with pytest.raises(ShapeError, match="forever .*never end"):
        _errors(nodes, {"x": x}).run({"x": x})
