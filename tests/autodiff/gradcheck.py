"""Gradient checks against float64 central differences (like SLING's gradcheck).

A :class:`Case` builds a function of float64 inputs (drawn fresh from the op's domain for every
check) and adds its gradient function. For random adjoints ``w_y`` of the outputs, the
gradient of ``L = sum_y <w_y, y>`` with respect to each differentiable input and learnable
variable is compared with central differences of ``L`` evaluated by the reference interpreter.
"""

import dataclasses
from typing import Callable

import numpy as np

import myelin
from jitcheck import relative_error
from myelin import autodiff, reference


@dataclasses.dataclass
class Input:
    """A float input of a case (a learnable variable if ``learnable``), uniform in
    [low, high)."""

    name: str
    shape: tuple
    low: float = -2.0
    high: float = 2.0
    learnable: bool = False


@dataclasses.dataclass
class Case:
    """Function ``name``: ``build(b, *inputs)`` returns its output or a tuple of outputs."""

    name: str
    inputs: list
    build: Callable
    eps: float = 1e-6
    tolerance: float = 1e-6


class Built:
    """A case added to a flow: its variables, outputs and gradient function."""

    def __init__(self, flow, case):
        self.flow, self.case = flow, case
        b = myelin.Builder(flow, case.name)
        self.vars = []
        for spec in case.inputs:
            var = flow.var(f"{case.name}/{spec.name}", "float64", spec.shape)
            var.learnable = spec.learnable
            self.vars.append(var)
        outputs = case.build(b, *self.vars)
        self.outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
        myelin.gradient(flow, case.name)

    def values(self, rng):
        return {var: rng.uniform(spec.low, spec.high, spec.shape)
                for var, spec in zip(self.vars, self.case.inputs)}

    def adjoints(self, rng):
        """Random adjoints of the float outputs, by the name of their gradient input."""
        return {autodiff.adjoint_name(self.case.name, y.name): rng.standard_normal(y.shape)
                for y in self.outputs if y.dtype == "float64"}

    def loss(self, values, adjoints):
        """L = sum_y <w_y, y> on the reference interpreter."""
        outputs = reference.Interpreter(self.flow).run(self.case.name, values, self.outputs)
        return sum(float(np.sum(adjoints[autodiff.adjoint_name(self.case.name, y.name)]
                                * outputs[y.name]))
                   for y in self.outputs if y.dtype == "float64")

    def fed(self, adjoints):
        """The adjoints that are inputs of the gradient function."""
        return {name: value for name, value in adjoints.items()
                if self.flow.var_named(name) is not None}

    def numeric(self, values, adjoints):
        """{gradient variable name: central differences of the loss}."""
        eps, result = self.case.eps, {}
        for var in self.vars:
            base = values[var]
            grad = np.zeros(base.shape)
            for i in np.ndindex(base.shape):
                shifted = dict(values)
                for sign in (1, -1):
                    shifted[var] = base.copy()
                    shifted[var][i] += sign * eps
                    grad[i] += sign * self.loss(shifted, adjoints) / (2 * eps)
            result[autodiff.adjoint_name(self.case.name, var.name)] = grad
        return result

    def reference_gradients(self, values, adjoints):
        return autodiff.run_reference(self.flow, self.case.name, values, self.fed(adjoints))

    def compiled_gradients(self, net, values, adjoints):
        """The gradients computed by the compiled cells of ``net``."""
        forward = net.cell(self.case.name).instance()
        for var, value in values.items():
            if var.learnable:
                net[var] = value
            else:
                forward[var] = value
        forward.compute()
        grad = net.cell(autodiff.gradient_function_name(self.case.name)).instance()
        for spec in grad.cell.tensors:     # unwritten outputs show as NaN
            if spec.kind == "output":
                grad.array(spec.name)[...] = np.nan
        autodiff.bind_primal(grad, forward)
        for name, value in self.fed(adjoints).items():
            grad[name] = value
        grad.compute()
        return {autodiff.adjoint_name(self.case.name, var.name):
                np.asarray(grad.array(autodiff.adjoint_name(self.case.name, var.name)))
                for var in self.vars}


def build_all(cases):
    """A flow with every case and its gradient; returns (flow, {name: Built})."""
    flow = myelin.Flow()
    return flow, {case.name: Built(flow, case) for case in cases}


def assert_close(case, got, want):
    for name, expected in want.items():
        assert name in got, f"{case.name}: no gradient {name}"
        error = relative_error(got[name], expected)
        assert error <= case.tolerance, (f"{case.name}: {name} relative error {error:.3g}\n"
                                         f" got {got[name]}\n want {expected}")
