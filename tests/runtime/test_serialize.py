"""Compiled models that travel (myelin.runtime.serialize): networks, ONNX models and
control-flow programs pickled and saved, loaded without compiling, computing bit for bit what
the compiled ones compute; in a pool of spawned worker processes; refused with a clear
error on a CPU that lacks the code's features, and when the bytes are truncated, damaged,
foreign or of another version."""

import multiprocessing
import pickle
import struct
import time

import numpy as np
import pytest

import myelin
import myelin.control
import myelin.onnx
import resnet_onnx
from jitcheck import guide_flow, lstm_flow
from myelin.errors import InputError, SerializationError
from myelin.runtime import serialize
from myelin.runtime.network import Network


def _outputs(network, cell, inputs):
    """Copies of every output of ``cell`` of ``network`` after computing on ``inputs``."""
    data = network.cell(cell).instance()
    for name, value in inputs.items():
        data[name] = value
    data.compute()
    return {name: np.array(data.array(name)) for name in network.cell(cell).outputs}


def _same(a, b):
    """True if the dicts or lists of arrays are equal bit for bit."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        for x, y in zip(map(np.asarray, a), map(np.asarray, b)))


@pytest.fixture(scope="module")
def guide():
    flow, x, *_ = guide_flow(np.random.default_rng(7))
    network = myelin.Compiler(cache=False).compile(flow)
    return network, {x.name: np.random.default_rng(8).random((1, 64), np.float32)}


@pytest.fixture(scope="module")
def cnn():
    model = myelin.onnx.load(resnet_onnx.small(), input_shapes={"x": (1, 3, 32, 32)},
                             cache=False, threads=2)
    return model, np.random.default_rng(9).standard_normal((1, 3, 32, 32), np.float32)


def test_the_guide_network_round_trips_through_pickle_and_files(guide, tmp_path):
    network, inputs = guide
    want = _outputs(network, "f", inputs)
    path = tmp_path / "guide.myelin"
    network.save(path)
    for loaded in (pickle.loads(pickle.dumps(network)), Network.load(path), myelin.load(path)):
        assert type(loaded) is Network and loaded is not network
        assert _same(_outputs(loaded, "f", inputs), want)
        assert str(loaded.cell("f")) == str(network.cell("f"))       # layout and steps
        assert loaded.globals() == network.globals()
        assert _same([loaded["f/W"]], [network["f/W"]])
        assert loaded.target == network.target
        # The optimized flow comes along, its constants the network's globals.
        assert sorted(loaded.flow.ops) == sorted(network.flow.ops)
        assert loaded.flow.var_named("f/W").data is loaded["f/W"].numpy()
    # A loaded network pickles again.
    again = pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(network))))
    assert _same(_outputs(again, "f", inputs), want)


def test_a_cell_pickles_with_its_network(guide):
    network, inputs = guide
    cell = pickle.loads(pickle.dumps(network.cell("f")))
    assert cell.name == "f" and cell.network is not network
    data = cell.instance()
    for name, value in inputs.items():
        data[name] = value
    data.compute()
    assert _same([data.array("f/y")], [_outputs(network, "f", inputs)["f/y"]])


def test_an_instance_does_not_pickle(guide):
    network, _ = guide
    with pytest.raises(SerializationError, match="pickle its network"):
        pickle.dumps(network.cell("f").instance())


def test_a_small_cnn_round_trips_bit_for_bit(cnn, tmp_path):
    model, x = cnn
    want = model.run({"x": x})
    network = model.network()
    cell = network.cells[0].name
    loaded = pickle.loads(pickle.dumps(network))
    assert _same(_outputs(loaded, cell, {"main/x": x}), _outputs(network, cell, {"main/x": x}))
    assert _same(list(_outputs(loaded, cell, {"main/x": x}).values()), want)
    assert str(loaded.cell(cell)) == str(network.cell(cell))
    # The whole ONNX model: its compiled signature comes along, nothing compiles.
    path = tmp_path / "cnn.myelin"
    model.save(path)
    for again in (pickle.loads(pickle.dumps(model)), myelin.onnx.OnnxModel.load(path)):
        assert again.compiles == model.compiles
        assert _same(again.run({"x": x}), want)
        assert again.compiles == model.compiles
        assert _same(again.run([x]), want)
        # The imported flow is imported again when asked for, not kept.
        assert sorted(again.flow.ops) == sorted(model.flow.ops)
        # A new signature compiles as in the original.
        batch = np.concatenate([x, x])
        with pytest.raises(InputError, match="shape"):
            again.run({"x": batch})


def test_an_onnx_model_with_several_signatures(tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    weight = rng.standard_normal((6, 5)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w")])
    model = myelin.onnx.load(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17)]), cache=False)
    inputs = [rng.standard_normal((n, 6)).astype(np.float32) for n in (1, 4, 9)]
    want = [model.run([x]) for x in inputs]
    assert len(model.compiles) == 3
    loaded = pickle.loads(pickle.dumps(model))
    assert all(_same(loaded.run([x]), w) for x, w in zip(inputs, want))
    assert len(loaded.compiles) == 3          # none compiled again
    again = pickle.loads(pickle.dumps(loaded))   # (before it parsed its ONNX model)
    assert _same(again.run([inputs[1]]), want[1]) and again.input_names == ["x"]
    two = inputs[2][:2]
    np.testing.assert_allclose(loaded.run([two])[0], np.tanh(two @ weight), rtol=1e-5)
    assert len(loaded.compiles) == 4          # a new batch size compiles, as before


def test_an_onnx_model_with_control_flow_and_a_staged_one():
    from test_convert_control import _if_model
    from test_staged import _detector, _detector_inputs

    model, feeds = _if_model()
    compiled = myelin.onnx.load(model, cache=False)
    cases = [{**feeds, "c": np.array(c)} for c in (True, False)]
    want = [compiled.run(case) for case in cases]
    loaded = pickle.loads(pickle.dumps(compiled))
    assert all(_same(loaded.run(case), w) for case, w in zip(cases, want))
    assert len(loaded.compiles) == 1

    rng = np.random.default_rng(1)
    cases = [_detector_inputs(rng, most) for most in (1.0, 0.4, 1.0)]
    staged = myelin.onnx.load(_detector(), cache=False)
    want = [staged.run(case) for case in cases]
    loaded = pickle.loads(pickle.dumps(staged))
    assert loaded.staged.compiles == staged.staged.compiles
    assert all(_same(loaded.run(case), w) for case, w in zip(cases, want))
    assert len(loaded.staged.compiles) == len(staged.staged.compiles)


def test_a_control_flow_program_round_trips(tmp_path):
    rng = np.random.default_rng(5)
    weights = {name: rng.standard_normal(shape).astype(np.float32) * 0.3
               for name, shape in (("W", (16, 128)), ("U", (32, 128)), ("b", (128,)))}
    program = myelin.control.compile(lstm_flow(50, weights), cache=False)
    xs = rng.standard_normal((50, 1, 16)).astype(np.float32)
    want = program.run("rnn", xs)
    path = tmp_path / "lstm.myelin"
    program.save(path)
    for loaded in (pickle.loads(pickle.dumps(program)), myelin.control.Program.load(path)):
        assert type(loaded) is myelin.control.Program
        assert _same(loaded.run("rnn", xs), want)
        assert loaded.listing() == program.listing()
        assert loaded.function("rnn")(xs) is not None
        with pytest.raises(InputError, match="arguments"):
            loaded.run("rnn")


def test_learnable_parameters_keep_their_values(tmp_path):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [2, 8])
    w = f.var("w", myelin.DT_FLOAT, [8, 3])
    w.learnable = True
    f.matmul(x, w, name="y")
    network = myelin.Compiler(cache=False).compile(flow)
    rng = np.random.default_rng(0)
    network["f/w"] = rng.standard_normal((8, 3))
    xv = rng.standard_normal((2, 8)).astype(np.float32)
    loaded = pickle.loads(pickle.dumps(network))
    assert _same([loaded["f/w"]], [network["f/w"]])
    assert _same(_outputs(loaded, "f", {"f/x": xv}), _outputs(network, "f", {"f/x": xv}))
    loaded["f/w"] = np.zeros((8, 3))          # its own parameters, not the original's
    assert not np.any(_outputs(loaded, "f", {"f/x": xv})["f/y"])
    assert np.any(_outputs(network, "f", {"f/x": xv})["f/y"])
    assert loaded.flow.var_named("f/w").learnable
    # Loaded from a file (mapped): each load's parameters its own, the file unchanged.
    network.save(tmp_path / "w.myelin")
    saved = (tmp_path / "w.myelin").read_bytes()
    first, second = Network.load(tmp_path / "w.myelin"), Network.load(tmp_path / "w.myelin")
    first["f/w"] = np.ones((8, 3))
    assert _same([second["f/w"]], [network["f/w"]])
    assert (tmp_path / "w.myelin").read_bytes() == saved
    assert _same(_outputs(second, "f", {"f/x": xv}), _outputs(network, "f", {"f/x": xv}))
    from myelin import train
    assert list(train.learnables(loaded)) == ["f/w"]


def test_profiled_threaded_and_cached_networks(guide, tmp_path):
    flow = guide_flow(np.random.default_rng(7))[0]
    inputs = guide[1]
    profiled = myelin.Compiler(cache=False, profile=True).compile(flow)
    loaded = pickle.loads(pickle.dumps(profiled))
    _outputs(loaded, "f", inputs)
    assert loaded.cell("f").profile().total.calls == 1
    # Code from the compile cache (the second compile) pickles as the first does.
    first = myelin.Compiler(cache=tmp_path, threads=2).compile(flow)
    compiler = myelin.Compiler(cache=tmp_path, threads=2)
    cached = compiler.compile(flow)
    assert "cache" in compiler.timings
    for network in (first, cached):
        assert _same(_outputs(pickle.loads(pickle.dumps(network)), "f", inputs),
                     _outputs(network, "f", inputs))


def _worker_outputs(data, x):
    """In a worker process: load the pickled network and compute (what the pool runs)."""
    start = time.perf_counter()
    network = pickle.loads(data)
    seconds = time.perf_counter() - start
    cell = network.cells[0]
    instance = cell.instance()
    instance["main/x"] = x
    instance.compute()
    return np.array(instance.array(cell.outputs[0])), seconds


def test_a_pool_of_four_spawned_workers_gets_the_pickled_network(cnn):
    model, x = cnn
    network = model.network()
    data = pickle.dumps(network)
    want = _outputs(network, network.cells[0].name, {"main/x": x})
    rng = np.random.default_rng(11)
    inputs = [x] + [rng.standard_normal(x.shape).astype(np.float32) for _ in range(7)]
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        results = pool.starmap(_worker_outputs, [(data, value) for value in inputs])
    assert _same([results[0][0]], list(want.values()))
    for value, (got, _) in zip(inputs, results):
        assert _same([got], list(_outputs(network, network.cells[0].name,
                                          {"main/x": value}).values()))


def _edited(data, edit):
    """``data`` (a saved network) with its header edited by ``edit(header)`` (signed again)."""
    header, blobs = serialize.unpack(data)
    for key in ("kind", "myelin", "blobs"):
        header.pop(key)
    edit(header)
    return serialize.pack("network", header, blobs)


def test_missing_cpu_features_are_refused_by_name(guide):
    network, inputs = guide
    data = serialize.dumps(network)

    def needs(header):
        header["target"]["features"] += ",+avx512fp16,+myelin-imaginary"
    with pytest.raises(SerializationError, match="lacks: .*myelin-imaginary"):
        serialize.loads(_edited(data, needs))

    def elsewhere(header):
        header["target"]["triple"] = "aarch64-unknown-linux-gnu"
    if not network.target.triple.startswith("aarch64"):
        with pytest.raises(SerializationError, match="compiled for aarch64"):
            serialize.loads(_edited(data, elsewhere))
    # Unedited, it loads.
    assert _same(_outputs(serialize.loads(_edited(data, lambda h: None)), "f", inputs),
                 _outputs(network, "f", inputs))


def test_damaged_truncated_and_foreign_files_are_refused(guide, tmp_path, monkeypatch):
    network, _ = guide
    data = serialize.dumps(network)
    cases = {
        "truncated": data[:len(data) // 2],
        "extended": data + b"\0",
        "no myelin header": b"not a model at all" * 10,
        "no myelin header ": b"",
        "checksum": data[:-100] + bytes([data[-100] ^ 1]) + data[-99:],
        "format": data[:8] + struct.pack("<I", 99) + data[12:],
    }
    for what, bad in cases.items():
        path = tmp_path / "bad.myelin"
        path.write_bytes(bad)
        with pytest.raises(SerializationError, match=what.strip()):
            myelin.load(path)
        with pytest.raises(SerializationError):      # (what unpickling a network calls)
            serialize.network_from_bytes(bad)
    # A .flow file is no saved model.
    network.flow.save(str(tmp_path / "model.flow"))
    with pytest.raises(SerializationError, match="no myelin header"):
        myelin.load(tmp_path / "model.flow")
    # Another myelin version's, a header edited into nonsense.
    header, blobs = serialize.unpack(data)
    with monkeypatch.context() as patch:
        patch.setattr(myelin.version, "__version__", "0.0.1")
        old = serialize.pack("network", {k: v for k, v in header.items()
                                         if k not in ("kind", "myelin", "blobs")}, blobs)
    with pytest.raises(SerializationError, match="saved by myelin '0.0.1'"):
        serialize.loads(old)
    for edit in (lambda h: h["cells"][0].pop("steps"),
                 lambda h: h["specs"][0].update(offset=-4),
                 lambda h: h["globals"].append([0, 9999]),
                 lambda h: h["symbols"][0].__setitem__(2, 12345),
                 lambda h: h["symbols"][0].__setitem__(0, "myelin.ext.0"),
                 lambda h: h["objects"].clear()):
        with pytest.raises(SerializationError, match="bad|bind"):
            serialize.loads(_edited(data, edit))
    # A file of one kind asked for as another.
    network.save(tmp_path / "net.myelin")
    with pytest.raises(SerializationError, match="not a OnnxModel"):
        myelin.onnx.OnnxModel.load(tmp_path / "net.myelin")


def test_a_pickle_file_holds_only_myelin_objects(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    data = serialize.pack("pickle", {"class": "Program"}, [pickle.dumps(Evil())])
    with pytest.raises(SerializationError, match="builtins.print"):
        serialize.loads(data)


def test_what_cannot_be_saved_says_so():
    network = Network([], {}, None, None)
    with pytest.raises(SerializationError, match="keeps no machine code"):
        pickle.dumps(network)
    with pytest.raises(SerializationError, match="cannot save a dict"):
        serialize.dumps({})
