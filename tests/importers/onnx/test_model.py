"""OnnxModel: its bounded cache of compiled signatures, external data only from a given
directory, empty models refused, bounds on named dimensions (``dynamic``) and compiler options
checked when the model loads."""

import gc
import logging
import os
import re
import weakref

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import myelin.onnx
from myelin.errors import FlowFormatError, InputError


def _linear_model():
    """y = relu(x w), x: float32[N, 4]."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(
        np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _expected(model, x):
    return np.maximum(x @ numpy_helper.to_array(model.graph.initializer[0]), 0)


def _batch(n):
    return np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)


def test_the_signature_cache_drops_the_least_recently_used(caplog):
    model = myelin.onnx.load(_linear_model(), max_signatures=2, cache=False)
    with caplog.at_level(logging.INFO, logger="myelin.onnx"):
        model.run([_batch(1)])
        first = weakref.ref(model.network())
        model.run([_batch(2)])
        model.run([_batch(1)])          # 1 is now the most recently used
        model.run([_batch(3)])          # drops 2
    assert len(model.compiles) == 3
    assert "dropped the compiled x: float32[2, 4] (least recently used; max_signatures=2)" \
        in caplog.text
    for n in (1, 3):                    # still compiled: no new compile
        np.testing.assert_allclose(model.run([_batch(n)])[0], _expected(model.proto, _batch(n)),
                                   rtol=1e-5)
    assert len(model.compiles) == 3
    model.run([_batch(2)])              # compiled again, dropping 1
    assert len(model.compiles) == 4
    gc.collect()
    assert first() is None              # the dropped network's memory is freed


def test_many_batch_sizes_keep_max_signatures_networks():
    model = myelin.onnx.load(_linear_model(), cache=False)
    assert model.max_signatures == 8
    for n in range(1, 21):
        model.run([_batch(n)])
    assert len(model.compiles) == 20 and len(model._compiled) == 8
    with pytest.raises(InputError, match="dropped as least recently used"):
        model.network(model.compiles[0][0])


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "8"])
def test_max_signatures_must_be_a_positive_int(value):
    with pytest.raises(InputError, match="max_signatures"):
        myelin.onnx.load(_linear_model(), max_signatures=value)


def test_input_shapes_must_name_inputs():
    with pytest.raises(InputError, match=r"input_shapes names \['y'\].*inputs are \['x'\]"):
        myelin.onnx.load(_linear_model(), input_shapes={"y": (2, 4)})


def _with_external_data(tmp_path, location="weights.bin"):
    """The linear model saved with its weight in ``location`` (relative to tmp_path/model),
    loaded back without reading that data: (ModelProto, its folder)."""
    folder = tmp_path / "model"
    folder.mkdir()
    path = folder / "m.onnx"
    onnx.save(_linear_model(), path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    model = onnx.load(path, load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    return model, folder


def test_external_data_of_bytes_and_protos_needs_base_dir(tmp_path, monkeypatch):
    model, folder = _with_external_data(tmp_path)
    monkeypatch.chdir(folder)          # the weights are in the working directory: not used
    for source in (model, model.SerializeToString()):
        with pytest.raises(InputError, match="base_dir"):
            myelin.onnx.load(source)
        with pytest.raises(InputError, match="base_dir"):
            myelin.onnx.import_model(source, {"x": (1, 4)})
    x = _batch(2)
    expected = _expected(_linear_model(), x)
    for source in (model, model.SerializeToString()):
        (y,) = myelin.onnx.load(source, base_dir=folder).run([x])
        np.testing.assert_allclose(y, expected, rtol=1e-5)
    flow = myelin.onnx.import_model(model, {"x": (2, 4)}, base_dir=str(folder)).flow
    assert flow.ops
    # The caller's ModelProto is left as it was: its tensor still refers to the file.
    assert model.graph.initializer[0].data_location == TensorProto.EXTERNAL
    with pytest.raises(InputError, match="not a directory"):
        myelin.onnx.load(model, base_dir=folder / "m.onnx")


@pytest.mark.parametrize("location", ["../weights.bin", "sub/../../weights.bin",
                                      "ABSOLUTE", "link.bin"])
def test_external_data_outside_the_model_directory_is_refused(tmp_path, location):
    model, folder = _with_external_data(tmp_path)
    (tmp_path / "weights.bin").write_bytes((folder / "weights.bin").read_bytes())
    os.symlink(tmp_path / "weights.bin", folder / "link.bin")
    if location == "ABSOLUTE":
        location = str(tmp_path / "weights.bin")
    model.graph.initializer[0].external_data[0].value = location
    path = folder / "escape.onnx"
    path.write_bytes(model.SerializeToString())
    for source, base_dir in ((model, folder), (model.SerializeToString(), folder),
                             (path, None)):
        with pytest.raises(FlowFormatError, match="outside the model's directory|relative"):
            myelin.onnx.load(source, base_dir=base_dir)


def test_missing_external_file_is_a_format_error(tmp_path):
    model, folder = _with_external_data(tmp_path, "missing.bin")
    with pytest.raises(FlowFormatError, match="external data"):
        myelin.onnx.load(model, base_dir=folder)


def test_an_empty_model_is_a_format_error(tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    for source in (empty, b"", onnx.ModelProto()):
        with pytest.raises(FlowFormatError, match="no graph"):
            myelin.onnx.load(source)


def _two_input_model():
    """y = a + b, a and b: float32[N, S]."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", "S"]) for name in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "S"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dynamic_bounds_check_every_new_signature():
    model = myelin.onnx.load(_two_input_model(), dynamic={"N": (1, 4), "S": (2, 8)},
                             cache=False)
    a = np.ones((3, 5), np.float32)
    np.testing.assert_array_equal(model.run([a, a])[0], a + a)
    assert "compiled for N=3, S=5" in model.compiles[-1][1]
    for shapes, message in [(((5, 5), (5, 5)), "dimension N (axis 0) is 5, outside its "
                                                "bounds 1..4"),
                            (((2, 1), (2, 1)), "dimension S (axis 1) is 1, outside"),
                            (((2, 4), (2, 5)), "dimension S is 4 in input a but 5 in input b")]:
        with pytest.raises(InputError, match=re.escape(message)):
            model.run([np.ones(shape, np.float32) for shape in shapes])
    assert len(model.compiles) == 1             # refused before compiling
    with pytest.raises(InputError, match="outside its bounds 1..4"):
        myelin.onnx.load(_two_input_model(), dynamic={"N": (1, 4)},
                         input_shapes={"a": (6, 2), "b": (6, 2)})


@pytest.mark.parametrize("dynamic, message", [
    ({"M": (1, 4)}, r"names dimensions \['M'\] that no input of the model has; its named "
                    r"dimensions are \['N', 'S'\]"),
    ({"N": (4, 1)}, "must satisfy 0 <= low <= high, not"),
    ({"N": 4}, r"are a pair of ints \(low, high\), not 4"),
    ({"N": (1.5, 4)}, "are a pair of ints"),
    ([("N", 1, 4)], "maps dimension names to"),
])
def test_dynamic_bounds_are_checked_at_load(dynamic, message):
    with pytest.raises(InputError, match=message):
        myelin.onnx.load(_two_input_model(), dynamic=dynamic)


def test_compiler_options_are_checked_at_load():
    with pytest.raises(InputError, match=r"unknown compiler options \['bogus'\]; the "
                                         r"compiler's options are features, "):
        myelin.onnx.load(_linear_model(), bogus=1)
    with pytest.raises(myelin.CompileError, match="threads must be at least 1"):
        myelin.onnx.load(_linear_model(), threads=0)


def test_dynamic_bounds_survive_pickling():
    import pickle

    model = myelin.onnx.load(_two_input_model(), dynamic={"N": (1, 2)}, cache=False)
    a = np.ones((2, 3), np.float32)
    model.run([a, a])
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(again.run([a, a])[0], a + a)
    with pytest.raises(InputError, match="outside its bounds 1..2"):
        again.run([np.ones((3, 3), np.float32)] * 2)
