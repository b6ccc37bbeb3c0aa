"""Every op type with a gradient rule against float64 central differences: the gradient
function run by the reference interpreter, and compiled (all cases in one flow, one compile)
with its primal values read from the compiled forward instance. Inputs are fresh random values
for every check; the seed is in the failure message."""

import numpy as np
import pytest

import myelin
from myelin import autodiff
import cases
import gradcheck

# GatherSum and GatherAvg have no CPU kernel: their forward functions cannot be compiled.
NO_FORWARD_KERNEL = {"GatherSum", "GatherAvg"}


@pytest.fixture(scope="module")
def reference_cases():
    return gradcheck.build_all(cases.CASES)[1]


@pytest.fixture(scope="module")
def compiled():
    """({case name: Built}, the compiled network) of the cases whose forward compiles."""
    flow, built = gradcheck.build_all([c for c in cases.CASES
                                       if c.name not in NO_FORWARD_KERNEL])
    return built, myelin.Compiler().compile(flow)


def _check(built, gradients):
    seed = np.random.SeedSequence().entropy
    rng = np.random.default_rng(seed)
    values, adjoints = built.values(rng), built.adjoints(rng)
    try:
        gradcheck.assert_close(built.case, gradients(values, adjoints),
                               built.numeric(values, adjoints))
    except AssertionError as error:
        raise AssertionError(f"{error}\n(seed {seed})") from None


def test_every_rule_has_a_case(reference_cases):
    rules = {t for t in myelin.ops.types() if myelin.ops.lookup(t).gradient is not None}
    covered = {op.type for built in reference_cases.values()
               for op in built.flow.funcs[built.case.name].ops}
    assert rules <= covered, f"rules without a gradient check: {sorted(rules - covered)}"


@pytest.mark.parametrize("name", [c.name for c in cases.CASES])
def test_reference_gradient(reference_cases, name):
    built = reference_cases[name]
    _check(built, built.reference_gradients)


@pytest.mark.parametrize("name", [c.name for c in cases.CASES if c.name not in NO_FORWARD_KERNEL])
def test_compiled_gradient(compiled, name):
    built, net = compiled
    case = built[name]
    _check(case, lambda values, adjoints: case.compiled_gradients(net, values, adjoints))


@pytest.mark.parametrize("name", sorted(NO_FORWARD_KERNEL))
def test_compiled_gradient_without_forward_cell(name):
    """The gradients of GatherSum and GatherAvg read no forward values (their indices are
    constants), so their gradient functions compile alone, forward functions removed."""
    case = next(c for c in cases.CASES if c.name == name)
    flow, built = gradcheck.build_all([case])
    built = built[name]
    alone = flow.copy()
    for op in list(alone.funcs[name].ops):
        alone.delete_op(op)
    del alone.funcs[name]
    grad = myelin.Compiler().compile(alone).cell(autodiff.gradient_function_name(name))
    data = grad.instance()

    def gradients(values, adjoints):
        for key, value in adjoints.items():
            data[key] = value
        data.compute()
        return {autodiff.adjoint_name(name, v.name): np.asarray(data[autodiff.adjoint_name(
            name, v.name)]) for v in built.vars}
    _check(built, gradients)
