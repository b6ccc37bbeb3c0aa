"""The optimizer preserves meaning: hundreds of random graphs, at every opt level, give the
reference interpreter's results both as optimized flows and compiled."""

import numpy as np
import pytest

import myelin
from myelin import optimize, reference

from jitcheck import computed, relative_error
from randomgraphs import build_flow, random_inputs

FUNCTIONS = 60      # random functions per flow; each test compiles one flow


@pytest.mark.parametrize("seed", range(4))
def test_optimized_flows_match_the_reference(seed):
    flow = build_flow(seed, FUNCTIONS)
    inputs = random_inputs(flow, np.random.default_rng())
    expected = {name: reference.run(flow, name, values) for name, values in inputs.items()}
    for level in range(optimize.MAX_LEVEL + 1):
        optimized = flow.copy()
        optimize.optimize(optimized, level, debug=True)
        for name, values in inputs.items():
            got = reference.run(optimized, name, values)
            assert got.keys() == expected[name].keys(), (level, name)
            for out, want in expected[name].items():
                assert relative_error(got[out], want) < 1e-5, (level, name, out)


@pytest.mark.parametrize("level", range(optimize.MAX_LEVEL + 1))
@pytest.mark.parametrize("seed", [10, 11])
def test_compiled_flows_match_the_reference(seed, level):
    flow = build_flow(seed, FUNCTIONS)
    net = myelin.Compiler(opt_level=level).compile(flow)
    inputs = random_inputs(flow, np.random.default_rng())
    for name, _, out, got, want in computed(net, flow, inputs):
        # Held to their norm, or to 0.01 an element where they are smaller: an output that
        # cancels to near zero (a mean of values of both signs, a ReLU of it) keeps float32's
        # rounding of its inputs' size (a ReLU of three means of 17 was once 4.4e-5 of its
        # norm off).
        error = relative_error(got, want, floor=1e-2 * np.sqrt(np.size(want)))
        assert error < 2e-5, (f"opt level {level}, {name}: {out} error {error:.2g}\n"
                              + str(net.cell(name)))
