"""The Builder: naming, constants, the guide's example, composite functions (softmax,
log_softmax, layer_norm, norm, normalize) checked against NumPy, and custom ops."""

import array

import numpy as np
import pytest

import myelin
from myelin import ops, reference
from myelin.builder import verify


@pytest.fixture
def f():
    return myelin.Builder(myelin.Flow(), "f")


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_guide_example():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    W = f.array("W", np.random.rand(64, 256).astype(np.float32))
    b = f.array("b", np.random.rand(256).astype(np.float32))
    x = f.var("x", myelin.DT_FLOAT, [1, 64])
    y = f.softmax(f.relu(f.add(f.matmul(x, W), b)), name="y")

    assert y.name == "f/y" and y.shape == (1, 256) and y.dtype == "float32"
    assert [op.type for op in flow.funcs["f"].ops] == [
        "MatMul", "Add", "Relu", "Max", "Sub", "Exp", "Sum", "Reciprocal", "Mul"]
    x_value = np.random.default_rng().uniform(-1, 1, (1, 64)).astype(np.float32)
    result = reference.run(flow, "f", {"f/x": x_value})
    assert list(result) == ["f/y"]
    np.testing.assert_allclose(result["f/y"].sum(axis=-1), 1.0, rtol=1e-14)
    expected = softmax(np.maximum(x_value.astype(np.float64) @ W.data + b.data, 0))
    np.testing.assert_allclose(result["f/y"], expected, rtol=1e-12)


def test_names(f):
    flow = f.flow
    x = f.var("x", myelin.DT_FLOAT, [2, 3])
    assert x.name == "f/x" and x.shape == (2, 3) and flow.vars["f/x"] is x
    a, b = f.add(x, x), f.add(x, x)
    assert (a.name, b.name) == ("f/Add:0", "f/Add_1:0")
    assert a.producer.name == "f/Add" and b.producer.name == "f/Add_1"
    assert f.exp(x, name="e").name == "f/e"
    assert f.opname("Add") == "f/Add_2" and f.varname("x") == "f/x_1"
    assert [p.name for p in f.split(x, 3, 1, name="parts")] == ["f/parts:0", "f/parts:1",
                                                                "f/parts:2"]
    assert f.rename(a, "sum").name == "f/sum" and flow.vars["f/sum"] is a
    assert f.cnx("state", [x, a]).name == "f/state"
    assert f.assign(x, a, name="update").name == "f/update"
    with pytest.raises(myelin.FlowError, match="f/x already exists"):
        f.var("x")
    with pytest.raises(myelin.FlowError, match="f/e already exists"):
        f.exp(x, name="e")


def test_failed_helpers_leave_the_flow_as_it_was(f):
    x, gamma = f.var("x", "float32", [3, 4]), f.var("gamma", "float32", [5])
    before = (list(f.flow.ops), list(f.flow.vars))
    with pytest.raises(TypeError, match="name"):
        f.softmax(x, -1)
    with pytest.raises(myelin.ShapeError, match="f/Mul"):
        f.layer_norm(x, gamma)
    with pytest.raises(myelin.ShapeError, match="f/Reshape"):
        f.reshape(x, [5, -1])
    with pytest.raises(myelin.ShapeError, match="f/Concat"):
        f.concat([x, x], axis=2)
    assert (list(f.flow.ops), list(f.flow.vars)) == before
    assert verify.check(f.flow) is None


def test_builder_on_a_function_object():
    flow = myelin.Flow()
    g = myelin.Builder(flow, flow.func("g"))
    assert g.var("x").name == "g/x" and g.func is flow.funcs["g"]


def test_var_defaults_and_flags(f):
    x = f.var("x")
    assert x.dtype == "float32" and x.shape == () and not (x.is_input or x.is_output)
    y = f.neg(x)
    f.flow.infer_inputs_and_outputs()
    assert x.is_input and y.is_output


def test_constants(f):
    c = [f.const(2.5), f.const(3), f.const(True), f.const([1, 2, 3]), f.const([1.0, 2.0]),
         f.const(np.arange(6, dtype=np.int64), shape=[2, 3]), f.const(1, "float64"),
         f.const(array.array("d", [1.0, 2.0]))]
    assert [v.name for v in c[:3]] == ["f/const", "f/const_1", "f/const_2"]
    assert [(v.dtype, v.shape) for v in c] == [
        ("float32", ()), ("int32", ()), ("bool", ()), ("int32", (3,)), ("float32", (2,)),
        ("int64", (2, 3)), ("float64", ()), ("float64", (2,))]
    assert all(v.constant for v in c)


def test_array_from_buffer(f):
    w = f.array("w", array.array("i", [1, 2, 3]))
    assert (w.name, w.dtype, w.shape, w.data.tolist()) == ("f/w", "int32", (3,), [1, 2, 3])
    m = np.random.default_rng().random((3, 4)).astype(np.float32)
    assert f.array("m", m).data is m  # no copy
    assert f.array("s", np.float64(2.0)).shape == ()


def test_literal_operands_take_the_variable_type(f):
    x = f.var("x", "float64", [3])
    i = f.var("i", "int16", [3])
    assert f.mul(x, 2).producer.inputs[1].dtype == "float64"
    assert f.add(i, 1).producer.inputs[1].dtype == "int16"
    with pytest.raises(myelin.ShapeError):
        f.add(i, 0.5)
    value = np.random.default_rng().uniform(-1, 1, 3)
    y = f.sub(f.mul(x, 2), 0.5)
    np.testing.assert_allclose(reference.run(f.flow, "f", {x: value}, [y])[y.name],
                               [2 * v - 0.5 for v in value], rtol=1e-15)


def test_reduce_sets_only_given_attributes(f):
    x = f.var("x", "float32", [3, 4])
    assert dict(f.sum(x).producer.attrs) == {}
    assert dict(f.max(x, [0, 1], True).producer.attrs) == {"axis": "[0,1]", "keepdims": "1"}
    assert dict(f.count(f.greater(x, 0.0), 1, name="n").producer.attrs) == {
        "axis": "1", "dtype": "float32"}
    assert f.mean(x, 0).producer.type == "Mean"


def run_unary(f, method, value, **kwargs):
    x = f.var("x", "float64", value.shape)
    y = getattr(f, method)(x, **kwargs)
    assert y.shape == value.shape
    return reference.run(f.flow, "f", {x: value})[y.name]


SHAPES = [(1, 1), (3, 7), (2, 3, 33), (5,)]


@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_softmax_and_log_softmax(f, shape, axis):
    value = np.random.default_rng().normal(0, 3, shape)
    np.testing.assert_allclose(run_unary(f, "softmax", value, axis=axis),
                               softmax(value, axis), rtol=1e-12)
    g = myelin.Builder(myelin.Flow(), "f")
    shifted = value - value.max(axis=axis, keepdims=True)
    expected = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    np.testing.assert_allclose(run_unary(g, "log_softmax", value, axis=axis), expected,
                               rtol=1e-12)


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layer_norm(f, shape, affine):
    rng = np.random.default_rng()
    value = rng.normal(1, 2, shape)
    gamma = beta = None
    expected = (value - value.mean(-1, keepdims=True)) / np.sqrt(value.var(-1, keepdims=True)
                                                                 + 1e-5)
    if affine:
        gamma_value, beta_value = rng.uniform(0.5, 2, shape[-1]), rng.normal(0, 1, shape[-1])
        gamma, beta = f.array("gamma", gamma_value), f.array("beta", beta_value)
        expected = expected * gamma_value + beta_value
    result = run_unary(f, "layer_norm", value, gamma=gamma, beta=beta, name="ln")
    assert "f/ln" in f.flow.vars
    np.testing.assert_allclose(result, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_norm_and_normalize(f, shape):
    value = np.random.default_rng().uniform(0.1, 2, shape)
    x = f.var("x", "float64", shape)
    n, m = f.norm(x), f.normalize(x)
    assert n.shape == () and m.shape == shape
    result = reference.run(f.flow, "f", {x: value})
    np.testing.assert_allclose(result[n.name], np.sqrt((value ** 2).sum()), rtol=1e-13)
    np.testing.assert_allclose(result[m.name], value / value.sum(), rtol=1e-13)


def test_unknown_op_type_uses_slings_generic_rule(f):
    x, y = f.var("x", "int8", [3]), f.var("y", "float32", [2, 3])
    z = f.op("Mystery", [x, y])
    assert (z.dtype, z.shape) == ("int8", (2, 3))


@pytest.fixture
def scale_shift():
    """A custom op type registered from user code: x * scale + shift (attribute)."""
    def infer(op):
        x, scale = op.inputs
        return [ops.TensorType(x.dtype, ops.broadcast_shapes(op, x.shape, scale.shape))]

    def compute(op, inputs):
        return [inputs[0] * inputs[1] + ops.attribute(op, "shift")]

    ops.register(ops.OpDef("TestScaleShift", ops.Kind.BROADCAST, infer, compute,
                           attrs={"shift": 0.0}, inputs=(2, 2), doc="x * scale + shift"))
    yield "TestScaleShift"
    ops.unregister("TestScaleShift")


def test_custom_op(f, scale_shift):
    rng = np.random.default_rng()
    x, s = f.var("x", "float64", [4, 3]), f.var("s", "float64", [3])
    y = f.op(scale_shift, [x, s], name="y", attrs={"shift": 1.5})
    z = f.op(scale_shift, [y, s])
    assert y.name == "f/y" and y.shape == (4, 3) and ops.lookup(scale_shift).doc
    x_value, s_value = rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, 3)
    result = reference.run(f.flow, "f", {x: x_value, s: s_value}, [y, z])
    np.testing.assert_allclose(result["f/y"], x_value * s_value + 1.5, rtol=1e-15)
    np.testing.assert_allclose(result[z.name], (x_value * s_value + 1.5) * s_value, rtol=1e-15)
    with pytest.raises(myelin.ShapeError, match="TestScaleShift"):
        f.op(scale_shift, [x, f.var("t", "float64", [4])])
