"""The size limit (myelin.limits): tensors and instances over it raise LimitError before
anything is allocated, wherever myelin makes them: the compiler's plan, the reference
interpreter, constants folded at import."""

import tracemalloc

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import myelin
import myelin.onnx
from myelin import limits
from myelin.errors import InputError, LimitError


def _huge_input_flow():
    """The fuzzing find: a .flow input declared [1e5, 1e5, 3] (111.8 GiB of float32)."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    f.relu(f.var("x", myelin.DT_FLOAT, [100_000, 100_000, 3]), name="y")
    return myelin.Flow.from_bytes(flow.to_bytes())


def _constant_of_shape_model(dims):
    """A model of one ConstantOfShape whose shape is an initializer (84 bytes)."""
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["y"])], "g", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(dims, np.int64), "shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_sizes_parse():
    assert limits.parse_size("4096") == 4096
    assert limits.parse_size("512M") == 512 << 20
    assert limits.parse_size("1.5g") == 3 << 29
    assert limits.parse_size("8GiB") == 8 << 30
    for bad in ("", "0", "-1G", "nan", "lots"):
        with pytest.raises(ValueError):
            limits.parse_size(bad)


def test_the_limit_comes_from_scope_environment_or_default(monkeypatch):
    monkeypatch.delenv(limits.ENVIRONMENT, raising=False)
    assert limits.max_tensor_bytes() == limits.DEFAULT_MAX_TENSOR_BYTES == 4 << 30
    monkeypatch.setenv(limits.ENVIRONMENT, "1M")
    assert limits.max_tensor_bytes() == 1 << 20
    with limits.scope("2K"):
        assert limits.max_tensor_bytes() == 2048
        with limits.scope(None):
            assert limits.max_tensor_bytes() == 2048
    assert limits.max_tensor_bytes() == 1 << 20
    monkeypatch.setenv(limits.ENVIRONMENT, "a lot")
    with pytest.raises(InputError, match="MYELIN_MAX_TENSOR_BYTES"):
        limits.max_tensor_bytes()
    for bad in (0, -5, "0", True, "x"):
        with pytest.raises(InputError):
            limits.as_bytes(bad)


def test_check_counts_exactly_and_names_the_way_out():
    with pytest.raises(LimitError, match=r"\(9223372036854775808 bytes\)"):
        limits.check_tensor([1 << 20, 1 << 20, 1 << 20], 8, "t")     # 2^63: no overflow
    with pytest.raises(LimitError, match=r"t would take .* over the limit of 4 GiB .*"
                                         r"max_tensor_bytes=.*MYELIN_MAX_TENSOR_BYTES"):
        limits.check(4 * 2**30 + 1, "t")
    limits.check(4 * 2**30, "t")
    assert issubclass(LimitError, MemoryError) and issubclass(LimitError, myelin.MyelinError)


def test_a_huge_flow_input_fails_at_compile_not_at_instance():
    flow = _huge_input_flow()
    with pytest.raises(LimitError, match=r"f/x \(float32\[100000x100000x3\]\) would take "
                                         r"111.8 GiB"):
        myelin.Compiler(cache=False).compile(flow)


def test_the_instance_block_is_checked_as_a_whole():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [64, 1024])     # 256 KiB each: input and output
    f.relu(x, name="y")
    with pytest.raises(LimitError, match="the instance of cell f"):
        myelin.Compiler(cache=False, max_tensor_bytes="300K").compile(flow)
    data = myelin.Compiler(cache=False, max_tensor_bytes="1M").compile(flow).cell("f").instance()
    data["f/x"] = -np.ones((64, 1024))
    data.compute()
    assert not np.asarray(data["f/y"]).any()


def test_learnable_variables_without_data_are_checked():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    w = f.var("w", myelin.DT_FLOAT, [1 << 20, 1 << 12])    # 16 GiB, zeros if allocated
    w.learnable = True
    f.matmul(f.var("x", myelin.DT_FLOAT, [1, 1 << 20]), w, name="y")
    with pytest.raises(LimitError, match="f/w"):
        myelin.Compiler(cache=False).compile(flow)
    with pytest.raises(LimitError, match="f/w"):
        myelin.reference.run(flow, "f", {"f/x": np.zeros((1, 1 << 20), np.float32)})


def test_the_reference_interpreter_checks_before_computing():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    f.op("Tile", [f.var("x", myelin.DT_FLOAT, [1000])], name="y", attrs={"repeats": [1 << 20]})
    with pytest.raises(LimitError, match=r"float32\[1048576000\]"):
        myelin.reference.run(flow, "f", {"f/x": np.ones(1000, np.float32)})


def test_constant_of_shape_is_not_folded_past_the_fold_limit():
    """The fuzzing find: a tiny model asking ConstantOfShape for [1000, 1000, 250] took
    3 GB at import. Now the import allocates nothing of the sort (the fill stays an op), and
    the compile checks the gigabyte against the limit before allocating it."""
    model = _constant_of_shape_model([1000, 1000, 250])
    assert len(model.SerializeToString()) < 128
    tracemalloc.start()
    try:
        imported = myelin.onnx.import_model(model)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert [op.type for op in imported.flow.ops.values()] == ["BroadcastTo"]
    with pytest.raises(LimitError, match=r"953.7 MiB .* over the limit of 512 MiB"):
        myelin.onnx.load(model, input_shapes={}, cache=False, max_tensor_bytes="512M")


def test_constant_of_shape_folds_when_small_and_fails_when_over_the_limit():
    (y,) = myelin.onnx.load(_constant_of_shape_model([2, 3]), cache=False).run({})
    assert y.shape == (2, 3) and not y.any()
    with pytest.raises(LimitError, match="ConstantOfShape"):
        myelin.onnx.import_model(_constant_of_shape_model([1 << 20, 1 << 20, 1 << 10]))


@pytest.mark.parametrize("node, initializers", [
    (helper.make_node("Range", ["start", "limit", "delta"], ["y"]),
     {"start": np.int64(0), "limit": np.int64(1 << 62), "delta": np.int64(1)}),
    (helper.make_node("HannWindow", ["size"], ["y"]), {"size": np.int64(1 << 40)}),
    (helper.make_node("Expand", ["one", "shape"], ["y"]),
     {"one": np.ones(1, np.float32), "shape": np.array([1 << 30, 1 << 10], np.int64)}),
])
def test_import_checks_sizes_made_from_values(node, initializers):
    graph = helper.make_graph(
        [node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(LimitError, match=node.op_type):
        myelin.onnx.import_model(model)


def _eye_like(dims):
    graph = helper.make_graph(
        [helper.make_node("EyeLike", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.BOOL, dims)],
        [helper.make_tensor_value_info("y", TensorProto.BOOL, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_graph_inputs_are_checked_at_import():
    with pytest.raises(LimitError, match=r"input x \(bool\[1048576, 1048576\]\)"):
        myelin.onnx.import_model(_eye_like([1 << 20, 1 << 20]))
    with pytest.raises(LimitError, match=r"input x \(bool\[1048576, 1048576\]\)"):
        myelin.onnx.import_model(_eye_like(["n", "n"]), {"x": (1 << 20, 1 << 20)})
    with pytest.raises(InputError, match="negative"):
        myelin.onnx.import_model(_eye_like(["n", "n"]), {"x": (-1, 4)})
