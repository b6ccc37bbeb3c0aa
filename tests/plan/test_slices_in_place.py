"""Parts in place (myelin.plan.slices): a Gather of one constant index, a Split or a Slice
whose outputs are runs of their input's bytes becomes slices of the input, with no step;
elsewhere (a part that is not one run, an input that is a global, an output of the cell, an
index outside the axis) the step copies as before."""

import numpy as np
import pytest

import myelin
from myelin.errors import InputError


def compile_cell(body, shapes):
    """Cell f of a flow with inputs ``shapes`` (by name) and ``body(f, *inputs)`` making y."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    inputs = [f.var(name, myelin.DT_FLOAT, shape) for name, shape in shapes.items()]
    body(f, *inputs)
    return flow, myelin.Compiler(cache=False).compile(flow).cell("f")


def check(flow, cell):
    """Compute y on random inputs; compare it with the float64 reference."""
    rng = np.random.default_rng(0)
    data, feeds = cell.instance(), {}
    for name in cell.inputs:
        feeds[name] = rng.standard_normal(cell.spec(name).shape).astype(np.float32)
        data[name] = feeds[name]
    data.compute()
    expected = myelin.reference.run(flow, "f", feeds)["f/y"]
    np.testing.assert_allclose(np.asarray(data["f/y"]), expected, rtol=1e-5, atol=1e-6)


def types(cell):
    return [step.type for step in cell.steps]


def slices(cell):
    return {spec.name: (spec.slice_of.name, spec.slice_offset) for spec in cell.tensors
            if spec.slice_of is not None}


def test_query_key_and_value_are_slices_of_their_product():
    """PyTorch's export of attention: Gather 0, 1 and 2 of one product's [3, ...] output;
    the product's storage lives while the last slice is read."""
    def body(f, x):
        qkv = f.tanh(f.reshape(f.matmul(x, f.const(np.ones((4, 15), np.float32))), [3, 4, 5]),
                     name="qkv")
        q, k, v = (f.gather(qkv, f.const(np.int64(i)), name=n)
                   for i, n in ((0, "q"), (1, "k"), (2, "v")))
        scores = f.softmax(f.matmul(q, k, transpose_b=True))
        later = f.exp(f.sigmoid(f.mul(scores, f.const(2.0))))       # (space to reuse)
        f.add(f.matmul(later, v), f.const(1.0), name="y")
    flow, cell = compile_cell(body, {"x": [4, 4]})
    assert "Gather" not in types(cell)
    assert slices(cell) == {"f/q": ("f/qkv", 0), "f/k": ("f/qkv", 80), "f/v": ("f/qkv", 160)}
    check(flow, cell)


@pytest.mark.parametrize("shape, axis, folded", [
    ([1, 12], 1, True), ([2, 1, 6], 0, True), ([2, 12], 1, False)])
def test_splits_whose_parts_are_runs(shape, axis, folded):
    def body(f, x):
        parts = f.split(f.tanh(x), 3 if shape[axis] % 3 == 0 else 2, axis)
        f.concat([f.exp(parts[-1])] + [f.neg(p) for p in parts[:-1]], axis=axis, name="y")
    flow, cell = compile_cell(body, {"x": shape})
    assert ("Split" not in types(cell)) == folded
    check(flow, cell)


@pytest.mark.parametrize("shape, begin, size, folded", [
    ([1, 8], [0, 2], [1, 3], True), ([3, 4, 2], [1, 0, 0], [2, 4, 2], True),
    ([2, 8], [0, 2], [2, 3], False), ([3, 4, 2], [1, 1, 0], [2, 2, 2], False)])
def test_slices_that_are_runs(shape, begin, size, folded):
    def body(f, x):
        f.exp(f.slice(f.tanh(x), begin, size), name="y")
    flow, cell = compile_cell(body, {"x": shape})
    assert ("Slice" not in types(cell)) == folded
    check(flow, cell)


def test_steps_that_stay():
    """A Gather of a global, a Split whose part is an output of the cell."""
    def body(f, x):
        table = f.array("table", np.arange(12, dtype=np.float32).reshape(3, 4))
        table.learnable = True
        row = f.gather(table, f.const(np.int64(1)))
        first, second = f.split(f.add(x, row), 2, 1)
        f.identity(second, name="second")
        f.mul(first, f.const(2.0), name="y")
    flow, cell = compile_cell(body, {"x": [1, 4]})
    assert types(cell).count("Gather") == 1 and types(cell).count("Split") == 1
    check(flow, cell)


@pytest.mark.parametrize("index", [3, -1])
def test_an_index_outside_the_axis_is_the_gathers_error(index):
    def body(f, x):
        f.exp(f.gather(f.tanh(x), f.const(np.int64(index))), name="y")
    flow, cell = compile_cell(body, {"x": [3, 4]})
    assert "Gather" in types(cell)
    data = cell.instance()
    with pytest.raises(InputError):
        data.compute()
