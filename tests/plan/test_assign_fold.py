"""Assign folding (myelin.plan.assign): a producer writes an Assign's value straight into its
target when that gives the same result, and the Assign step stays where it would not."""

import numpy as np
import pytest

import myelin


def build(body):
    """A function f with learnable w [3, 3] and input x [3, 3]; ``body(f, w, x)`` adds ops."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    w = f.var("w", myelin.DT_FLOAT, [3, 3])
    w.learnable = True
    x = f.var("x", myelin.DT_FLOAT, [3, 3])
    body(f, w, x)
    return flow


def run(flow, opt_level):
    """Compile, set w and x, compute once; returns (network, instance, w0, x, steps)."""
    net = myelin.Compiler(opt_level=opt_level).compile(flow)
    rng = np.random.default_rng(opt_level)
    w0, xv = rng.standard_normal((2, 3, 3)).astype(np.float32)
    net["f/w"] = w0
    data = net.cell("f").instance()
    data["f/x"] = xv
    data.compute()
    return net, data, w0.astype(np.float64), xv.astype(np.float64), net.cell("f").steps


def assigns(steps):
    return sum(step.type == "Assign" for step in steps)


@pytest.mark.parametrize("opt_level", [0, 3])
def test_update_is_written_in_place(opt_level):
    flow = build(lambda f, w, x: f.assign(w, f.sub(w, f.mul(f.add(x, w), 0.5))))
    net, _, w0, xv, steps = run(flow, opt_level)
    assert assigns(steps) == 0
    np.testing.assert_allclose(net["f/w"], w0 - 0.5 * (xv + w0), rtol=1e-6)


@pytest.mark.parametrize("opt_level", [0, 3])
def test_target_read_before_the_assign_keeps_the_assign(opt_level):
    def body(f, w, x):
        value = f.mul(x, 2.0)
        f.add(w, 1.0, name="y")             # reads the old w after value is computed
        f.assign(w, value)
    net, data, w0, xv, steps = run(build(body), opt_level)
    assert assigns(steps) == 1
    np.testing.assert_allclose(data["f/y"], w0 + 1, rtol=1e-6)
    np.testing.assert_allclose(net["f/w"], 2 * xv, rtol=1e-6)


@pytest.mark.parametrize("opt_level", [0, 3])
def test_value_read_after_a_later_write_keeps_the_assign(opt_level):
    def body(f, w, x):
        first = f.mul(x, 2.0)
        f.assign(w, first)
        f.assign(w, f.mul(x, 3.0))
        f.identity(f.mul(first, 1.5), name="y")   # reads the first value after w changed
    net, data, w0, xv, steps = run(build(body), opt_level)
    np.testing.assert_allclose(data["f/y"], 3 * xv, rtol=1e-6)
    np.testing.assert_allclose(net["f/w"], 3 * xv, rtol=1e-6)
    # Fused, y is computed with the first value, in the step that makes it: both fold.
    assert assigns(steps) == (1 if opt_level == 0 else 0)


def test_kernel_reading_the_target_out_of_place_keeps_the_assign():
    """A product w x reads all of w for each element it writes: it cannot write over w."""
    net, _, w0, xv, steps = run(build(lambda f, w, x: f.assign(w, f.matmul(w, x))), 3)
    assert assigns(steps) == 1
    np.testing.assert_allclose(net["f/w"], w0 @ xv, rtol=1e-5)
