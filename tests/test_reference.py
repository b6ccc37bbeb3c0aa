"""The reference interpreter: input validation, unsupported ops, default and requested outputs,
freeing values after their last use, Assign and learnable state, precision modes."""

import weakref

import numpy as np
import pytest

import myelin
from myelin import ops, reference
from myelin.flow.graph import VarFlags


@pytest.fixture
def f():
    return myelin.Builder(myelin.Flow(), "f")


def random(shape, dtype=np.float64):
    return np.random.default_rng().uniform(-2, 2, shape).astype(dtype)


def test_missing_inputs_are_all_named(f):
    x, y, z = f.var("x", "float32", [3]), f.var("y", "float32", [3]), f.var("z", "float32", [3])
    f.add(f.mul(x, y), z)
    with pytest.raises(myelin.InputError, match="needs inputs f/y, f/z"):
        reference.run(f.flow, "f", {x: random(3)})


def test_wrong_shape_type_or_key(f):
    x = f.var("x", "float32", [2, 3])
    n = f.var("n", "int32", [3])
    y = f.add(f.exp(x), f.cast(n, "float32"))
    with pytest.raises(myelin.InputError, match=r"f/x has shape \[3, 2\], expected \[2, 3\]"):
        reference.run(f.flow, "f", {x: random((3, 2)), n: np.arange(3)})
    with pytest.raises(myelin.InputError, match=r"f/n has type float64, expected int32"):
        reference.run(f.flow, "f", {x: random((2, 3)), n: random(3)})
    with pytest.raises(myelin.InputError, match="no variable named f/nothing"):
        reference.run(f.flow, "f", {"f/nothing": random(3)})
    with pytest.raises(myelin.InputError, match=f"{y.name} is not an input"):
        reference.run(f.flow, "f", {y: random((2, 3))})


def test_dynamic_dimension_accepts_any_size(f):
    x = f.var("x", "float32", [-1, 4])
    y = f.sum(f.square(x), 1)
    assert y.shape == (-1,)
    for rows in (1, 3, 33):
        value = random((rows, 4), np.float32)
        result = reference.run(f.flow, "f", {"f/x": value})[y.name]
        np.testing.assert_allclose(result, (value.astype(np.float64) ** 2).sum(1), rtol=1e-14)


def test_unsupported_ops_are_all_listed_before_running(f):
    params, indices = f.var("params", "float32", [4, 2]), f.var("indices", "int32", [1])
    g = f.gather(params, indices)  # would raise InputError at run time (index 7)
    a = f.op("Frobnicate", [g])
    b = f.op("Twiddle", [a])
    c = f.op("Frobnicate", [b])
    with pytest.raises(myelin.UnsupportedOpError) as info:
        reference.run(f.flow, "f", {params: random((4, 2)), indices: np.array([7])})
    assert info.value.ops == [a.producer.name, b.producer.name, c.producer.name]
    message = str(info.value)
    assert "Frobnicate (f/Frobnicate, f/Frobnicate_1)" in message and "Twiddle" in message


def test_default_outputs_without_changing_the_flow(f):
    x = f.var("x", "float64", [3])
    h = f.exp(x)
    y, z = f.neg(h, name="y"), f.log(h, name="z")
    result = reference.run(f.flow, f.func, {x: random(3)})
    assert sorted(result) == ["f/y", "f/z"]
    assert all(v.flags == VarFlags.NONE for v in f.flow.vars.values())
    f.flow.infer_inputs_and_outputs()
    assert [v.name for v in f.func.outputs()] == sorted(result)
    assert y.is_output and z.is_output and not h.is_output


def test_output_attribute_override(f):
    x = f.var("x", "float64", [3])
    h = f.exp(x)
    y = f.neg(h)
    h.producer.attrs["output"] = True
    assert list(reference.run(f.flow, "f", {x: random(3)})) == [h.name, y.name]
    h.producer.attrs["output"] = False
    assert list(reference.run(f.flow, "f", {x: random(3)})) == [y.name]


def test_requested_outputs_and_aliases(f):
    x = f.var("x", "float64", [3])
    h = f.exp(x)
    f.neg(h)
    f.flow.add_alias(h, "hidden")
    value = random(3)
    result = reference.run(f.flow, "f", {x: value}, outputs=["hidden", x])
    assert list(result) == [h.name, "f/x"]
    np.testing.assert_array_equal(result[h.name], np.exp(value))
    np.testing.assert_array_equal(result["f/x"], value)
    with pytest.raises(myelin.InputError, match="not computed"):
        reference.run(f.flow, "f", {x: value}, outputs=[f.var("other")])


def test_only_needed_ops_run(f):
    x, unused = f.var("x", "float64", [3]), f.var("unused", "float64", [3])
    h = f.exp(x)
    f.neg(unused)
    value = random(3)
    assert list(reference.run(f.flow, "f", {x: value}, outputs=[h])) == [h.name]
    assert reference.run(f.flow, "f", {unused: value}, outputs=[unused])["f/unused"] is not value
    with pytest.raises(myelin.InputError, match="needs inputs f/unused"):
        reference.run(f.flow, "f", {x: value})


def test_values_are_freed_after_their_last_use(f):
    """Probe sees its input; Check runs later and finds that value already released."""
    seen = {}

    def probe(op, inputs):
        seen["ref"] = weakref.ref(inputs[0])
        return [inputs[0] + 1]

    def check(op, inputs):
        seen["alive"] = seen["ref"]() is not None
        return [inputs[0] * 2]

    same = lambda op: [ops.TensorType(op.inputs[0].dtype, op.inputs[0].shape)]  # noqa: E731
    for name, fn in [("TestProbe", probe), ("TestCheck", check)]:
        ops.register(ops.OpDef(name, ops.Kind.ELEMWISE, same, fn))
    try:
        x = f.var("x", "float64", [5])
        kept = f.exp(x)
        t = f.op("TestProbe", [f.exp(x)])
        y = f.op("TestCheck", [t])
        value = random(5)
        result = reference.run(f.flow, "f", {x: value}, outputs=[y, kept])
        assert seen["alive"] is False
        np.testing.assert_allclose(result[y.name], (np.exp(value) + 1) * 2, rtol=1e-15)
    finally:
        ops.unregister("TestProbe")
        ops.unregister("TestCheck")


def test_assign_updates_learnable_state_across_runs(f):
    w = f.var("w", "float32", [2, 3])
    w.learnable = True
    x = f.var("x", "float32", [3])
    f.assign(w, f.add(w, x))
    read = myelin.Builder(f.flow, "read")
    y = read.mul(w, 2.0)
    interpreter = reference.Interpreter(f.flow)
    x_value = random(3, np.float32)
    assert interpreter.run("f", {x: x_value}) == {}
    interpreter.run("f", {x: x_value})
    expected = np.broadcast_to(2 * x_value.astype(np.float64), (2, 3))
    np.testing.assert_allclose(interpreter.state["f/w"], expected, rtol=1e-15)
    np.testing.assert_allclose(interpreter.run("read", {})[y.name], 2 * expected, rtol=1e-15)
    interpreter.run("f", {x: x_value, w: np.zeros((2, 3), np.float32)})  # a given value wins
    np.testing.assert_allclose(interpreter.state["f/w"], expected / 2, rtol=1e-15)


def test_assign_to_a_constant_does_not_change_the_flow(f):
    c = f.array("c", np.ones(3))
    f.assign(c, f.var("x", "float64", [3]))
    reference.run(f.flow, "f", {"f/x": random(3)})
    np.testing.assert_array_equal(c.data, np.ones(3))


def test_assign_shape_errors(f):
    target = f.var("t", "float32", [3])
    with pytest.raises(myelin.ShapeError, match=r"f/Assign.*\[3\] and \[4\]"):
        f.assign(target, f.var("v", "float32", [4]))
    with pytest.raises(myelin.ShapeError, match=r"f/Assign.*\[2, 3\].*target shape \[3\]"):
        f.assign(target, f.var("w", "float32", [2, 3]))


def test_float32_is_computed_in_float64_unless_native(f):
    x = f.var("x", "float32", [1000])
    y = f.sum(f.mul(x, 1.0 / 3.0))
    value = random(1000, np.float32)
    wide = reference.run(f.flow, "f", {x: value})[y.name]
    assert wide.dtype == np.float64
    exact = np.sum(value.astype(np.float64) * np.float64(np.float32(1.0 / 3.0)))
    np.testing.assert_allclose(wide, exact, rtol=1e-15)
    native = reference.run(f.flow, "f", {x: value}, precision="native")[y.name]
    assert native.dtype == np.float32
    np.testing.assert_allclose(native, exact, rtol=1e-5)
    with pytest.raises(ValueError, match="precision"):
        reference.run(f.flow, "f", {x: value}, precision="float16")


def test_unknown_function(f):
    with pytest.raises(myelin.FlowError, match="no function named g"):
        reference.run(f.flow, "g", {})


def test_reference_with_a_wrong_shape_is_caught(f):
    ops.register(ops.OpDef("TestBadShape", ops.Kind.OPAQUE,
                           lambda op: [ops.TensorType("float64", (2,))],
                           lambda op, inputs: [np.zeros(3)]))
    try:
        f.op("TestBadShape", [f.var("x", "float64", [3])])
        with pytest.raises(myelin.ShapeError, match=r"TestBadShape.*\[3\].*declared \[2\]"):
            reference.run(f.flow, "f", {"f/x": random(3)})
    finally:
        ops.unregister("TestBadShape")


def test_every_registered_op_has_a_reference_and_doc():
    for optype in ops.types():
        opdef = ops.lookup(optype)
        assert callable(opdef.reference) and callable(opdef.infer) and opdef.doc, optype
        assert isinstance(opdef.kind, ops.Kind)
