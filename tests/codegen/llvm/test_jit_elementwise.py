"""Compiled element-wise ops against the float64 reference, over many sizes and broadcasts,
under every CPU feature preset."""

import numpy as np
import pytest

import myelin
from jitcheck import PRESETS, random_array, registry_domains, run_and_compare

SIZES = list(range(1, 34)) + [64, 127, 128, 256]

# op -> (low, high) of the random inputs (of each input for binary ops): the registry's domain.
UNARY_FLOAT = registry_domains(1)
BINARY_FLOAT = registry_domains(2)
UNARY_INT = ["Neg", "Abs", "Sign", "Relu", "Square", "Identity"]
BINARY_INT = ["Add", "Sub", "Mul", "Div", "Minimum", "Maximum"]
COMPARISONS = ["Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual"]
TOLERANCE = {"float32": 3e-6, "float64": 1e-12}
# Shapes of (x, y) for the broadcasting cases.
BROADCASTS = [((3, 7), (7,)), ((5, 1), (1, 6)), ((), (9,)), ((4, 1, 3), (2, 3)),
              ((2, 3, 17), (2, 1, 17))]


def _unary_flow(op_type, dtype, attrs=None):
    flow = myelin.Flow()
    for size in SIZES:
        f = myelin.Builder(flow, f"n{size}")
        f.op(op_type, [f.var("x", dtype, [size])], attrs=attrs)
    f = myelin.Builder(flow, "matrix")
    f.op(op_type, [f.var("x", dtype, [5, 33])], attrs=attrs)
    return flow


def _inputs(flow, ranges, dtype, rng):
    inputs = {}
    for name, func in flow.funcs.items():
        values = {}
        for position, var in enumerate(v for op in func.ops for v in op.inputs if not v.constant):
            low, high = ranges[min(position, len(ranges) - 1)]
            values[var] = random_array(rng, var.dtype if var.dtype != "bool" else "bool",
                                       var.shape, low, high)
        inputs[name] = values
    return inputs


def _binary_flow(op_type, dtype, out_bool=False):
    flow = myelin.Flow()
    for size in SIZES:
        f = myelin.Builder(flow, f"n{size}")
        f.op(op_type, [f.var("x", dtype, [size]), f.var("y", dtype, [size])])
    for i, (xs, ys) in enumerate(BROADCASTS):
        f = myelin.Builder(flow, f"b{i}")
        f.op(op_type, [f.var("x", dtype, xs), f.var("y", dtype, ys)])
        f = myelin.Builder(flow, f"r{i}")
        f.op(op_type, [f.var("x", dtype, ys), f.var("y", dtype, xs)])
    return flow


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op_type", sorted(UNARY_FLOAT))
def test_unary_float(op_type, dtype, features):
    rng = np.random.default_rng()
    flow = _unary_flow(op_type, dtype)
    tolerance = TOLERANCE[dtype] * (10 if op_type in ("Pow", "Acosh", "Asech", "Acoth") else 1)
    run_and_compare(flow, _inputs(flow, [UNARY_FLOAT[op_type]], dtype, rng), tolerance, features)


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op_type", sorted(BINARY_FLOAT))
def test_binary_float(op_type, dtype, features):
    rng = np.random.default_rng()
    flow = _binary_flow(op_type, dtype)
    tolerance = TOLERANCE[dtype] * (10 if op_type == "Pow" else 1)
    run_and_compare(flow, _inputs(flow, list(BINARY_FLOAT[op_type]), dtype, rng), tolerance,
                    features)


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("op_type", UNARY_INT)
def test_unary_int(op_type, features):
    rng = np.random.default_rng()
    flow = _unary_flow(op_type, "int32")
    run_and_compare(flow, _inputs(flow, [(-1000, 1000)], "int32", rng), 0, features, exact=True)


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op_type", BINARY_INT)
def test_binary_int(op_type, dtype, features):
    rng = np.random.default_rng()
    flow = _binary_flow(op_type, dtype)
    ranges = [(-1000, 1000), (1, 50)] if op_type == "Div" else [(-1000, 1000)]
    run_and_compare(flow, _inputs(flow, ranges, dtype, rng), 0, features, exact=True)


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("op_type", COMPARISONS)
def test_comparisons(op_type, dtype, features):
    rng = np.random.default_rng()
    flow = _binary_flow(op_type, dtype)
    # Few distinct values, so that equal pairs occur often.
    run_and_compare(flow, _inputs(flow, [(-3, 3)], "int32", rng) if dtype == "int32" else
                    {name: {v: np.round(a) for v, a in values.items()}
                     for name, values in _inputs(flow, [(-3, 3)], dtype, rng).items()},
                    0, features, exact=True)


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("op_type", ["And", "Or", "Xor"])
def test_logic(op_type, features):
    rng = np.random.default_rng()
    flow = _binary_flow(op_type, "bool")
    run_and_compare(flow, _inputs(flow, [(0, 1)], "bool", rng), 0, features, exact=True)


@pytest.mark.parametrize("features", PRESETS)
def test_not_cond_select(features):
    rng = np.random.default_rng()
    flow = myelin.Flow()
    for size in SIZES:
        f = myelin.Builder(flow, f"n{size}")
        c = f.var("c", "bool", [size])
        x, y = f.var("x", "float32", [size]), f.var("y", "float32", [1])
        f.logical_not(c, name="not")
        f.cond(c, x, y, name="cond")
        f.select(c, x, name="select")
    inputs = {}
    for name, func in flow.funcs.items():
        size = int(name[1:])
        inputs[name] = {f"{name}/c": rng.random(size) < 0.5,
                        f"{name}/x": random_array(rng, "float32", (size,)),
                        f"{name}/y": random_array(rng, "float32", (1,))}
    run_and_compare(flow, inputs, 0, features, exact=True)


@pytest.mark.parametrize("features", ["host", "sse"])
@pytest.mark.parametrize("pair", [("float32", "int32"), ("int32", "float32"),
                                  ("float32", "float64"), ("float64", "float32"),
                                  ("int32", "int64"), ("float32", "bool"), ("bool", "float32")])
def test_cast(pair, features):
    source, target = pair
    rng = np.random.default_rng()
    flow = _unary_flow("Cast", source, {"dtype": target})
    run_and_compare(flow, _inputs(flow, [(-100, 100)], source, rng), 1e-7, features)


def test_gelu_tanh_approximation():
    rng = np.random.default_rng()
    flow = _unary_flow("Gelu", "float32", {"approximate": "tanh"})
    run_and_compare(flow, _inputs(flow, [(-6, 6)], "float32", rng), 3e-6)


def test_chain_of_ops_reuses_memory():
    """A chain of element-wise ops (unfused, at opt level 0) computes correctly while the
    planner shares buffers."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [1000])
    y = f.sigmoid(f.mul(f.tanh(f.add(f.exp(f.neg(x)), 1.0)), x), name="y")
    rng = np.random.default_rng()
    net = run_and_compare(flow, {"f": {x: random_array(rng, "float32", (1000,))}}, 3e-6,
                          opt_level=0)
    cell = net.cell("f")
    assert cell.instance_size < cell.unshared_size
    assert y.name in cell


def _cast_flow(source, target, size):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", source, [size])
    return flow, x, f.op("Cast", [x], attrs={"dtype": target})


def _run_cast(source, target, values, features):
    flow, x, y = _cast_flow(source, target, values.size)
    data = myelin.Compiler(features=features).compile(flow).cell("f").instance()
    data[x] = values
    data.compute()
    return np.array(data[y])


def _assert_same_halves(got, want):
    """Equal bits, except that NaNs only need to be NaNs of the same sign."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))


@pytest.mark.parametrize("features", PRESETS)
def test_float16_conversions_of_every_half(features):
    """All 65536 halves to float32 (exact) and back (the identity), under every preset: without
    F16C the conversions are integer code, with it instructions."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    floats = _run_cast("float16", "float32", halves, features)
    want = halves.astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(floats), nan)
    np.testing.assert_array_equal(np.signbit(floats), np.signbit(want))
    np.testing.assert_array_equal(floats[~nan].view(np.uint32), want[~nan].view(np.uint32))
    _assert_same_halves(_run_cast("float32", "float16", floats, features), halves)


@pytest.mark.parametrize("features", PRESETS)
def test_float16_rounding_of_random_floats(features):
    """float32 -> float16 rounds to nearest, ties to even, like NumPy: random bit patterns,
    magnitudes around the half range (subnormals, overflow), and exact ties between halves."""
    rng = np.random.default_rng()
    bits = rng.integers(0, 1 << 32, 20011, dtype=np.uint64).astype(np.uint32).view(np.float32)
    scaled = (rng.choice([-1, 1], 40009) * 2.0 ** rng.uniform(-27, 17, 40009)).astype(np.float32)
    halves = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32)
    ties = np.concatenate([(halves[:-1] + halves[1:]) / 2, -(halves[:-1] + halves[1:]) / 2])
    edges = np.array([65504, 65519.996, 65520, 65536, 2.0 ** -25, 2.0 ** -24 * 1.5, 2.0 ** -26,
                      1e-45, -1e-45, np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0], np.float32)
    values = np.concatenate([bits, scaled, ties.astype(np.float32), edges])
    with np.errstate(over="ignore"):
        want = values.astype(np.float16)
    _assert_same_halves(_run_cast("float32", "float16", values, features), want)


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("op_type", ["Add", "Mul", "Div", "Maximum"])
def test_binary_float16(op_type, features):
    """float16 is computed in float32 and rounded once to half on the store."""
    rng = np.random.default_rng()
    flow = _binary_flow(op_type, "float16")
    run_and_compare(flow, _inputs(flow, list(BINARY_FLOAT[op_type]), "float16", rng), 1e-3,
                    features)


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("op_type", ["Exp", "Tanh", "Sqrt", "Neg"])
def test_unary_float16(op_type, features):
    rng = np.random.default_rng()
    flow = _unary_flow(op_type, "float16")
    run_and_compare(flow, _inputs(flow, [UNARY_FLOAT[op_type]], "float16", rng), 1e-3,
                    features)


def test_in_place_step_split_over_threads():
    """An SE block's scale, sigmoid(s) * x, split into tasks: its output written over its
    dying input (the two may alias: not noalias), the broadcast operand hoisted (noalias)."""
    rng = np.random.default_rng(0)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", (1, 56, 56, 64))
    s = f.var("s", "float32", (1, 64, 1, 1))
    scaled = f.op("Mul", [f.op("Sigmoid", [s]), f.op("Transpose", [x], None,
                                                     {"perm": [0, 3, 1, 2]})])
    f.op("Identity", [f.op("Transpose", [scaled], None, {"perm": [0, 2, 3, 1]})], "y")
    inputs = {x: rng.standard_normal((1, 56, 56, 64)).astype(np.float32),
              s: rng.standard_normal((1, 64, 1, 1)).astype(np.float32)}
    net = run_and_compare(flow, {"f": inputs}, 1e-6, threads=2, cache=False)
    assert any(t.shares is not None for t in net.cell("f").tensors)
