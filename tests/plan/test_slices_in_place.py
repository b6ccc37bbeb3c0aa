"""Parts in place (myelin.plan.slices): a Gather of one constant index, a Split or a Slice
whose outputs are runs of their input's bytes becomes slices of the input, with no step;
elsewhere (a part that is not one run, an input that is a global, an output of the cell, an
index outside the axis) the step copies as before."""

import numpy as np
import pytest

import myelin
from jitcheck import run_and_compare
from myelin.errors import InputError


def flow_of(body, shapes):
    """A flow with function f of inputs ``shapes`` (by name) and ``body(f, *inputs)``."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    inputs = [f.var(name, myelin.DT_FLOAT, shape) for name, shape in shapes.items()]
    body(f, *inputs)
    return flow, inputs


def checked_cell(body, shapes):
    """Cell f compiled from ``body`` (see flow_of), its outputs checked against the float64
    reference on random inputs."""
    flow, inputs = flow_of(body, shapes)
    rng = np.random.default_rng(0)
    feeds = {var: rng.standard_normal(var.shape).astype(np.float32) for var in inputs}
    return run_and_compare(flow, {"f": feeds}, 1e-5, cache=False).cell("f")


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
    cell = checked_cell(body, {"x": [4, 4]})
    assert "Gather" not in types(cell)
    assert slices(cell) == {"f/q": ("f/qkv", 0), "f/k": ("f/qkv", 80), "f/v": ("f/qkv", 160)}


@pytest.mark.parametrize("shape, axis, folded", [
    ([1, 12], 1, True), ([2, 1, 6], 0, True), ([2, 12], 1, False)])
def test_splits_whose_parts_are_runs(shape, axis, folded):
    def body(f, x):
        parts = f.split(f.tanh(x), 3 if shape[axis] % 3 == 0 else 2, axis)
        f.concat([f.exp(parts[-1])] + [f.neg(p) for p in parts[:-1]], axis=axis, name="y")
    cell = checked_cell(body, {"x": shape})
    assert ("Split" not in types(cell)) == folded


@pytest.mark.parametrize("shape, begin, size, folded", [
    ([1, 8], [0, 2], [1, 3], True), ([3, 4, 2], [1, 0, 0], [2, 4, 2], True),
    ([2, 8], [0, 2], [2, 3], False), ([3, 4, 2], [1, 1, 0], [2, 2, 2], False)])
def test_slices_that_are_runs(shape, begin, size, folded):
    def body(f, x):
        f.exp(f.slice(f.tanh(x), begin, size), name="y")
    cell = checked_cell(body, {"x": shape})
    assert ("Slice" not in types(cell)) == folded


def test_steps_that_stay():
    """A Gather of a global, a Split whose part is an output of the cell."""
    def body(f, x):
        table = f.array("table", np.arange(12, dtype=np.float32).reshape(3, 4))
        table.learnable = True
        row = f.gather(table, f.const(np.int64(1)))
        first, second = f.split(f.add(x, row), 2, 1)
        f.identity(second, name="second")
        f.mul(first, f.const(2.0), name="y")
    cell = checked_cell(body, {"x": [1, 4]})
    assert types(cell).count("Gather") == 1 and types(cell).count("Split") == 1


@pytest.mark.parametrize("index", [3, -1])
def test_an_index_outside_the_axis_is_the_gathers_error(index):
    def body(f, x):
        f.exp(f.gather(f.tanh(x), f.const(np.int64(index))), name="y")
    flow, _ = flow_of(body, {"x": [3, 4]})
    cell = myelin.Compiler(cache=False).compile(flow).cell("f")
    assert "Gather" in types(cell)
    data = cell.instance()
    with pytest.raises(InputError):
        data.compute()
