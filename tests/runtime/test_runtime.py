"""The runtime API: networks, cells, instances, tensor views, errors, and threads."""

import threading
import time

import numpy as np
import pytest

import myelin
from jitcheck import guide_flow
from myelin.memory import address


def numpy_guide(xv, W, b):
    z = np.maximum(xv.astype(np.float64) @ W.data + b.data, 0)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_guide_example_verbatim():
    """The guide's "Putting it all together", with `import myelin` for the sling imports."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    W = f.array("W", np.random.rand(64, 256).astype(np.float32))
    b = f.array("b", np.random.rand(256).astype(np.float32))
    x = f.var("x", myelin.DT_FLOAT, [1, 64])
    y = f.softmax(f.relu(f.add(f.matmul(x, W), b)), name="y")
    compiler = myelin.Compiler()
    net = compiler.compile(flow)
    cell = net.cell("f")
    data = cell.instance()
    xdata = data[x]
    for i in range(64):
        xdata[0, i] = 5
    data.compute()
    ydata = data[y]
    result = np.asarray(ydata)
    expected = myelin.reference.run(flow, "f", {x: np.full((1, 64), 5, np.float32)})[y.name]
    # Logits near 160 carry float32 rounding of ~2e-5, which exp turns into relative error.
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-7)
    assert abs(result.sum() - 1) < 1e-5
    assert np.asarray(ydata).argmax() == expected.argmax()


def test_tensor_views_are_zero_copy_and_writeable():
    flow, x, y, W, b = guide_flow(np.random.default_rng())
    data = myelin.Compiler().compile(flow).cell("f").instance()
    view = np.asarray(data[x])
    view[...] = 0.25
    assert data[x][0, 3] == 0.25
    data[x][0, 5] = 2.0
    assert view[0, 5] == 2.0
    tensor = data[y]
    assert tensor.name() == "f/y" and tensor.rank() == 2 and tensor.shape() == [1, 256]
    assert tensor.type() == "float32"
    data.compute()
    out = np.asarray(tensor)
    np.testing.assert_allclose(out, numpy_guide(view, W, b), rtol=1e-5, atol=1e-7)


def test_tensor_element_access_errors_are_input_errors():
    flow, x, *_ = guide_flow(np.random.default_rng())
    tensor = myelin.Compiler().compile(flow).cell("f").instance()[x]
    rows = list(tensor)
    assert len(rows) == 1 and rows[0].shape == (64,)
    for index in [(0, 64), (1, 0), (0, 0, 0), "a", 1.5]:
        with pytest.raises(myelin.InputError, match="tensor f/x of shape"):
            tensor[index]
    for index, value in [((0, 64), 1.0), ((0, 0), "a"), ((0, slice(None)), [1, 2]),
                         ((0, 0), [[1, 2]])]:
        with pytest.raises(myelin.InputError, match="cannot set"):
            tensor[index] = value


def test_lookup_by_name_index_and_variable():
    flow, x, y, W, b = guide_flow(np.random.default_rng())
    cell = myelin.Compiler().compile(flow).cell("f")
    data = cell.instance()
    index = cell.index("f/x")
    assert cell.index(x) == index
    data[index] = np.ones((1, 64), np.float32)
    assert np.asarray(data["f/x"]).sum() == 64
    assert "f/x" in cell and "f/nothing" not in cell
    with pytest.raises(myelin.InputError, match="no tensor"):
        data["f/nothing"]
    with pytest.raises(myelin.InputError):
        data[1000]


def test_set_input_checks_dtype_and_shape():
    flow, x, y, W, b = guide_flow(np.random.default_rng())
    data = myelin.Compiler().compile(flow).cell("f").instance()
    with pytest.raises(myelin.InputError, match="shape"):
        data[x] = np.zeros((2, 64), np.float32)
    with pytest.raises(myelin.InputError, match="float32"):
        data[x] = np.zeros((1, 64), np.complex64)
    data[x] = np.zeros((1, 64), np.float64)  # same-kind conversion is allowed


def test_clear_zeroes_the_instance():
    flow, x, y, W, b = guide_flow(np.random.default_rng())
    data = myelin.Compiler().compile(flow).cell("f").instance()
    data[x] = np.ones((1, 64), np.float32)
    data.compute()
    data.clear()
    assert not np.asarray(data[x]).any() and not np.asarray(data[y]).any()


def test_network_globals():
    flow, x, y, W, b = guide_flow(np.random.default_rng())
    net = myelin.Compiler().compile(flow)
    np.testing.assert_array_equal(np.asarray(net[W]), W.data)
    assert net.tensor("f/b").shape() == [256]
    with pytest.raises(myelin.InputError):
        net["f/none"]
    with pytest.raises(myelin.InputError, match="no cell"):
        net.cell("g")
    with pytest.raises(myelin.InputError, match="is a constant"):   # the code may hold it
        net["f/b"] = np.zeros(256, np.float32)
    np.testing.assert_array_equal(np.asarray(net[b]), b.data)


def test_cell_layout_dump():
    flow, x, y, W, b = guide_flow(np.random.default_rng())
    cell = myelin.Compiler(opt_level=0).compile(flow).cell("f")     # one step per op
    text = str(cell)
    assert text.startswith("cell f {  // size ")
    assert "input var f/x: float32[1x64]" in text
    assert "const f/W: float32[64x256]" in text
    assert "= MatMul[" in text and "(f/x, f/W)" in text
    assert "f/y = MulExpr[" in text
    assert cell.instance_size < cell.unshared_size
    for spec in cell.tensors:
        assert spec.offset % spec.alignment == 0 or spec.view_of is not None


def test_threads_compute_concurrently_with_same_results():
    flow, x, y, W, b = guide_flow(np.random.default_rng())
    cell = myelin.Compiler().compile(flow).cell("f")
    rng = np.random.default_rng()
    inputs = [rng.random((1, 64)).astype(np.float32) for _ in range(2)]
    serial = []
    for value in inputs:
        data = cell.instance()
        data[x] = value
        data.compute()
        serial.append(np.asarray(data[y]).copy())
    results = [None, None]

    def work(k):
        data = cell.instance()
        data[x] = inputs[k]
        out = np.asarray(data[y])
        for _ in range(10000):
            data.compute()
            if not np.array_equal(out, serial[k]):
                results[k] = "mismatch"
                return
        results[k] = out.copy()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(2):
        assert not isinstance(results[k], str)
        np.testing.assert_array_equal(results[k], serial[k])


def test_parallel_kernels_on_concurrent_threads():
    """Cells whose kernels split work over the worker pool still compute correctly when
    several Python threads run instances at once (one uses the pool, the others run their
    tasks alone), with the same bits every time."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    a = f.var("a", "float32", [96, 200])
    weights = rng.standard_normal((200, 300)).astype(np.float32)
    y = f.tanh(f.matmul(a, f.array("W", weights)), name="y")
    cell = myelin.Compiler(threads=2).compile(flow).cell("f")
    inputs = [rng.standard_normal((96, 200)).astype(np.float32) for _ in range(3)]
    expected = [np.tanh(value.astype(np.float64) @ weights.astype(np.float64))
                for value in inputs]
    results = [None] * 3

    def work(k):
        data = cell.instance()
        data[a] = inputs[k]
        data.compute()
        first = np.asarray(data[y]).copy()
        for _ in range(300):
            data.compute()
            if not np.array_equal(np.asarray(data[y]), first):
                results[k] = "changed"
                return
        results[k] = first

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(3):
        assert not isinstance(results[k], str), results[k]
        # 200-term float32 dot products of magnitude ~15 carry about 1e-5 of rounding,
        # which tanh passes on unchanged near zero.
        np.testing.assert_allclose(results[k], expected[k], rtol=1e-4, atol=1e-4)


def test_unsupported_ops_are_listed_at_once():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [4])
    f.op("Frobnicate", [x])
    f.op("Twiddle", [f.exp(x)])
    with pytest.raises(myelin.UnsupportedOpError) as info:
        myelin.Compiler().compile(flow)
    assert len(info.value.ops) == 2
    assert "Frobnicate" in str(info.value) and "Twiddle" in str(info.value)


def test_feature_presets_select_isa():
    assert myelin.Compiler(features="sse").target.vector_bytes == 16
    assert myelin.Compiler(features="avx").target.isa() == "AVX"
    with pytest.raises(myelin.MyelinError):
        myelin.Compiler(features="bogus")  # neither a preset nor +/- items


def _reference_flow(rows=3, columns=5):
    """y = tanh(x + 1) and z = x reshaped, with x a reference input, and a matrix product of
    a reference input large enough to be split over threads."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [rows, columns])
    x.ref = True
    f.tanh(f.add(x, 1.0), name="y")
    f.reshape(x, [columns, rows], name="z")
    a = f.var("a", myelin.DT_FLOAT, [120, 200])
    a.ref = True
    f.matmul(a, f.array("w", np.random.default_rng(0).standard_normal((200, 150), np.float32)),
             name="p")
    return flow, x, a


@pytest.mark.parametrize("threads", [1, 2])
def test_reference_inputs_are_read_in_place(threads):
    flow, x, a = _reference_flow()
    net = myelin.Compiler(threads=threads).compile(flow)
    cell = net.cell("f")
    assert cell.spec("f/x").ref and cell.spec("f/x").instance_bytes == 8
    data = cell.instance()
    rng = np.random.default_rng()
    xs, big = rng.random((3, 5), np.float32), rng.random((120, 200), np.float32)
    data.bind(x, xs)
    data.bind(a, big)
    xs[...] = rng.random((3, 5), np.float32)     # the cell reads the array as it is now
    data.compute()
    np.testing.assert_allclose(data["f/y"].numpy(), np.tanh(xs + 1), rtol=1e-6)
    np.testing.assert_array_equal(data["f/z"].numpy(), xs.reshape(5, 3))
    assert not np.shares_memory(data["f/z"].numpy(), xs)   # outputs are the cell's own
    w = net.tensor("f/w").numpy()
    np.testing.assert_allclose(data["f/p"].numpy(), big @ w, rtol=1e-4, atol=1e-4)
    assert np.shares_memory(data["f/x"].numpy(), xs)
    data.clear()                                  # bindings survive clear()
    data.compute()
    np.testing.assert_allclose(data["f/y"].numpy(), np.tanh(xs + 1), rtol=1e-6)


def test_reference_inputs_assignment_and_errors():
    flow, x, a = _reference_flow()
    data = myelin.Compiler().compile(flow).cell("f").instance()
    with pytest.raises(myelin.InputError, match="not bound"):
        data.compute()
    with pytest.raises(myelin.InputError, match="not bound"):
        data["f/x"]
    with pytest.raises(myelin.InputError, match="float32"):
        data.bind(x, np.zeros((3, 5), np.float64))
    with pytest.raises(myelin.InputError, match="non-contiguous"):
        data.bind(x, np.zeros((5, 3), np.float32).T)
    with pytest.raises(myelin.InputError, match="shape"):
        data.bind(x, np.zeros((3, 4), np.float32))
    with pytest.raises(myelin.InputError, match="not a reference"):
        data.bind("f/y", np.zeros((3, 5), np.float32))
    values = np.arange(15, dtype=np.float64).reshape(5, 3).T     # converted into a copy
    data[x] = values
    data[a] = np.ones((120, 200), np.float32)
    data.compute()
    np.testing.assert_allclose(data["f/y"].numpy(), np.tanh(values + 1), rtol=1e-6)
    with pytest.raises(myelin.InputError, match="shape"):
        data[x] = np.zeros((2, 2))


def test_a_binder_binds_what_bind_takes_and_refuses_the_rest():
    flow, x, a = _reference_flow()
    data = myelin.Compiler().compile(flow).cell("f").instance()
    bind = data.binder(x)
    data.bind(a, np.ones((120, 200), np.float32))
    rng = np.random.default_rng()
    for values in (rng.random((3, 5), np.float32), rng.random((3, 5), np.float32)):
        assert bind(values)
        data.compute()
        np.testing.assert_allclose(data["f/y"].numpy(), np.tanh(values + 1), rtol=1e-6)
    for refused in (np.zeros((3, 5)), np.zeros((5, 3), np.float32).T,
                    np.zeros((3, 4), np.float32), [[0.0] * 5] * 3, None):
        assert not bind(refused)
    data.compute()                                # still reads the last array bound
    np.testing.assert_allclose(data["f/y"].numpy(), np.tanh(values + 1), rtol=1e-6)
    with pytest.raises(myelin.InputError, match="not a reference"):
        data.binder("f/y")


def test_a_runner_binds_in_native_code_what_bind_takes_or_nothing():
    """An instance's runner takes its arguments by position, binds those that are arrays of
    the reference inputs' dtypes and shapes and computes; where one is not, it returns -1
    and binds nothing."""
    flow, x, a = _reference_flow()
    cell = myelin.Compiler().compile(flow).cell("f")
    data = cell.instance()
    run = data.runner(3, {2: x, 0: a})       # run(a, unused, x)
    rng = np.random.default_rng()
    big = rng.random((120, 200), np.float32)
    slot = cell.spec(x).offset // 8
    for values in (rng.random((3, 5), np.float32), rng.random((3, 5), np.float32)):
        assert run(big, None, values) == 0
        np.testing.assert_allclose(data["f/y"].numpy(), np.tanh(values + 1), rtol=1e-6)
        assert data._words[slot] == address(values)

    class Tagged(np.ndarray):
        pass

    other = rng.random((3, 5), np.float32)
    for refused in (np.zeros((3, 5)), np.zeros((5, 3), np.float32).T,
                    np.zeros((3, 4), np.float32), np.zeros(15, np.float32), other.view(Tagged),
                    other.view(np.dtype(np.float32, metadata={"equal": "not the same"})),
                    [[0.0] * 5] * 3, None):
        assert run(big, None, refused) == -1
        assert run(refused, None, other) == -1          # x is fine, a is not: x stays
        assert data._words[slot] == address(values)
    assert run(big, None) == -1 and run(big, None, values, values) == -1
    assert run(big, None, other) == 0
    np.testing.assert_allclose(data["f/y"].numpy(), np.tanh(other + 1), rtol=1e-6)
    with pytest.raises(myelin.InputError, match="not a reference"):
        data.runner(1, {0: "f/y"})
    with pytest.raises(myelin.InputError, match="binds them all"):
        data.runner(1, {0: x})


def test_address_is_the_data_pointer():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    for array in (base, base[1:], base[:, 2:], base.T, base[::2, ::3], np.float32(1.5) * base,
                  np.zeros(0), np.array(3), np.arange(5, dtype=np.int8)[1:]):
        assert address(array) == array.__array_interface__["data"][0]


def test_one_instance_on_two_threads_at_once_is_refused():
    """Computing one instance from two threads at once would mix their tensors: the second
    caller gets InputError while the first computes, and the first's results stay right."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [256, 256])
    W = f.array("W", rng.standard_normal((256, 256)).astype(np.float32) / 16)
    y = f.tanh(f.matmul(f.tanh(f.matmul(x, W)), W), name="y")
    data = myelin.Compiler(threads=1).compile(flow).cell("f").instance()
    data[x] = rng.standard_normal((256, 256)).astype(np.float32)
    data.compute()
    expected = np.asarray(data[y]).copy()
    refused, done, wrong = threading.Event(), threading.Event(), []

    def compute_until_refused():
        while not refused.is_set() and not done.wait(0):
            data.compute()
            if not np.array_equal(np.asarray(data[y]), expected):
                wrong.append(True)

    worker = threading.Thread(target=compute_until_refused)
    worker.start()
    deadline = time.monotonic() + 10    # (the worker computes for all but microseconds)
    try:
        while time.monotonic() < deadline and not refused.is_set():
            try:
                data.compute()
            except myelin.InputError as error:
                assert "computing on another thread" in str(error)
                refused.set()
    finally:
        done.set()
        worker.join()
    assert refused.is_set() and not wrong
    data.compute()                      # free again once the other thread is done


@pytest.mark.parametrize("key", [True, False, np.bool_(True), 1.0, np.float32(0), -1, 99,
                                 None, [0], (0,), np.array(0), b"f/x", slice(0, 1)])
def test_odd_keys_are_input_errors(key):
    flow, x, y, W, b = guide_flow(np.random.default_rng())
    net = myelin.Compiler().compile(flow)
    cell = net.cell("f")
    data = cell.instance()
    for lookup in (lambda: data[key], lambda: data.tensor(key), lambda: data.array(key),
                   lambda: cell.spec(key)):
        with pytest.raises(myelin.InputError):
            lookup()
    with pytest.raises(myelin.InputError):
        data[key] = np.ones((1, 64), np.float32)
    if not isinstance(key, (int, np.integer)):
        with pytest.raises(myelin.InputError):
            net[key]
        assert key not in cell
    assert np.asarray(data[0]).shape == (1, 64)     # an int index still works


@pytest.mark.parametrize("value", [[[1.0] * 64, [1.0] * 63], [[1.0] * 63 + ["x"]], "x" * 64,
                                   None, object(), np.ones((1, 64), object), {"a": 1},
                                   [[1j] * 64], 2 ** 80, b"\0" * 64])
def test_values_that_are_no_arrays_of_the_tensor_are_input_errors(value):
    flow, x, y, W, b = guide_flow(np.random.default_rng())
    net = myelin.Compiler().compile(flow)
    data = net.cell("f").instance()
    with pytest.raises(myelin.InputError):
        data[x] = value


def test_outputs_keep_their_own_space_apart_from_inputs():
    """An output computed as a view of an input (x + 0 simplified to an identity) is still
    a tensor of its own: setting the next input does not change the last output."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    v = f.var("v", "float32", [3])
    f.add(v, f.const(np.zeros(3, np.float32)), name="z")
    data = myelin.Compiler().compile(flow).cell("f").instance()
    data[v] = np.float32([1, 2, 3])
    data.compute()
    out = np.asarray(data["f/z"])
    data[v] = np.float32([7, 7, 7])
    np.testing.assert_array_equal(out, [1, 2, 3])
