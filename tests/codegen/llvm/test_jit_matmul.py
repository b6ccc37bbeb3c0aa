"""Compiled matrix products against the float64 reference: sizes, transposes, batches."""

import itertools

import numpy as np
import pytest

import myelin
from jitcheck import PRESETS, random_array, run_and_compare

DIMS = [1, 2, 3, 5, 8, 16, 17, 33, 64]
TOLERANCE = {"float32": 3e-5, "float64": 1e-12}   # norm-wise; random data can cancel
# The terms of a product of random inputs in [-2, 2] are of order 1: where they cancel (a dot
# product of 1.7e-4), the rounding of the sum is not smaller, so errors are measured against
# an output norm of at least 1.
FLOOR = 1.0


def _flow(dtype, transpose_a, transpose_b, shapes):
    flow = myelin.Flow()
    for i, (m, k, n, batch_a, batch_b) in enumerate(shapes):
        f = myelin.Builder(flow, f"f{i}")
        a_shape = batch_a + ((k, m) if transpose_a else (m, k))
        b_shape = batch_b + ((n, k) if transpose_b else (k, n))
        f.matmul(f.var("a", dtype, a_shape), f.var("b", dtype, b_shape),
                 transpose_a=transpose_a, transpose_b=transpose_b)
    return flow


def _inputs(flow, dtype, rng):
    return {name: {var: random_array(rng, dtype, var.shape, -2, 2) for var in func.ops[0].inputs}
            for name, func in flow.funcs.items()}


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("transpose_a,transpose_b", list(itertools.product([False, True], repeat=2)))
def test_matmul_sizes(transpose_a, transpose_b, dtype, features):
    rng = np.random.default_rng()
    shapes = [(m, k, n, (), ()) for m, k, n in itertools.product(DIMS, repeat=3)
              if rng.random() < 0.25 or (m, k, n) in ((1, 64, 64), (33, 17, 5), (64, 64, 64))]
    flow = _flow(dtype, transpose_a, transpose_b, shapes)
    run_and_compare(flow, _inputs(flow, dtype, rng), TOLERANCE[dtype], features, floor=FLOOR)


@pytest.mark.parametrize("features", ["host", "sse"])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_batched_matmul(transpose_b, features):
    rng = np.random.default_rng()
    shapes = [(5, 7, 9, (8,), (8,)), (3, 16, 17, (2, 4), (2, 4)), (4, 8, 33, (3,), ()),
              (2, 5, 6, (), (4,)), (6, 3, 2, (2, 1), (1, 3))]
    flow = _flow("float32", False, transpose_b, shapes)
    run_and_compare(flow, _inputs(flow, "float32", rng), TOLERANCE["float32"], features)


def test_int_matmul():
    rng = np.random.default_rng()
    flow = _flow("int32", False, False, [(3, 17, 9, (), ()), (8, 8, 33, (), ())])
    run_and_compare(flow, _inputs(flow, "int32", rng), 0, exact=True)


def test_large_matmul():
    rng = np.random.default_rng()
    flow = _flow("float32", False, False, [(200, 300, 257, (), ())])
    run_and_compare(flow, _inputs(flow, "float32", rng), 3e-5)


def _constant_flow(dtype, transpose_b, shapes, rng):
    """Products whose B is a constant (packed into panels at compile time)."""
    flow = myelin.Flow()
    for i, (m, k, n, batch_a, batch_b) in enumerate(shapes):
        f = myelin.Builder(flow, f"f{i}")
        b_shape = batch_b + ((n, k) if transpose_b else (k, n))
        weights = f.array("w", random_array(rng, dtype, b_shape, -2, 2))
        f.matmul(f.var("a", dtype, batch_a + (m, k)), weights, transpose_b=transpose_b)
    return flow


def _variable_inputs(flow, dtype, rng):
    return {name: {var: random_array(rng, dtype, var.shape, -2, 2)
                   for var in func.ops[0].inputs if not var.is_global}
            for name, func in flow.funcs.items()}


@pytest.mark.parametrize("features", ["host", "sse"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_constant_b(transpose_b, dtype, features):
    rng = np.random.default_rng()
    shapes = [(1, 64, 64, (), ()), (1, 33, 5, (), ()), (7, 17, 40, (), ()), (30, 9, 33, (), ()),
              (13, 100, 16, (), ()), (5, 7, 9, (3,), (3,)), (4, 8, 19, (2, 3), (2, 1)),
              (6, 5, 7, (2,), ())]
    flow = _constant_flow(dtype, transpose_b, shapes, rng)
    tolerance = TOLERANCE.get(dtype, 0)
    run_and_compare(flow, _variable_inputs(flow, dtype, rng), tolerance, features,
                    exact=dtype == "int64")


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_split_over_threads(transpose_b, threads):
    """Products large enough to be split into tasks: by rows, by panels (a vector times a
    matrix) and by batch entries, with B constant and variable."""
    rng = np.random.default_rng()
    shapes = [(1, 600, 1000, (), ()), (100, 64, 70, (), ()), (50, 40, 60, (4,), (4,)),
              (2, 300, 515, (), ())]
    for flow in (_flow("float32", False, transpose_b, shapes),
                 _constant_flow("float32", transpose_b, shapes, rng)):
        run_and_compare(flow, _variable_inputs(flow, "float32", rng), 3e-5, threads=threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_matmul_epilogue_with_constant_weights(threads):
    """A layer, relu(x W + b) + r, compiles to one FusedMatMul reading packed weights."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [37, 300])
    residual = f.var("r", myelin.DT_FLOAT, [37, 130])
    w = f.array("W", random_array(rng, "float32", (300, 130), -1, 1))
    bias = f.array("b", random_array(rng, "float32", (130,), -1, 1))
    f.add(f.relu(f.add(f.matmul(x, w), bias)), residual, name="y")
    inputs = {"f": {x: random_array(rng, "float32", (37, 300), -1, 1),
                    residual: random_array(rng, "float32", (37, 130), -1, 1)}}
    net = run_and_compare(flow, inputs, 3e-5, threads=threads)
    assert [s.type for s in net.cell("f").steps if not s.noop] == ["FusedMatMul"]


def test_packed_weights_are_not_copied():
    """A constant only a product reads is packed at compile time and never read as the code
    runs, so the network does not copy it into memory of its own: its global is the flow's
    array where it lies (read-only); a constant the code reads (the bias) is copied, aligned."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [5, 64])
    w = f.array("W", random_array(rng, "float32", (64, 48), -1, 1))
    bias = f.array("b", random_array(rng, "float32", (48,), -1, 1))
    f.add(f.matmul(x, w), bias, name="y")
    net = run_and_compare(flow, {"f": {x: random_array(rng, "float32", (5, 64), -1, 1)}}, 3e-5)
    weights, biases = net.tensor(w).numpy(), net.tensor(bias).numpy()
    assert np.shares_memory(weights, w.data) and np.array_equal(weights, w.data)
    assert not np.shares_memory(biases, bias.data) and np.array_equal(biases, bias.data)
    assert biases.ctypes.data % 64 == 0
    with pytest.raises(myelin.InputError, match="constant"):
        net[w] = np.zeros((64, 48), np.float32)


def test_threads_option_is_checked():
    with pytest.raises(myelin.CompileError):
        myelin.Compiler(threads=0)


@pytest.mark.parametrize("threads", [1, 2])
def test_batch_folded_into_rows(threads):
    """x[b, m, k] W + ... with W shared by the batch runs as one taller product; epilogue
    inputs laid out like the product, or broadcast over batch and rows, fold along, and one
    that varies by row but not by batch entry keeps the batch loop (same numbers either way)."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    inputs = {}
    for name, extra_shape in (("full", (6, 3, 70)), ("bias", (70,)), ("rows", (3, 70))):
        f = myelin.Builder(flow, name)
        x = f.var("x", myelin.DT_FLOAT, [6, 3, 300])
        extra = f.var("e", myelin.DT_FLOAT, list(extra_shape))
        w = f.array("W", random_array(rng, "float32", (300, 70), -1, 1))
        f.relu(f.add(f.matmul(x, w), extra), name="y")
        inputs[name] = {x: random_array(rng, "float32", (6, 3, 300), -1, 1),
                        extra: random_array(rng, "float32", extra_shape, -1, 1)}
    net = run_and_compare(flow, inputs, 3e-5, threads=threads)
    for name in inputs:
        assert [s.type for s in net.cell(name).steps if not s.noop] == ["FusedMatMul"]


@pytest.mark.parametrize("features", ["host", "sse"])
def test_long_products_sum_k_in_blocks(features):
    """Products longer than one block of k (256 products per accumulator, 1024 where a tile
    of one row splits k over four) around the block edges, of every type; a float32
    product's rounding error does not grow with k."""
    rng = np.random.default_rng()
    shapes = [(3, 63, 17), (5, 256, 16), (2, 257, 33), (1, 255, 9), (1, 257, 7), (7, 600, 9),
              (1, 1025, 40)]
    for dtype in ("float32", "float64", "int64"):
        flow = myelin.Flow()
        for i, (m, k, n) in enumerate(shapes):
            f = myelin.Builder(flow, f"f{i}")
            f.matmul(f.var("a", dtype, (m, k)), f.const(random_array(rng, dtype, (k, n), -2, 2)))
        inputs = {name: {func.ops[0].inputs[0]: random_array(
            rng, dtype, func.ops[0].inputs[0].shape, -2, 2)} for name, func in flow.funcs.items()}
        run_and_compare(flow, inputs, TOLERANCE.get(dtype, 0), features,
                        exact=dtype == "int64")
    m, k, n = 64, 4096, 64
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", (m, k))
    f.matmul(x, f.const(b.astype(np.float32)), name="y")
    data = myelin.Compiler(features=features).compile(flow).cell("f").instance()
    data[x] = a.astype(np.float32)
    data.compute()
    want = a.astype(np.float32).astype(np.float64) @ b.astype(np.float32).astype(np.float64)
    rms = np.sqrt(np.mean((np.asarray(data["f/y"]) - want) ** 2) / np.mean(want ** 2))
    # ONNX Runtime's is 3.0e-7 (the same blocks of 256, the same sums); one chain over all
    # of k: 1.2e-6
    assert rms < 3.3e-7


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_narrow_float_products(dtype, features):
    """float16 and bfloat16 products read their operands as they are stored, sum in float32
    and round each result once: within one rounding of the float64 product, with B constant
    (packed at compile time), variable (packed as the product runs, or read in place) and
    transposed."""
    rng = np.random.default_rng()
    numpy_type = myelin.flow.dtypes.to_numpy(dtype)
    unit = 2.0 ** -(11 if dtype == "float16" else 8)
    for m, k, n, transpose_b, constant in [(1, 64, 64, False, True), (7, 17, 40, False, False),
                                           (30, 300, 33, True, True), (3, 5, 1, True, False),
                                           (100, 64, 70, False, False), (2, 784, 37, False, True),
                                           (13, 9, 19, True, False)]:
        flow = myelin.Flow()
        f = myelin.Builder(flow, "f")
        x = f.var("x", dtype, (m, k))
        weights = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(numpy_type)
        w = f.const(weights) if constant else f.var("w", dtype, weights.shape)
        f.matmul(x, w, transpose_b=transpose_b, name="y")
        data = myelin.Compiler(features=features).compile(flow).cell("f").instance()
        value = rng.standard_normal((m, k)).astype(numpy_type)
        data[x] = value
        if not constant:
            data[w] = weights
        data.compute()
        got = np.asarray(data["f/y"])
        assert got.dtype == numpy_type
        wide = weights.astype(np.float64)
        want = value.astype(np.float64) @ (wide.T if transpose_b else wide)
        error = np.abs(got.astype(np.float64) - want) / np.maximum(np.abs(want), 1)
        assert error.max() <= unit, (m, k, n, transpose_b, constant)


@pytest.mark.parametrize("features", ["host", "sse"])
def test_narrow_constant_b_is_packed_one_vector_wide(features):
    """A B of fewer columns than a vector has lanes is packed in panels of one vector, not
    of the default tile's two: its product reads half the bytes."""
    from myelin.codegen.llvm import loops

    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [1, 64])
    f.matmul(x, f.array("W", random_array(rng, "float32", (64, 3), -1, 1)), name="y")
    net = run_and_compare(flow, {"f": {x: random_array(rng, "float32", (1, 64), -1, 1)}}, 3e-5,
                          features)
    lanes = loops.lanes(net.target, "float32")
    assert [array.size for array in net._packed] == [64 * lanes]
