"""Weights stored as bfloat16 or float16 (``Compiler(weights=...)``): products whose B is
constant weights read them rounded to the narrower type, with float32 sums."""

import ml_dtypes
import numpy as np
import pytest

import myelin
from jitcheck import PRESETS, poison, random_array, relative_error
from myelin import reference

STORAGE = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
SHAPES = [(1, 64, 64), (1, 33, 5), (7, 17, 40), (30, 9, 33), (13, 100, 16), (1, 600, 1000),
          (3, 257, 7), (2, 5, 1)]


def _rounded(weights, storage):
    return weights.astype(STORAGE[storage]).astype(np.float64)


def _products(rng, shapes, transpose_b=False, batch_b=()):
    """A function per shape computing x[m, k] W (W constant, ``batch_b`` leading axes)."""
    flow = myelin.Flow()
    for i, (m, k, n) in enumerate(shapes):
        f = myelin.Builder(flow, f"f{i}")
        shape = batch_b + ((n, k) if transpose_b else (k, n))
        f.matmul(f.var("x", "float32", (m, k)), f.const(random_array(rng, "float32", shape)),
                 transpose_b=transpose_b, name="y")
    return flow


def _check(net, flow, rng, tolerance=3e-6):
    """Each function's output against float64 products of the rounded weights, and against
    the reference interpreter run on the optimized flow (whose ops carry ``weights``)."""
    for name, func in flow.funcs.items():
        product = next(op for op in net.flow.funcs[name].ops if "MatMul" in op.type)
        storage = product.attrs["weights"]
        x, w = func.ops[0].inputs
        value = random_array(rng, "float32", x.shape)
        data = net.cell(name).instance()
        poison(data)
        data[x] = value
        data.compute()
        got = np.asarray(data[f"{name}/y"])
        weights = _rounded(w.data, storage)
        if func.ops[0].attrs.get_bool("transpose_b", False):
            weights = np.swapaxes(weights, -1, -2)
        assert relative_error(got, value.astype(np.float64) @ weights) < tolerance, name
        (want,) = reference.run(net.flow, name, {x.name: value}).values()
        assert relative_error(got, want) < tolerance, name


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("storage", sorted(STORAGE))
@pytest.mark.parametrize("transpose_b", [False, True])
def test_products_read_rounded_weights(storage, transpose_b, features):
    rng = np.random.default_rng()
    flow = _products(rng, SHAPES, transpose_b)
    net = myelin.Compiler(features=features, weights=storage).compile(flow)
    _check(net, flow, rng)


@pytest.mark.parametrize("threads", [1, 3])
def test_batched_weights_and_threads(threads):
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", (3, 5, 70))
    w = random_array(rng, "float32", (3, 70, 300))
    f.matmul(x, f.const(w), name="y")
    net = myelin.Compiler(weights="bfloat16", threads=threads).compile(flow)
    data = net.cell("f").instance()
    value = random_array(rng, "float32", (3, 5, 70))
    data[x] = value
    data.compute()
    want = value.astype(np.float64) @ _rounded(w, "bfloat16")
    assert relative_error(np.asarray(data["f/y"]), want) < 3e-6


@pytest.mark.parametrize("storage", sorted(STORAGE))
def test_layer_with_epilogue(storage):
    """relu(x W + b) stays one FusedMatMul reading the narrow weights; the bias (not a
    product's B) keeps float32."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", (1, 784))
    w = random_array(rng, "float32", (784, 512), -0.1, 0.1)
    bias = random_array(rng, "float32", (512,))
    f.relu(f.add(f.matmul(x, f.const(w)), f.const(bias)), name="y")
    net = myelin.Compiler(weights=storage).compile(flow)
    (step,) = [s for s in net.cell("f").steps if not s.noop]
    assert step.type == "FusedMatMul" and step.attrs["weights"] == storage
    data = net.cell("f").instance()
    value = random_array(rng, "float32", (1, 784))
    data[x] = value
    data.compute()
    want = np.maximum(value.astype(np.float64) @ _rounded(w, storage) + bias, 0)
    assert relative_error(np.asarray(data["f/y"]), want) < 3e-6
    assert relative_error(np.asarray(data["f/y"]),
                          np.maximum(value.astype(np.float64) @ w + bias, 0)) > 1e-5


def test_special_weights(caplog):
    """Infinities and NaN stay what they are, subnormal float32 weights round to the nearest
    value of the type; weights past float16's range stay finite in bfloat16, and with
    float16 the product keeps them float32 (with a warning) rather than make them infinite."""
    special = np.array([[-np.inf, 2.0, 3e38, np.nan, 1e-40, 0.5, -0.0, 1e-7]], np.float32)
    for weights, storage in ((special, "bfloat16"), (special, "float16"),
                             (special * 1e-30, "float16"), (np.array([[7e4]], np.float32),
                                                            "float16")):
        flow = myelin.Flow()
        f = myelin.Builder(flow, "f")
        x = f.var("x", "float32", (1, 1))
        f.matmul(x, f.const(weights), name="y")
        net = myelin.Compiler(weights=storage).compile(flow)
        data = net.cell("f").instance()
        data[x] = np.ones((1, 1), np.float32)
        data.compute()
        narrow = not np.any(np.abs(weights[np.isfinite(weights)]) > 65504) or \
            storage == "bfloat16"
        want = weights.astype(STORAGE[storage]).astype(np.float32) if narrow else weights
        np.testing.assert_array_equal(np.asarray(data["f/y"]), want)
        (step,) = [s for s in net.cell("f").steps if not s.noop]
        assert step.attrs.get("weights", "") == (storage if narrow else "")
    assert "exceed float16's range" in caplog.text


def test_only_constant_float32_products():
    """Variable B, learnable weights and float64 products keep their types."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", (2, 8))
    f.matmul(x, f.var("b", "float32", (8, 4)), name="variable")
    learnable = f.array("w", random_array(rng, "float32", (8, 4)))
    learnable.learnable = True
    f.matmul(x, learnable, name="learnable")
    f.matmul(f.var("x64", "float64", (2, 8)), f.const(random_array(rng, "float64", (8, 4))),
             name="double")
    net = myelin.Compiler(weights="bfloat16").compile(flow)
    assert not any(op.attrs.get("weights") for op in net.flow.funcs["f"].ops)


def test_bad_option():
    with pytest.raises(myelin.CompileError, match="weights"):
        myelin.Compiler(weights="int8")
    with pytest.raises(myelin.CompileError, match="weights"):
        myelin.Compiler(weights="bfloat16", backend="cuda")


def test_compile_cache_tells_the_options_apart(tmp_path):
    rng = np.random.default_rng()
    flow = _products(rng, [(1, 64, 48)])
    x = flow.funcs["f0"].ops[0].inputs[0]
    value = random_array(rng, "float32", x.shape)
    results = {}
    for storage in (None, "bfloat16", None, "bfloat16"):
        compiler = myelin.Compiler(weights=storage, cache=tmp_path)
        data = compiler.compile(flow).cell("f0").instance()
        assert ("cache" in compiler.timings) == (storage in results)
        data[x] = value
        data.compute()
        results.setdefault(storage, []).append(np.asarray(data["f0/y"]).copy())
    for storage, (first, again) in results.items():
        np.testing.assert_array_equal(first, again)
    assert not np.array_equal(results[None][0], results["bfloat16"][0])


def test_saved_network_keeps_narrow_weights(tmp_path):
    rng = np.random.default_rng()
    flow = _products(rng, [(1, 300, 70)])
    net = myelin.Compiler(weights="bfloat16").compile(flow)
    path = tmp_path / "net.myelin"
    net.save(str(path))
    loaded = myelin.load(str(path))
    _check(loaded, flow, rng)


def test_weights_attribute_is_checked_and_only_for_float32():
    """An unknown storage type is an error of the op; on a float64 product the attribute
    changes nothing (the kernel keeps B float64)."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    with pytest.raises(myelin.ShapeError, match="weights 'int8'"):
        f.op("MatMul", [f.var("x", "float32", (2, 8)), f.const(np.ones((8, 4), np.float32))],
             attrs={"weights": "int8"})
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float64", (2, 8))
    weights = np.full((8, 4), 1 + 2 ** -20)
    f.op("MatMul", [x, f.const(weights)], name="y", attrs={"weights": "bfloat16"})
    data = myelin.Compiler().compile(flow).cell("f").instance()
    data[x] = np.ones((2, 8))
    data.compute()
    np.testing.assert_array_equal(np.asarray(data["f/y"]), np.full((2, 4), 8 * (1 + 2 ** -20)))
