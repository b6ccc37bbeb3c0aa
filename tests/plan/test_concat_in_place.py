"""Concat in place (myelin.plan.concat): the producers of a Concat's inputs write them into
their parts of the output and the Concat step goes away, where every part is one run of
bytes and every input may take its place; elsewhere the Concat copies as before."""

import pickle

import numpy as np
import pytest

import myelin


def compile_cell(body, shapes, opt_level=3):
    """Cell f of a flow with inputs ``shapes`` (by name) and ``body(f, *inputs)`` making y."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    inputs = [f.var(name, myelin.DT_FLOAT, shape) for name, shape in shapes.items()]
    body(f, *inputs)
    return flow, myelin.Compiler(opt_level=opt_level, cache=False).compile(flow).cell("f")


def check(flow, cell):
    """Compute y on random inputs; compare it with the float64 reference."""
    rng = np.random.default_rng()
    data, feeds = cell.instance(), {}
    for name in cell.inputs:
        feeds[name] = rng.standard_normal(cell.spec(name).shape).astype(np.float32)
        data[name] = feeds[name]
    data.compute()
    expected = myelin.reference.run(flow, "f", feeds)["f/y"]
    np.testing.assert_allclose(np.asarray(data["f/y"]), expected, rtol=1e-5, atol=1e-6)


def concats(cell):
    return sum(step.type == "Concat" for step in cell.steps)


def slices(cell):
    return {spec.name: (spec.slice_of.name, spec.slice_offset) for spec in cell.tensors
            if spec.slice_of is not None}


@pytest.mark.parametrize("opt_level", [0, 3])
def test_the_inputs_are_written_into_their_parts(opt_level):
    def body(f, x1, x2):
        both = f.concat([f.tanh(x1), f.sigmoid(x2)], axis=1, name="both")
        f.mul(both, f.const(3.0), name="y")
    flow, cell = compile_cell(body, {"x1": [1, 3, 7], "x2": [1, 5, 7]}, opt_level)
    assert concats(cell) == 0
    parts = slices(cell)
    assert sorted(parts.values()) == [("f/both", 0), ("f/both", 3 * 7 * 4)]
    assert " slice " in str(cell)
    check(flow, cell)


def test_a_chain_of_concatenations_shares_the_last_output():
    """DenseNet's pattern: each concatenation takes all the features before it."""
    def body(f, x):
        x0 = f.tanh(x)
        x1 = f.sigmoid(f.mul(x0, f.const(2.0)))
        c1 = f.concat([x0, x1], axis=1, name="c1")
        x2 = f.exp(f.neg(c1))
        c2 = f.concat([x0, x1, x2], axis=1, name="c2")
        f.mul(c2, f.const(1.5), name="y")
    flow, cell = compile_cell(body, {"x": [1, 4, 6]}, opt_level=0)
    assert concats(cell) == 0
    parts = slices(cell)
    assert parts["f/c1"] == ("f/c2", 0)
    assert sorted(v for k, v in parts.items() if k != "f/c1") == \
        [("f/c2", 0), ("f/c2", 96), ("f/c2", 192)]
    check(flow, cell)


def test_a_concatenation_that_is_an_output_of_the_cell():
    def body(f, x1, x2):
        f.concat([f.tanh(x1), f.exp(x2)], axis=2, name="y")
    flow, cell = compile_cell(body, {"x1": [1, 1, 5], "x2": [1, 1, 12]}, opt_level=0)
    assert concats(cell) == 0
    check(flow, cell)


@pytest.mark.parametrize("case", ["batch of two", "an input of the cell", "an input twice",
                                  "a constant"])
def test_concatenations_that_stay_copies(case):
    shapes = {"x1": [2, 3, 4] if case == "batch of two" else [1, 3, 4], "x2": [1, 3, 4]}
    if case == "batch of two":
        shapes["x2"] = [2, 3, 4]

    def body(f, x1, x2):
        a = f.tanh(x2)
        parts = {"batch of two": [f.exp(x1), a], "an input of the cell": [x1, a],
                 "an input twice": [a, a],
                 "a constant": [f.const(np.ones((1, 3, 4), np.float32)), a]}[case]
        f.mul(f.concat(parts, axis=1), f.const(2.0), name="y")
    flow, cell = compile_cell(body, shapes, opt_level=0)
    assert concats(cell) == 1 and not slices(cell)
    check(flow, cell)


def test_live_parts_keep_their_space_while_other_values_come_and_go():
    """Many short-lived values are made between the parts' producers and the Concat: none
    may be placed over a part already written."""
    def body(f, x):
        parts, value = [], x
        for index in range(6):
            value = f.tanh(f.add(f.mul(value, f.const(0.9)), f.const(0.1 * index)))
            scratch = f.exp(f.neg(f.square(value)))
            parts.append(f.mul(scratch, value))
        f.add(f.concat(parts, axis=1), f.const(1.0), name="y")
    flow, cell = compile_cell(body, {"x": [1, 8, 5]}, opt_level=0)
    assert concats(cell) == 0 and len(slices(cell)) == 6
    check(flow, cell)


def test_a_pickled_network_keeps_its_slices():
    def body(f, x1, x2):
        both = f.concat([f.tanh(x1), f.sigmoid(x2)], axis=1, name="both")
        f.mul(both, f.const(3.0), name="y")
    flow, cell = compile_cell(body, {"x1": [1, 3, 7], "x2": [1, 5, 7]})
    again = pickle.loads(pickle.dumps(cell))
    assert slices(again) == slices(cell) and str(again) == str(cell)
    check(flow, again)
