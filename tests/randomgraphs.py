"""A seeded generator of random flows for optimizer tests.

Each function mixes element-wise and broadcast ops, reductions, matmuls with constant weights,
reshapes, transposes and constants, with values kept in a moderate range (no Log or Div of
arbitrary values), so float32 results can be compared with the float64 reference.
"""

import numpy as np

import myelin

UNARY = ["Relu", "Tanh", "Sigmoid", "Neg", "Abs", "Square", "Softsign"]
BINARY = ["Add", "Sub", "Mul", "Maximum", "Minimum"]
REDUCTIONS = ["Sum", "Max", "Min", "Mean"]


def _dims(rng):
    return int(rng.choice([1, 2, 3, 5, 8, 9, 16, 17]))


def build_function(flow, name, rng, steps=8):
    """Add a random function ``name`` to ``flow``; returns its builder."""
    f = myelin.Builder(flow, name)
    m, n = _dims(rng), _dims(rng)
    values = [f.var("x", "float32", [m, n])]
    if rng.random() < 0.5:
        values.append(f.var("y", "float32", [m, n]))

    def constant(shape, scale=1.0):
        return f.const((rng.uniform(-1, 1, shape) * scale).astype(np.float32))

    def operand_like(value):
        """A second operand that broadcasts against ``value``."""
        shape = value.shape
        choice = rng.integers(5)
        same = [v for v in values if v.shape == shape and v is not value]
        if choice == 0 and same:
            return same[int(rng.integers(len(same)))]
        if choice == 1 and shape:
            return constant(shape[-1:])
        if choice == 2 and len(shape) == 2:
            return constant((shape[0], 1))
        if choice == 3:
            return constant(())
        return constant(shape)

    for _ in range(steps):
        x = values[int(rng.integers(max(1, len(values) - 2), len(values) + 1)) - 1]
        kind = rng.random()
        if kind < 0.3:
            out = f.op(str(rng.choice(UNARY)), [x])
        elif kind < 0.6:
            out = f.op(str(rng.choice(BINARY)), [x, operand_like(x)])
        elif kind < 0.7 and x.rank >= 1:
            axis = -1 if rng.random() < 0.7 else 0
            out = f.op(str(rng.choice(REDUCTIONS)), [x],
                       attrs={"axis": axis, "keepdims": bool(rng.random() < 0.6)})
        elif kind < 0.8 and x.rank == 2:
            k = _dims(rng)
            out = f.matmul(x, constant((x.shape[1], k), 1 / np.sqrt(x.shape[1])))
        elif kind < 0.9 and x.rank == 2:
            out = f.transpose(x)
        elif x.rank >= 1:
            out = f.reshape(x, [int(np.prod(x.shape))])
        else:
            out = f.op("Tanh", [x])
        values.append(out)
    return f


def build_flow(seed, functions=50, steps=8):
    """A flow of ``functions`` random functions, reproducible from ``seed``."""
    rng = np.random.default_rng(seed)
    flow = myelin.Flow()
    for index in range(functions):
        build_function(flow, f"g{index}", rng, steps)
    flow.infer_inputs_and_outputs()
    return flow


def random_inputs(flow, rng):
    """{function name: {input variable name: array}} of fresh values in [-2, 2]."""
    return {name: {var.name: rng.uniform(-2, 2, var.shape).astype(np.float32)
                   for var in func.inputs()}
            for name, func in flow.funcs.items()}
