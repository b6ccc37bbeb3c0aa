"""The gradient pass: the gradient function's variables and flags, errors, NOGRADIENT,
accumulation of learnable gradients, binding forward values, .flow files, and a two-layer MLP
whose compiled gradients match PyTorch's autograd."""

import numpy as np
import pytest
import torch

import myelin
from myelin import autodiff
from jitcheck import relative_error


def _affine_flow():
    """f: y = sum(tanh(x W + b) * x2) with learnable W, constant b, inputs x and x2."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [3, 5])
    x2 = f.var("x2", "float32", [3, 4])
    w = f.var("W", "float32", [5, 4])
    w.learnable = True
    b = f.array("b", np.linspace(-1, 1, 4).astype(np.float32))
    f.sum(f.mul(f.tanh(f.add(f.matmul(x, w), b)), x2), name="y")
    return flow


def test_gradient_function_variables_and_flags():
    flow = _affine_flow()
    grad = myelin.gradient(flow, "f")
    assert grad is flow.funcs["gradients/f"] and grad.training
    d_y, d_x, d_x2, d_w = (flow.vars[f"gradients/f/d_{n}"] for n in ("y", "x", "x2", "W"))
    assert d_y.is_input and not d_y.is_output and d_y.shape == ()
    assert d_x.is_output and not d_x.is_input and d_x.shape == (3, 5)
    assert d_x2.is_output and d_x2.shape == (3, 4)
    assert d_w.is_input and d_w.is_output and d_w.shape == (5, 4)   # the accumulator
    assert "gradients/f/d_b" not in flow.vars                         # a constant
    links = {ref.name: var.name for ref, var in autodiff.primals(grad).items()}
    assert links == {"gradients/f/primal/x": "f/x", "gradients/f/primal/x2": "f/x2",
                     "gradients/f/primal/Tanh:0": "f/Tanh:0"}
    for name in links:
        assert flow.vars[name].ref and flow.vars[name].is_input
    assert flow.vars["f/Tanh:0"].is_output     # kept for the gradient by memory planning


def test_names():
    assert autodiff.gradient_function_name("f") == "gradients/f"
    assert autodiff.adjoint_name("f", "f/x") == "gradients/f/d_x"
    assert autodiff.adjoint_name("f", "W") == "gradients/f/d_W"
    assert autodiff.primal_name("f", "f/Exp:0") == "gradients/f/primal/Exp:0"


def test_bad_function_raises_flow_error():
    flow = _affine_flow()
    with pytest.raises(myelin.FlowError, match="no function named g"):
        myelin.gradient(flow, "g")
    assert "g" not in flow.funcs
    with pytest.raises(myelin.FlowError, match="not a function of this flow"):
        myelin.gradient(flow, _affine_flow().funcs["f"])
    myelin.gradient(flow, flow.funcs["f"])
    with pytest.raises(myelin.FlowError, match="already has a gradient function"):
        myelin.gradient(flow, "f")


def test_ops_without_rules_are_listed_and_the_flow_is_unchanged():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [4, 3])
    pooled = f.gather_max(f.exp(x), f.const([0, 2], "int32"))
    f.add(f.product(x, 0), f.product(pooled, 0), name="y")
    f.argmax(x, name="best")                  # no rule, but its output is not differentiable
    sizes = len(flow.vars), len(flow.ops), len(flow.funcs)
    with pytest.raises(myelin.UnsupportedOpError) as caught:
        myelin.gradient(flow, "f")
    assert sorted(caught.value.ops) == ["f/GatherMax", "f/Product", "f/Product_1"]
    assert "GatherMax (f/GatherMax)" in str(caught.value)
    assert "Product (f/Product, f/Product_1)" in str(caught.value)
    assert (len(flow.vars), len(flow.ops), len(flow.funcs)) == sizes


def test_rule_that_cannot_differentiate_a_configuration_raises():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [3, 4])
    f.op("Pad", [x], name="y", attrs={"pads": [1, 1, 0, 0], "mode": "reflect"})
    with pytest.raises(myelin.UnsupportedOpError, match=r"f/Pad \(Pad\): no gradient for mode "
                                                        r"reflect") as caught:
        myelin.gradient(flow, "f")
    assert caught.value.ops == ["f/Pad"]
    assert "gradients/f" not in flow.funcs


def test_nogradient_variables_and_ops_stop_gradients():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x, c, z = (f.var(n, "float64", [5]) for n in ("x", "c", "z"))
    c.nogradient = True
    stopped = f.exp(x)
    stopped.producer.nogradient = True
    f.add(f.add(f.mul(x, c), f.mul(stopped, z)), f.sin(x), name="y")
    myelin.gradient(flow, "f")
    assert "gradients/f/d_c" not in flow.vars
    rng = np.random.default_rng()
    xv, cv, zv, dy = (rng.uniform(-1, 1, 5) for _ in range(4))
    grads = autodiff.run_reference(flow, "f", {"f/x": xv, "f/c": cv, "f/z": zv},
                                   {"gradients/f/d_y": dy})
    np.testing.assert_allclose(grads["gradients/f/d_x"], dy * (cv + np.cos(xv)))  # no exp term
    np.testing.assert_allclose(grads["gradients/f/d_z"], dy * np.exp(xv))


def test_outputs_and_inputs_off_the_gradient_paths():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x, unused = f.var("x", "float64", [3]), f.var("u", "float64", [3])
    f.square(x, name="y")
    f.floor(x, name="steps")                       # zero gradient: no adjoint input
    f.add(f.const(np.ones(3)), 1.0, name="k")      # depends on no input
    f.cast(unused, "int32", name="n")
    myelin.gradient(flow, "f")
    assert "gradients/f/d_y" in flow.vars
    for name in ("gradients/f/d_steps", "gradients/f/d_k", "gradients/f/d_n"):
        assert name not in flow.vars
    grads = autodiff.run_reference(flow, "f", {"f/x": [1.0, 2.0, 3.0], "f/u": np.ones(3)},
                                   {"gradients/f/d_y": np.ones(3)})
    np.testing.assert_array_equal(grads["gradients/f/d_x"], [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(grads["gradients/f/d_u"], np.zeros(3))


def _compiled_affine(rng, accumulate=True):
    flow = _affine_flow()
    myelin.gradient(flow, "f", accumulate)
    net = myelin.Compiler().compile(flow)
    values = {"f/x": rng.standard_normal((3, 5)).astype(np.float32),
              "f/x2": rng.standard_normal((3, 4)).astype(np.float32)}
    weights = rng.standard_normal((5, 4)).astype(np.float32)
    net["f/W"] = weights
    forward = net.cell("f").instance()
    for name, value in values.items():
        forward[name] = value
    forward.compute()
    expected = autodiff.run_reference(flow, "f", {**values, "f/W": weights},
                                      {"gradients/f/d_y": np.float32(1.5)})
    return net, forward, expected


def test_learnable_gradients_accumulate_until_clear():
    net, forward, expected = _compiled_affine(np.random.default_rng())
    grad = net.cell("gradients/f").instance()
    assert "gradients/f/d_W" in grad.cell.outputs
    autodiff.bind_primal(grad, forward)
    for calls in (1, 2, 3):
        grad["gradients/f/d_y"] = 1.5
        grad.compute()
        assert relative_error(grad.array("gradients/f/d_W"),
                              calls * expected["gradients/f/d_W"]) < 1e-5
        assert relative_error(grad.array("gradients/f/d_x"), expected["gradients/f/d_x"]) < 1e-5
    grad.clear()
    assert not grad.array("gradients/f/d_W").any()
    grad["gradients/f/d_y"] = 1.5
    grad.compute()                                    # the references stay bound
    assert relative_error(grad.array("gradients/f/d_W"), expected["gradients/f/d_W"]) < 1e-5


def test_learnable_gradients_written_afresh_without_accumulate():
    net, forward, expected = _compiled_affine(np.random.default_rng(), accumulate=False)
    grad = net.cell("gradients/f").instance()
    assert "gradients/f/d_W" in grad.cell.outputs
    assert "gradients/f/d_W" not in grad.cell.inputs
    autodiff.bind_primal(grad, forward)
    for _ in range(3):
        grad["gradients/f/d_y"] = 1.5
        grad.compute()
        assert relative_error(grad.array("gradients/f/d_W"), expected["gradients/f/d_W"]) < 1e-5


def test_bind_primal_reads_the_forward_instance_in_place():
    rng = np.random.default_rng()
    net, forward, _ = _compiled_affine(rng)
    grad = net.cell("gradients/f").instance()
    grad["gradients/f/d_y"] = 1.0
    with pytest.raises(myelin.InputError, match="not bound"):
        grad.compute()
    autodiff.bind_primal(grad, forward)
    forward["f/x2"] = np.zeros((3, 4), np.float32)    # seen by the gradient without rebinding
    forward.compute()
    grad.compute()
    assert not grad.array("gradients/f/d_x").any()
    with pytest.raises(myelin.InputError, match="is not the gradient of cell"):
        autodiff.bind_primal(forward, grad)
    other, _, _ = _compiled_affine(rng)
    with pytest.raises(myelin.InputError, match="from different networks"):
        autodiff.bind_primal(other.cell("gradients/f").instance(), forward)


def test_flow_file_with_gradient_function(tmp_path):
    flow = _affine_flow()
    myelin.gradient(flow, "f")
    flow.save(tmp_path / "grad.flow")
    loaded = myelin.Flow.load(tmp_path / "grad.flow")
    grad = loaded.funcs["gradients/f"]
    assert grad.training
    assert {r.name: v.name for r, v in autodiff.primals(grad).items()} == \
        {r.name: v.name for r, v in autodiff.primals(flow.funcs["gradients/f"]).items()}
    rng = np.random.default_rng()
    inputs = {"f/x": rng.standard_normal((3, 5)), "f/x2": rng.standard_normal((3, 4)),
              "f/W": rng.standard_normal((5, 4))}
    adjoints = {"gradients/f/d_y": 0.5}
    expected = autodiff.run_reference(flow, "f", inputs, adjoints)
    got = autodiff.run_reference(loaded, "f", inputs, adjoints)
    assert expected.keys() == got.keys() == {"gradients/f/d_x", "gradients/f/d_x2",
                                             "gradients/f/d_W"}
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])


def _mlp(batch, features, hidden, classes, rng):
    """A two-layer MLP with learnable weights and a mean cross-entropy loss (float32)."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "mlp")
    x = f.var("x", "float32", [batch, features])
    target = f.var("target", "float32", [batch, classes])   # one-hot rows
    shapes = {"W1": (features, hidden), "b1": (hidden,), "W2": (hidden, classes),
              "b2": (classes,)}
    params = {}
    for name, shape in shapes.items():
        params[name] = f.var(name, "float32", shape)
        params[name].learnable = True
    h = f.tanh(f.add(f.matmul(x, params["W1"]), params["b1"]))
    logits = f.add(f.matmul(h, params["W2"]), params["b2"])
    f.neg(f.mean(f.sum(f.mul(f.log_softmax(logits), target), 1)), name="loss")
    values = {name: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
              for name, shape in shapes.items()}
    return flow, values


def test_mlp_gradients_match_torch():
    rng = np.random.default_rng()
    batch, features, hidden, classes = 6, 13, 17, 5
    flow, params = _mlp(batch, features, hidden, classes, rng)
    myelin.gradient(flow, "mlp")
    net = myelin.Compiler().compile(flow)
    x = rng.standard_normal((batch, features)).astype(np.float32)
    target = np.eye(classes, dtype=np.float32)[rng.integers(0, classes, batch)]
    for name, value in params.items():
        net[f"mlp/{name}"] = value
    forward = net.cell("mlp").instance()
    forward["mlp/x"], forward["mlp/target"] = x, target
    forward.compute()
    grad = net.cell("gradients/mlp").instance()
    autodiff.bind_primal(grad, forward)
    grad["gradients/mlp/d_loss"] = 1.0
    grad.compute()
    assert any(step.type in ("Calculate", "FusedMatMul") for step in grad.cell.steps)

    tensors = {name: torch.tensor(value, requires_grad=True) for name, value in params.items()}
    tx = torch.tensor(x, requires_grad=True)
    h = torch.tanh(tx @ tensors["W1"] + tensors["b1"])
    logits = h @ tensors["W2"] + tensors["b2"]
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(target.argmax(1)))
    loss.backward()
    assert abs(forward["mlp/loss"] - loss.item()) < 1e-5
    for name, tensor in {**tensors, "x": tx}.items():
        error = relative_error(grad.array(f"gradients/mlp/d_{name}"), tensor.grad.numpy())
        assert error < 1e-5, f"d_{name}: relative error {error:.3g}"
