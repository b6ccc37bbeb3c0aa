"""GraphDefs without TensorFlow: reading binary and text protobufs, tensor values, the seed's
int32 graph compiled to one add, and the importer's errors."""

import pathlib
import re

import numpy as np
import pytest
from google.protobuf import text_format

import myelin
import myelin.tf
from myelin.errors import FlowFormatError, InputError, ShapeError, UnsupportedOpError, \
    UnsupportedTypeError
from myelin.importers.tensorflow import graphdef, protos
from tfcheck import run_imported

SEED_GRAPH = pathlib.Path(__file__).parent / "data" / "seed002_graph.pbtxt"


def _graph(text):
    graph = protos.GraphDef()
    text_format.Parse(text, graph)
    return graph


def _node(name, op, inputs=(), **attrs):
    """Text of a NodeDef; attrs are AttrValue texts (``T="type: DT_FLOAT"``)."""
    lines = [f'name: "{name}" op: "{op}"'] + [f'input: "{i}"' for i in inputs]
    lines += [f'attr {{ key: "{k}" value {{ {v} }} }}' for k, v in attrs.items()]
    return "node { " + " ".join(lines) + " }\n"


def _placeholder(name, dtype="DT_FLOAT", dims=(2,)):
    shape = " ".join(f"dim {{ size: {d} }}" for d in dims)
    return _node(name, "Placeholder", dtype=f"type: {dtype}", shape=f"shape {{ {shape} }}")


def _const(name, value, dtype="DT_FLOAT"):
    field = "float_val" if dtype == "DT_FLOAT" else "int_val"
    return _node(name, "Const", dtype=f"type: {dtype}",
                 value=f"tensor {{ dtype: {dtype} tensor_shape {{}} {field}: {value} }}")


# The seed: output = ((input - 2) + 5) + 100 on int32.
def test_seed_graph_imports_from_text_and_computes():
    imported = myelin.tf.import_graph(SEED_GRAPH, ["input"], ["output"],
                                      func="tensorflow_graph")
    assert imported.inputs["input"].name == "tensorflow_graph/input"
    assert imported.outputs["output"].name == "tensorflow_graph/output"
    result = run_imported(imported, {"input": np.array([10], np.int32)})
    assert result["output"].dtype == np.int32
    assert result["output"].tolist() == [113]


def test_seed_graph_is_the_same_from_binary(tmp_path):
    text = myelin.tf.load_graph(SEED_GRAPH)
    path = tmp_path / "graph.pb"
    path.write_bytes(text.SerializeToString())
    binary = myelin.tf.load_graph(path)
    assert binary == text
    imported = myelin.tf.import_graph(path.read_bytes(), ["input:0"], ["output:0"])
    assert run_imported(imported, {"input:0": np.array([-7], np.int32)})["output:0"].tolist() \
        == [96]


def test_seed_graph_written_by_tensorflow(tmp_path):
    """The seed's script: the graph built with TensorFlow's v1 API and written as text to
    graph.pb (``write_graph(..., as_text=True)``)."""
    tf = pytest.importorskip("tensorflow")
    with tf.Graph().as_default() as graph:
        input_placeholder = tf.compat.v1.placeholder(tf.int32, 1, name="input")
        sub_op = tf.subtract(input_placeholder, tf.constant(2, dtype=tf.int32))
        add_op = tf.add(sub_op, tf.constant(5, dtype=tf.int32))
        tf.add(add_op, tf.constant(100, dtype=tf.int32), name="output")
    tf.io.write_graph(graph.as_graph_def(), str(tmp_path), "graph.pb", as_text=True)
    assert (tmp_path / "graph.pb").read_text().startswith("node {")
    imported = myelin.tf.import_graph(tmp_path / "graph.pb", ["input"], ["output"])
    assert [op.type for op in imported.flow.ops.values()] == ["Sub", "Add", "Add"]
    assert run_imported(imported, {"input": np.array([10], np.int32)})["output"].tolist() \
        == [113]


def test_seed_graph_compiles_to_one_add():
    """Constant propagation: fusion makes one loop of Sub, Add, Add, and LLVM folds the three
    constants into a single add of 103 (the seed's x86-64 ``leal 103(%rdi), %eax``; the
    step's kernel function also loads its input and stores its output, and the cell function
    calls it)."""
    compiler = myelin.Compiler(dump=True)
    if not compiler.target.triple.startswith("x86_64"):
        pytest.skip("the assembly check is for x86-64")
    imported = myelin.tf.import_graph(SEED_GRAPH, ["input"], ["output"],
                                      func="tensorflow_graph")
    assembly = compiler.compile(imported.flow).dumps["asm"]
    assembly = assembly[assembly.index("\nmyelin.kernel."):]       # the kernel function
    instructions = [line.split()[0] for line in assembly.splitlines()
                    if line.startswith("\t") and not line.startswith("\t.")]
    arithmetic = [line.strip() for line in assembly.splitlines()
                  if re.match(r"\s+(add|sub|lea|inc|dec|imul)", line)]
    assert arithmetic == ["addl\t$103, %eax"], assembly
    assert instructions[-1] == "retq", assembly
    assert set(instructions) <= {"movl", "addl", "xorl", "retq"}, assembly


# Reading GraphDefs.
def test_garbage_and_missing_files_are_errors(tmp_path):
    with pytest.raises(FlowFormatError):
        myelin.tf.load_graph(b"\xff\xfe not a graph {")
    with pytest.raises(FlowFormatError, match="no nodes"):
        myelin.tf.load_graph(b"")
    corrupt = tmp_path / "corrupt.pb"
    corrupt.write_bytes(SEED_GRAPH.read_bytes()[:-40])      # text cut in the middle
    with pytest.raises(FlowFormatError, match="corrupt.pb"):
        myelin.tf.load_graph(corrupt)
    truncated = myelin.tf.load_graph(SEED_GRAPH).SerializeToString()[:-7]
    with pytest.raises(FlowFormatError):
        myelin.tf.load_graph(truncated)
    with pytest.raises(FileNotFoundError):
        myelin.tf.load_graph(tmp_path / "missing.pb")
    with pytest.raises(TypeError):
        myelin.tf.load_graph(42)


def test_tensor_values():
    def tensor(text):
        proto = protos.TensorProto()
        text_format.Parse(text, proto)
        return graphdef.tensor(proto, "t")

    dims = "tensor_shape { dim { size: 2 } dim { size: 3 } }"
    # Fewer values than elements: the last one fills the rest (TensorFlow's rule).
    np.testing.assert_array_equal(tensor(f"dtype: DT_INT32 {dims} int_val: 1 int_val: 2"),
                                  [[1, 2, 2], [2, 2, 2]])
    np.testing.assert_array_equal(tensor(f"dtype: DT_FLOAT {dims}"), np.zeros((2, 3)))
    content = np.arange(6, dtype="<f8").tobytes()
    value = tensor(f"dtype: DT_DOUBLE {dims} tensor_content: '{_escape(content)}'")
    assert value.dtype == np.float64
    np.testing.assert_array_equal(value, np.arange(6.0).reshape(2, 3))
    half = np.array([1.5, -2.25], np.float16).view(np.uint16)
    value = tensor(f"dtype: DT_HALF tensor_shape {{ dim {{ size: 2 }} }} half_val: {half[0]} "
                   f"half_val: {half[1]}")
    np.testing.assert_array_equal(value, np.array([1.5, -2.25], np.float16))
    assert tensor("dtype: DT_BOOL bool_val: true").dtype == np.bool_
    with pytest.raises(FlowFormatError, match="tensor content of 8 bytes"):
        tensor(f"dtype: DT_FLOAT {dims} tensor_content: '{_escape(bytes(8))}'")
    with pytest.raises(UnsupportedTypeError, match="DT_STRING"):
        tensor("dtype: DT_STRING string_val: 'a'")


def _escape(data):
    return "".join(f"\\{b:03o}" for b in data)


# Errors of the importer.
def test_every_unsupported_op_is_listed_at_once():
    graph = _graph(_placeholder("x") + _node("a", "Relu", ["x"], T="type: DT_FLOAT")
                   + _node("b", "NoSuchOp", ["a"]) + _node("c", "AlsoMissing", ["b"])
                   + _node("d", "NoSuchOp", ["c"]) + _node("unused", "Unreached", ["x"]))
    with pytest.raises(UnsupportedOpError) as info:
        myelin.tf.import_graph(graph, ["x"], ["d"])
    message = str(info.value)
    assert "NoSuchOp: b, d" in message and "AlsoMissing: c" in message
    assert "Unreached" not in message            # only the nodes the outputs need
    assert sorted(info.value.ops) == ["b", "c", "d"]
    with pytest.raises(UnsupportedOpError, match="Unreached: unused"):
        myelin.tf.check_supported(graph)


def test_bad_names_and_inputs_are_input_errors():
    graph = _graph(_placeholder("x") + _placeholder("y")
                   + _node("sum", "AddV2", ["x", "y"], T="type: DT_FLOAT"))
    with pytest.raises(InputError, match="no node 'nope'"):
        myelin.tf.import_graph(graph, ["x"], ["nope"])
    with pytest.raises(InputError, match="placeholder 'y'"):
        myelin.tf.import_graph(graph, ["x"], ["sum"])
    with pytest.raises(InputError, match=r"shape \[3\], the graph declares \[2\]"):
        myelin.tf.import_graph(graph, ["x", "y"], ["sum"], shapes={"x": [3]})
    with pytest.raises(InputError, match="not inputs"):
        myelin.tf.import_graph(graph, ["x", "y"], ["sum"], shapes={"sum": [2]})
    strings = _graph(_placeholder("s", "DT_STRING"))
    with pytest.raises(UnsupportedTypeError, match="DT_STRING"):
        myelin.tf.import_graph(strings, ["s"], ["s"])


def test_unknown_dimensions_take_the_batch_size_or_given_shapes():
    graph = _graph(_placeholder("x", dims=(-1, 3)) + _const("two", 2.0)
                   + _node("y", "Mul", ["x", "two"], T="type: DT_FLOAT"))
    assert myelin.tf.import_graph(graph, ["x"], ["y"]).outputs["y"].shape == (1, 3)
    assert myelin.tf.import_graph(graph, ["x"], ["y"], batch_size=4).outputs["y"].shape == \
        (4, 3)
    imported = myelin.tf.import_graph(graph, ["x"], ["y"], shapes={"x": (5, 3)})
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_array_equal(run_imported(imported, {"x": x})["y"], 2 * x)


def test_variables_need_values_and_cycles_are_errors():
    graph = _graph(_placeholder("x") + _node("v", "VarHandleOp", dtype="type: DT_FLOAT")
                   + _node("read", "ReadVariableOp", ["v"], dtype="type: DT_FLOAT")
                   + _node("y", "AddV2", ["x", "read"], T="type: DT_FLOAT"))
    with pytest.raises(InputError, match="freeze the graph"):
        myelin.tf.import_graph(graph, ["x"], ["y"])
    loop = _graph(_placeholder("x") + _node("a", "AddV2", ["x", "b"], T="type: DT_FLOAT")
                  + _node("b", "Relu", ["a"], T="type: DT_FLOAT"))
    with pytest.raises(ShapeError, match="cycle"):
        myelin.tf.import_graph(loop, ["x"], ["b"])
    dangling = _graph(_placeholder("x") + _node("y", "Relu", ["missing"], T="type: DT_FLOAT"))
    with pytest.raises(ShapeError, match="'missing'"):
        myelin.tf.import_graph(dangling, ["x"], ["y"])


def test_outputs_that_are_inputs_or_constants_are_copied():
    graph = _graph(_placeholder("x") + _const("c", 1.5))
    imported = myelin.tf.import_graph(graph, ["x"], ["x", "c"])
    x = np.array([3.0, 4.0], np.float32)
    result = run_imported(imported, {"x": x})
    np.testing.assert_array_equal(result["x"], x)
    assert result["c"] == np.float32(1.5)
