"""OnnxModel.run's path: outputs into the caller's arrays (out=), fresh outputs otherwise, the
last signature reused without a cache lookup, and inputs of any layout and kind still right."""

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import myelin.onnx
from myelin.errors import InputError
from myelin.importers.onnx.backend import MyelinBackend

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 3)).astype(np.float32)


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _info(name, shape, elem_type=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem_type, shape)


def _two_outputs():
    """y = relu(x W) and z = x + 1, x: float32[N, 4]."""
    return _model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                   helper.make_node("Relu", ["h"], ["y"]),
                   helper.make_node("Add", ["x", "one"], ["z"])],
                  [_info("x", ["N", 4])], [_info("y", ["N", 3]), _info("z", ["N", 4])],
                  [numpy_helper.from_array(W, "w"),
                   numpy_helper.from_array(np.float32(1), "one")])


def _expected(x):
    return [np.maximum(x @ W, 0), x + 1]


def _batch(n, seed=None):
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def _close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_out_list_and_dict_are_written_and_returned():
    model = myelin.onnx.load(_two_outputs(), cache=False)
    x = _batch(2)
    y, z = np.empty((2, 3), np.float32), np.empty((2, 4), np.float32)
    got = model.run([x], out=[y, z])
    assert got[0] is y and got[1] is z
    _close(got, _expected(x))
    x = _batch(2)
    got = model.run({"x": x}, out={"z": z})          # y fresh
    assert got[1] is z and not np.shares_memory(got[0], y)
    _close(got, _expected(x))
    got = model.run([x], out=(None, z))
    assert got[1] is z
    _close(got, _expected(x))


def test_a_wrong_out_is_an_input_error():
    model = myelin.onnx.load(_two_outputs(), cache=False)
    x = _batch(2)
    y, z = np.empty((2, 3), np.float32), np.empty((2, 4), np.float32)
    readonly = np.empty((2, 4), np.float32)
    readonly.flags.writeable = False
    cases = [([y], "gives 1 arrays; the model has 2 outputs"),
             (y, "out must be a list of arrays in output order or a dict"),
             ({"w": y}, r"out names \['w'\]"),
             ([np.empty((3, 3), np.float32), z], r"out for output y must be a float32 array "
                                                 r"of shape \[2, 3\], not a float32 array of "
                                                 r"shape \[3, 3\]"),
             ([y, np.empty((2, 4))], "out for output z must be a float32 array.*float64"),
             ([y.tolist(), z], "out for output y .*not list"),
             ([y, readonly], "out for output z is a read-only array")]
    for out, message in cases:
        with pytest.raises(InputError, match=message):
            model.run([x], out=out)
    _close(model.run([x], out=[y, z]), _expected(x))   # the model still runs


def test_outputs_are_fresh_arrays_no_later_run_writes_over():
    model = myelin.onnx.load(_two_outputs(), cache=False)
    x1, x2 = _batch(3, 1), _batch(3, 2)
    first = model.run([x1])
    kept = [a.copy() for a in first]
    second = model.run([x2])
    y = np.empty((3, 3), np.float32)
    model.run([x1 * 3], out=[y, None])
    for a, b in zip(first, second):
        assert not np.shares_memory(a, b)
    _close(first, kept)
    _close(second, _expected(x2))


def test_runs_with_the_last_signature_compile_once_and_look_up_nothing(monkeypatch):
    model = myelin.onnx.load(_two_outputs(), cache=False)
    lookups = []
    lookup = model._lookup
    monkeypatch.setattr(model, "_lookup", lambda arrays: lookups.append(1) or lookup(arrays))
    for n in (2, 2, 5, 5, 2, 5, 2):
        x = _batch(n)
        _close(model.run([x]), _expected(x))
        _close(model.run({"x": x}), _expected(x))
    assert [c[1] for c in model.compiles] == ["first run", "x shape [2, 4] -> [5, 4]"]
    assert len(lookups) == 5        # one per change of signature


def test_inputs_of_any_layout_and_kind():
    """Strided arrays, subclasses and arrays of an equal dtype object run right; an array
    rebound or changed in place is read as it is now; another dtype is an InputError, after
    which the model still runs."""

    class Tagged(np.ndarray):
        pass

    model = myelin.onnx.load(_two_outputs(), cache=False)
    x = _batch(3)
    _close(model.run([x]), _expected(x))
    x[...] = _batch(3)                                   # the same array, new values
    _close(model.run([x]), _expected(x))
    equal = np.dtype(np.float32, metadata={"equal": "another object"})
    for other in (np.asfortranarray(x), _batch(6)[::2], x.view(Tagged), _batch(3)[:, ::-1],
                  np.asfortranarray(x).view(Tagged), x.view(equal), x):
        _close(model.run([other]), _expected(np.asarray(other)))
    with pytest.raises(InputError, match="input x is float32, got an array of float64"):
        model.run([x.astype(np.float64)])
    _close(model.run([x]), _expected(x))
    assert len(model.compiles) == 1


def test_inputs_read_as_values_are_part_of_the_signature():
    """A Reshape's shape given as an input (an array or a list): a run with another value is
    not the last one's."""
    model = myelin.onnx.load(_model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                                    [_info("x", [2, 6]), _info("shape", [2], TensorProto.INT64)],
                                    [_info("y", None)]), cache=False)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for shape in ([3, 4], [3, 4], [4, 3], [3, 4], [4, 3]):
        for given in (np.array(shape), shape):
            (y,) = model.run([x, given])
            np.testing.assert_array_equal(y, x.reshape(shape))
    assert len(model.compiles) == 2


def test_an_input_passed_through_comes_out_fresh():
    model = myelin.onnx.load(_model([helper.make_node("Identity", ["x"], ["y"])],
                                    [_info("x", [2, 3])], [_info("y", [2, 3])]), cache=False)
    for x in (np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)):
        (y,) = model.run([x])
        np.testing.assert_array_equal(y, x)
        assert not np.shares_memory(y, x)
        out = np.empty((2, 3), np.float32)
        assert model.run([x], out=[out])[0] is out
        np.testing.assert_array_equal(out, x)


def test_out_with_control_flow_and_stages():
    """A model on the control-flow VM and a staged one write into out too."""
    branch = helper.make_graph([helper.make_node("Neg", ["x"], ["n"])], "then", [],
                               [_info("n", [3])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["a"])], "else", [],
                              [_info("a", [3])])
    control = myelin.onnx.load(_model(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)],
        [_info("c", [], TensorProto.BOOL), _info("x", [3])], [_info("y", [3])]), cache=False)
    staged = myelin.onnx.load(_model(
        [helper.make_node("NonZero", ["x"], ["i"]), helper.make_node("Shape", ["i"], ["s"])],
        [_info("x", [3])], [_info("s", [2], TensorProto.INT64)]), cache=False)
    assert staged.staged is not None
    x = np.array([1.5, -2, 0], np.float32)
    for condition, want in ((True, -x), (False, np.abs(x))):
        y = np.empty(3, np.float32)
        assert control.run([np.array(condition), x], out=[y])[0] is y
        np.testing.assert_array_equal(y, want)
    s = np.empty(2, np.int64)
    assert staged.run([x], out=[s])[0] is s
    np.testing.assert_array_equal(s, [1, 2])
    with pytest.raises(InputError, match="out for output s must be a int64 array"):
        staged.run([x], out=[np.empty(2, np.float32)])


def test_threads_share_a_model():
    model = myelin.onnx.load(_two_outputs(), cache=False)
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        out = [np.empty((2, 3), np.float32), np.empty((2, 4), np.float32)]
        for _ in range(200):
            x = rng.standard_normal((2, 4)).astype(np.float32)
            for got in (model.run([x]), model.run([x], out=out)):
                if not all(np.allclose(g, w, rtol=1e-5, atol=1e-6)
                           for g, w in zip(got, _expected(x))):
                    failures.append(seed)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures and len(model.compiles) == 1


def test_the_backend_runs_the_same_path():
    x = _batch(2)
    rep = MyelinBackend.prepare(onnx.load_from_string(_two_outputs().SerializeToString()))
    for _ in range(2):
        got = rep.run([x])
        assert isinstance(got, tuple)
        _close(list(got), _expected(x))
