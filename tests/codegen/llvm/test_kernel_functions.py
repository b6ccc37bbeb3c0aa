"""Kernel functions: steps with the same kernel share one compiled function, and the code of a
kernel compiled for one network is taken from the compile cache for another."""

import logging
import os

import numpy as np
import pytest

import myelin
from jitcheck import relative_error
from myelin.codegen.llvm import engine, kernelfunc
from myelin.codegen.llvm.codecache import CodeCache
from myelin.codegen.llvm.kernels.base import may_alias
from myelin.plan.cell import LOCAL, TensorSpec


def chain_flow(weights):
    """y = relu(...relu(relu(x W0) W1)... Wn): blocks of the same shapes, weights of their
    own."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    h = f.var("x", myelin.DT_FLOAT, [8, 64])
    for i, w in enumerate(weights):
        h = f.relu(f.matmul(h, f.array(f"W{i}", w)))
    f.rename(h, "y")
    return flow


def expected(x, weights):
    h = x.astype(np.float64)
    for w in weights:
        h = np.maximum(h @ w, 0)
    return h


def compute(network, x):
    data = network.cell("f").instance()
    data["f/x"] = x
    data.compute()
    return np.asarray(data["f/y"])


@pytest.fixture
def weights():
    rng = np.random.default_rng(3)
    return [rng.standard_normal((64, 64)).astype(np.float32) / 8 for _ in range(4)]


@pytest.fixture
def compiled(monkeypatch):
    """The number of modules each compile hands LLVM (cells' and kernels'), as a list."""
    counts = []
    results = engine.Compilation.results

    def counting(compilation, *args, **kwargs):
        counts.append(len(compilation.modules))
        return results(compilation, *args, **kwargs)

    monkeypatch.setattr(engine.Compilation, "results", counting)
    return counts


@pytest.mark.parametrize("threads", [1, 2])
def test_identical_steps_share_one_function(weights, threads):
    network = myelin.Compiler(cache=False, threads=threads, dump=True).compile(
        chain_flow(weights))
    steps = [step for step in network.cell("f").steps if not step.noop]
    assert len(steps) == 4
    called = [line.split("@")[1].split("(")[0].strip('"')
              for line in network.dumps["llvm"].splitlines()
              if "call i32 @" in line and kernelfunc.PREFIX in line]
    # The cell calls one kernel for the four steps, each step with its own packed weights.
    assert len(called) == 4 and len(set(called)) == 1
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    assert relative_error(compute(network, x), expected(x, weights)) < 1e-5


@pytest.fixture
def emitted(monkeypatch):
    """The steps whose kernels each compile emits (not taken from an earlier step's), as a
    list of their names."""
    names = []
    emit = kernelfunc._emit

    def counting(step, *args, **kwargs):
        names.append(step.name)
        return emit(step, *args, **kwargs)

    monkeypatch.setattr(kernelfunc, "_emit", counting)
    return names


def test_steps_of_one_signature_are_emitted_once(weights, emitted):
    """The four products (their weights packed at compile time, each its own) are emitted
    once; each step keeps its own packed weights."""
    network = myelin.Compiler(cache=False, threads=1).compile(chain_flow(weights))
    assert len(emitted) == 1
    x = np.random.default_rng(4).standard_normal((8, 64)).astype(np.float32)
    assert relative_error(compute(network, x), expected(x, weights)) < 1e-5


@pytest.mark.parametrize("channels, size, kernel", [
    (32, 1, "ConvChannels"), (16, 12, "ConvGemm"), (16, 12, "BlockedConv")])
def test_convolutions_of_one_signature_share_code_with_weights_of_their_own(
        channels, size, kernel, emitted):
    """(The plain kernels with the channel-blocked layout off.)"""
    rng = np.random.default_rng(5)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [1, channels, size, size])
    h, kernels = x, []
    for i in range(3):
        w = rng.standard_normal((channels, channels, 1, 1)).astype(np.float32) / 4
        kernels.append(w[:, :, 0, 0])
        h = f.relu(f.op("Conv", [h, f.array(f"W{i}", w)], None, {}))
    f.rename(h, "y")
    disable = () if kernel == "BlockedConv" else ("block_channels",)
    network = myelin.Compiler(cache=False, threads=1, disable_passes=disable).compile(flow)
    convs = [step for step in network.cell("f").steps if step.type in ("Conv", "FusedConv")]
    assert {step.kernel.name for step in convs} == {kernel}
    assert len(set(emitted) & {step.name for step in convs}) < 3
    value = rng.standard_normal((1, channels, size, size)).astype(np.float32)
    want = value.astype(np.float64)[0]
    for w in kernels:
        want = np.maximum(np.einsum("oc,chw->ohw", w, want), 0)
    data = network.cell("f").instance()
    data["f/x"] = value
    data.compute()
    assert relative_error(np.asarray(data["f/y"])[0], want) < 1e-5


def test_steps_differing_in_scales_alone_share_code(emitted):
    """Products whose epilogues shift and scale by constants of their own (as an int8
    network's layers requantize) take those constants as arguments and share one kernel;
    constants the steps all have alike, or that a Maximum reads, stay compiled in: the
    fourth product's floor differs, so its kernel is its own and has its constants in it."""
    rng = np.random.default_rng(6)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    h = f.var("x", myelin.DT_FLOAT, [8, 64])
    weights = [rng.standard_normal((64, 64)).astype(np.float32) / 8 for _ in range(4)]
    shifts, scales, floors = [0.25, -0.5, 3.0, 0.75], [0.7, 1.3, 0.45, 0.9], [-0.1] * 3 + [0.2]
    for i, w in enumerate(weights):
        product = f.matmul(h, f.array(f"W{i}", w))
        scaled = f.mul(f.add(product, f.array(f"shift{i}", np.float32(shifts[i]))),
                       f.array(f"scale{i}", np.float32(scales[i])))
        h = f.maximum(scaled, f.array(f"floor{i}", np.float32(floors[i])))
    f.rename(h, "y")
    network = myelin.Compiler(cache=False, threads=1).compile(flow)
    products = [step for step in network.cell("f").steps if step.type == "FusedMatMul"]
    assert len(products) == 4 and len(set(emitted) & {step.name for step in products}) == 2
    small = {spec.name.split("/")[-1]: spec.passed for step in products
             for spec in (t.root() for t in step.inputs) if spec.elements == 1}
    assert small == {"shift0": True, "shift1": True, "shift2": True, "scale0": True,
                     "scale1": True, "scale2": True, "floor0": False, "shift3": False,
                     "scale3": False, "floor3": False}, small
    x = rng.standard_normal((8, 64)).astype(np.float32)
    want = x.astype(np.float64)
    for i, w in enumerate(weights):
        want = np.maximum((want @ w + shifts[i]) * scales[i], floors[i])
    data = network.cell("f").instance()
    data["f/x"] = x
    data.compute()
    assert relative_error(np.asarray(data["f/y"]), want) < 1e-5


@pytest.mark.parametrize("threads", [1, 2])
def test_element_wise_steps_of_other_sizes_share_code(threads, emitted):
    """Element-wise steps whose operands are runs of their elements (or one value) read
    their count as they run: steps alike but for their sizes share one kernel (a Calculate
    and a single op each), right for counts with and without a partial last vector; the run
    large enough to be split over threads has its own, and so has a step of a few elements
    (code of its own count)."""
    rng = np.random.default_rng(7)
    sizes = [5, 70, 100, 1037, 89605]
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    for n in sizes:
        x = f.var(f"x{n}", myelin.DT_FLOAT, [1, n])
        y = f.var(f"y{n}", myelin.DT_FLOAT, [n])
        f.rename(f.tanh(f.add(f.mul(x, 1.5), f.array(f"shift{n}", np.float32(n / 7)))),
                 f"z{n}")
        f.rename(f.sub(y, x), f"d{n}")
    network = myelin.Compiler(cache=False, threads=threads).compile(flow)
    steps = network.cell("f").steps
    calculates = {s.name for s in steps if s.type == "Calculate"}
    subtractions = {s.name for s in steps if s.type == "Sub"}
    assert len(calculates) == len(subtractions) == len(sizes)
    assert len(set(emitted) & calculates) == 3 and len(set(emitted) & subtractions) == 3
    data = network.cell("f").instance()
    for n in sizes:
        data[f"f/x{n}"] = rng.standard_normal((1, n)).astype(np.float32)
        data[f"f/y{n}"] = rng.standard_normal(n).astype(np.float32)
    data.compute()
    for n in sizes:
        x = np.asarray(data[f"f/x{n}"]).astype(np.float64)
        y = np.asarray(data[f"f/y{n}"]).astype(np.float64)
        assert relative_error(np.asarray(data[f"f/z{n}"]), np.tanh(x * 1.5 + n / 7)) < 1e-6
        assert relative_error(np.asarray(data[f"f/d{n}"]), y - x) < 1e-6


def _conv_reference(x, w, b, stride, pad):
    """relu(conv(x, w) + b) in float64, for one image (C, H, W)."""
    x = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad)))
    k = w.shape[2]
    rows = (x.shape[1] - k) // stride + 1
    columns = (x.shape[2] - k) // stride + 1
    y = np.zeros((w.shape[0], rows, columns))
    for i in range(k):
        for j in range(k):
            patch = x[:, i:i + stride * rows:stride, j:j + stride * columns:stride]
            y += np.einsum("oc,chw->ohw", w[:, :, i, j], patch)
    return np.maximum(y + b[:, None, None], 0)


def _conv_chain(layers, size, rng):
    """A flow of convolutions with biases and ReLUs: ``layers`` of (input channels, output
    channels, kernel, stride, pad) on an image of ``size`` x ``size``; with its parameters
    and a function computing the reference for an input."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    h = f.var("x", myelin.DT_FLOAT, [1, layers[0][0], size, size])
    params = []
    for i, (cin, cout, k, stride, pad) in enumerate(layers):
        w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32)
        params.append((w, b, stride, pad))
        h = f.relu(f.op("Conv", [h, f.array(f"W{i}", w), f.array(f"B{i}", b)], None,
                        {"strides": [stride] * 2, "pads": [pad] * 4}))
    f.rename(h, "y")

    def reference(value):
        want = value[0]
        for w, b, stride, pad in params:
            want = _conv_reference(want, w, b, stride, pad)
        return want

    return flow, reference


def _check_conv_chain(network, layers, size, reference, rng):
    convs = [step for step in network.cell("f").steps if step.type in ("Conv", "FusedConv")]
    assert [step.kernel.name for step in convs] == ["BlockedConv"] * len(layers)
    value = rng.standard_normal((1, layers[0][0], size, size)).astype(np.float32)
    data = network.cell("f").instance()
    data["f/x"] = value
    data.compute()
    assert relative_error(np.asarray(data["f/y"])[0], reference(value)) < 1e-5


# 1x1 layers of other planes and strides, whose biases of 16 values a kernel would compile
# into its code; Winograd layers of other input channels.
BLOCKED_CHAINS = [([(16, 16, 1, 1, 0), (16, 16, 1, 2, 0)], 12, "_tile_function"),
                  ([(16, 32, 3, 1, 1), (32, 32, 3, 1, 1)], 14, "_products_function")]


@pytest.mark.parametrize("layers, size, helper", BLOCKED_CHAINS)
def test_blocked_layers_of_other_sizes_share_their_tile_functions(layers, size, helper,
                                                                  monkeypatch):
    """One register tile function for both layers (a shared tile reads each layer's own
    bias, not the first's compiled into it)."""
    from myelin.codegen.llvm.kernels import conv_blocked, conv_winograd
    module = conv_blocked if helper == "_tile_function" else conv_winograd
    built = []
    build = getattr(module, helper)
    monkeypatch.setattr(module, helper, lambda *args: built.append(args) or build(*args))
    rng = np.random.default_rng(6)
    flow, reference = _conv_chain(layers, size, rng)
    network = myelin.Compiler(cache=False, threads=1).compile(flow)
    assert len(built) == 1
    _check_conv_chain(network, layers, size, reference, rng)


def test_transposes_of_other_shapes_share_their_plane_function(monkeypatch):
    """Transposes of other sizes (leftover rows and columns or none, one plane or several)
    call one function for their planes, and each is exact."""
    from myelin.codegen.llvm.kernels import movement
    built = []
    build = movement._plane_function
    monkeypatch.setattr(movement, "_plane_function",
                        lambda *args: built.append(args) or build(*args))
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    shapes = [(16, 32), (37, 29), (3, 20, 18)]
    for i, shape in enumerate(shapes):
        perm = list(range(len(shape) - 2)) + [len(shape) - 1, len(shape) - 2]
        f.rename(f.transpose(f.var(f"x{i}", myelin.DT_FLOAT, shape), perm), f"y{i}")
    network = myelin.Compiler(cache=False, threads=1).compile(flow)
    assert len(built) == 1
    data = network.cell("f").instance()
    rng = np.random.default_rng(8)
    xs = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    for i, x in enumerate(xs):
        data[f"f/x{i}"] = x
    data.compute()
    for i, x in enumerate(xs):
        np.testing.assert_array_equal(np.asarray(data[f"f/y{i}"]), np.swapaxes(x, -1, -2))


@pytest.mark.parametrize("layers, size", [([(32, 32, 1, 1, 0), (32, 32, 1, 2, 0)], 12),
                                          BLOCKED_CHAINS[1][:2]])
def test_kernels_and_the_helpers_their_helpers_call_come_from_the_cache(
        tmp_path, layers, size, compiled):
    """A blocked convolution's kernel calls its outlined body, which calls the shared tile
    functions: a network of the same layers (other weights; biases too large to be compiled
    into the code) takes all three from the cache."""
    rng = np.random.default_rng(7)
    myelin.Compiler(cache=tmp_path, threads=1).compile(_conv_chain(layers, size, rng)[0])
    flow, reference = _conv_chain(layers, size, rng)         # other weights
    network = myelin.Compiler(cache=tmp_path, threads=1).compile(flow)
    assert compiled[1] == 1                     # its cell alone
    _check_conv_chain(network, layers, size, reference, rng)


def test_kernels_come_from_the_cache_for_another_network(tmp_path, weights, compiled):
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    myelin.Compiler(cache=tmp_path, threads=1).compile(chain_flow(weights))
    first = compiled[0]     # the cell's module, the kernel's and its tile helpers'
    assert first >= 2
    others = [w[::-1].copy() for w in weights]        # another network of the same kernels
    network = myelin.Compiler(cache=tmp_path, threads=1).compile(chain_flow(others))
    assert compiled == [first, 1]              # its cell alone
    assert relative_error(compute(network, x), expected(x, others)) < 1e-5


def test_a_damaged_kernel_entry_is_compiled_afresh(tmp_path, weights, compiled, caplog):
    x = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    myelin.Compiler(cache=tmp_path, threads=1).compile(chain_flow(weights))
    first = compiled[0]
    kernels = CodeCache(tmp_path).kernels
    for info in kernels.entries():
        with open(info.path, "r+b") as file:
            file.truncate(info.size // 2)
    with caplog.at_level(logging.WARNING, logger="myelin.cache"):
        network = myelin.Compiler(cache=tmp_path, threads=1).compile(chain_flow(weights))
    assert "ignoring compile cache entry" in caplog.text
    assert compiled == [first, first]
    assert relative_error(compute(network, x), expected(x, weights)) < 1e-5
    # The whole network is used again only with its kernels' entries (rebuilt now).
    for info in kernels.entries():
        os.remove(info.path)
    compiler = myelin.Compiler(cache=tmp_path, threads=1)
    network = compiler.compile(chain_flow(weights))
    assert "llvm" in compiler.timings and compiled == [first] * 3
    assert relative_error(compute(network, x), expected(x, weights)) < 1e-5


def test_which_roots_may_alias():
    """Kernel functions' and outlined tasks' arguments are noalias unless another root may
    overlap: an instance tensor at an overlapping offset (an output written in place over its
    input), or another caller's array; a global never."""
    def spec(name, offset=None, ref=False, address=None):
        return TensorSpec(name, "float32", (4,), LOCAL, offset=offset, ref=ref, address=address)
    x, y, z = spec("x", 0), spec("y", 0), spec("z", 64)         # y takes over x's 16 bytes
    a, b, w = spec("a", ref=True), spec("b", ref=True), spec("w", address=4096)
    assert may_alias(x, [x, y, z]) and may_alias(y, [x, y, z])
    assert not may_alias(z, [x, y, z]) and not may_alias(x, [x, z])
    assert may_alias(a, [a, b, x]) and not may_alias(a, [a, x, w])
    assert not may_alias(w, [w, x, y, a])
