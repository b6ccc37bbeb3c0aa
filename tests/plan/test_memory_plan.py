"""The instance memory plan: reuse of dead locals, in-place steps, inputs and outputs kept."""

import numpy as np

import myelin
from myelin.plan import memory
from myelin.plan.cell import INPUT, LOCAL, OUTPUT, Step, TensorSpec


class _InPlace:
    def __init__(self, allowed):
        self.allowed = allowed

    def inplace(self, step):
        return self.allowed


def _tensor(name, kind, elements):
    return TensorSpec(name, "float32", (elements,), kind)


def _chain(length, inplace):
    """x -> t0 -> t1 -> ... -> y, each step one element-wise op."""
    x = _tensor("x", INPUT, 16)
    temps = [_tensor(f"t{i}", LOCAL, 16) for i in range(length)]
    y = _tensor("y", OUTPUT, 16)
    values = [x] + temps + [y]
    steps = [Step(f"s{i}", "Exp", [a], [b], {}, kernel=_InPlace([0] if inplace else []))
             for i, (a, b) in enumerate(zip(values, values[1:]))]
    return steps, values


def test_inputs_and_outputs_never_share():
    steps, tensors = _chain(4, inplace=True)
    memory.plan(steps, tensors)
    x, y = tensors[0], tensors[-1]
    offsets = {t.offset for t in tensors[1:-1]}
    assert x.offset not in offsets and y.offset not in offsets
    assert x.offset != y.offset


def test_inplace_chain_uses_one_buffer():
    steps, tensors = _chain(5, inplace=True)
    size, unshared = memory.plan(steps, tensors)
    temps = tensors[1:-1]
    assert len({t.offset for t in temps}) == 1
    assert all(t.shares is temps[i] for i, t in enumerate(temps[1:]))
    assert size == 3 * 64 and unshared == 7 * 64


def test_without_inplace_two_buffers_alternate():
    steps, tensors = _chain(6, inplace=False)
    memory.plan(steps, tensors)
    temps = tensors[1:-1]
    assert len({t.offset for t in temps}) == 2
    for a, b in zip(temps, temps[1:]):
        assert a.offset != b.offset  # a value and the next one are live together


def test_no_reuse_option_gives_every_tensor_its_own_space():
    steps, tensors = _chain(4, inplace=True)
    size, unshared = memory.plan(steps, tensors, reuse=False)
    assert len({t.offset for t in tensors}) == len(tensors)
    assert size == unshared


def test_live_values_never_overlap_in_a_compiled_network():
    """In a real cell, tensors whose live ranges overlap never overlap in memory."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [8, 33])
    a = f.exp(x)
    b = f.tanh(x)
    c = f.sum(f.mul(a, b), axis=1, keepdims=True)
    f.sub(f.add(a, c), b, name="y")
    cell = myelin.Compiler().compile(flow).cell("f")
    specs = [s for s in cell.tensors if s.view_of is None]
    for s in specs:
        for t in specs:
            if s is t or s.shares is t or t.shares is s:
                continue
            live_together = s.first <= t.last and t.first <= s.last
            overlap = s.offset < t.offset + t.size and t.offset < s.offset + s.size
            assert not (live_together and overlap), (s.name, t.name)
    data = cell.instance()
    value = np.random.default_rng().random((8, 33)).astype(np.float32)
    data[x] = value
    data.compute()
    expected = myelin.reference.run(flow, "f", {x: value})["f/y"]
    np.testing.assert_allclose(np.asarray(data["f/y"]), expected, rtol=1e-5, atol=1e-6)


def test_a_value_made_before_a_loop_lives_through_it():
    """In a cell looping from step 1, t0 (made by step 0, which runs once) is read in every
    round: its space is never given to a later local, as it would be without the loop."""
    steps, tensors = _chain(4, inplace=False)
    memory.plan(steps, tensors, loop_start=1)
    t0 = tensors[1]
    assert t0.last == len(steps)
    assert all(t.offset != t0.offset for t in tensors[2:-1])
    steps, tensors = _chain(4, inplace=False)
    memory.plan(steps, tensors)
    assert any(t.offset == tensors[1].offset for t in tensors[2:-1])
