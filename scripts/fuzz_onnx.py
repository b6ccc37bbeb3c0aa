"""Fuzz the ONNX importer: mutated models imported, compiled and run.

    python scripts/fuzz_onnx.py                        # 2,000 cases, 2 workers
    python scripts/fuzz_onnx.py --cases 300 --no-torch # helper-built models only
    python scripts/fuzz_onnx.py --replay fuzz-out/onnx/17-foreign-ValueError.onnx

The corpus is small models built with ``onnx.helper`` (an MLP, a CNN, shape arithmetic,
constants built by ConstantOfShape, Expand, Tile and Range, If, Loop and Scan with subgraphs,
LSTM and GRU, reductions and integer logic) and PyTorch exports of small nets (an MLP, a CNN,
an LSTM, a transformer encoder layer). Each case mutates one of them: structurally on the
ModelProto (op types and domains, input and output counts, attributes and their types,
graph input shapes with dimensions 0, -1 and huge ones, element types, initializers, opset
numbers, subgraphs, deep nesting, node order) or at byte level on its serialized form, or
both. A case parses the bytes, imports, compiles and runs the model on random inputs (or
compiles it for its declared shapes when its inputs are too large to make). Outcomes are
counted as :mod:`fuzzing` says; defects are saved into ``--out`` for ``--replay``.
"""

import copy
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzzing  # noqa: E402
from fuzz_flow import mutate_bytes  # noqa: E402

DIMS = (0, -1, 1, 2, 3, 1000, 100_000, 2**31 - 1, 2**40)
OPSETS = (-1, 0, 1, 6, 7, 9, 11, 13, 17, 21, 28, 29, 1000)
OTHER_OPS = ("Bogus", "", "Loop", "If", "Scan", "NonZero", "SequenceConstruct",
             "ConstantOfShape", "Range", "Expand", "Tile", "Reshape", "Einsum", "LSTM")
INPUT_ELEMENTS = 1 << 20     # larger inputs are not made: the model is compiled, not run


# The corpus.
def _helper_models():
    """name -> ModelProto, built with onnx.helper."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)

    def init(name, shape, dtype=np.float32):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(dtype), name)

    def ints(name, values):
        return numpy_helper.from_array(np.array(values, np.int64), name)

    def info(name, elem, shape):
        return helper.make_tensor_value_info(name, elem, shape)

    def model(name, nodes, inputs, outputs, initializers=(), opset=17):
        graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])

    n = helper.make_node
    models = {}
    models["mlp"] = model("mlp", [
        n("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        n("Relu", ["h"], ["r"]),
        n("MatMul", ["r", "w2"], ["m"]),
        n("Softmax", ["m"], ["y"], axis=-1)],
        [info("x", T.FLOAT, ["batch", 8])], [info("y", T.FLOAT, None)],
        [init("w1", (16, 8)), init("b1", (16,)), init("w2", (16, 4))])
    models["cnn"] = model("cnn", [
        n("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c", "s", "o", "mu", "var"], ["bn"]),
        n("Relu", ["bn"], ["r"]),
        n("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        n("GlobalAveragePool", ["p"], ["g"]),
        n("Flatten", ["g"], ["y"])],
        [info("x", T.FLOAT, [1, 3, 8, 8])], [info("y", T.FLOAT, None)],
        [init("w", (4, 3, 3, 3)), init("b", (4,)), init("s", (4,)), init("o", (4,)),
         init("mu", (4,)), numpy_helper.from_array(np.ones(4, np.float32), "var")])
    models["shapes"] = model("shapes", [
        n("Shape", ["x"], ["s"]),
        n("Gather", ["s", "zero"], ["batch"], axis=0),
        n("Unsqueeze", ["batch", "axes0"], ["b1"]),
        n("Concat", ["b1", "rest"], ["shape"], axis=0),
        n("Reshape", ["x", "shape"], ["r"]),
        n("Transpose", ["r"], ["t"], perm=[1, 0]),
        n("Slice", ["t", "starts", "ends", "axes0"], ["sl"]),
        n("Split", ["sl"], ["a", "b"], axis=0, num_outputs=2),
        n("Add", ["a", "b"], ["y"])],
        [info("x", T.FLOAT, [2, 3, 4])], [info("y", T.FLOAT, None)],
        [ints("zero", 0), ints("axes0", [0]), ints("rest", [12]), ints("starts", [2]),
         ints("ends", [10])], opset=18)
    models["constants"] = model("constants", [
        n("ConstantOfShape", ["dims"], ["c"], value=numpy_helper.from_array(
            np.array([0.5], np.float32))),
        n("Range", ["start", "limit", "delta"], ["r"]),
        n("Cast", ["r"], ["rf"], to=T.FLOAT),
        n("Expand", ["rf", "dims"], ["e"]),
        n("Tile", ["x", "reps"], ["t"]),
        n("Constant", [], ["k"], value_floats=[1.0, 2.0, 3.0, 4.0]),
        n("Add", ["c", "e"], ["ce"]),
        n("Mul", ["ce", "k"], ["m"]),
        n("ReduceSum", ["t"], ["ts"], keepdims=0),
        n("Add", ["m", "ts"], ["y"])],
        [info("x", T.FLOAT, [2, 2])], [info("y", T.FLOAT, None)],
        [ints("dims", [3, 4]), ints("start", 0), ints("limit", 4), ints("delta", 1),
         ints("reps", [2, 3])])
    then_graph = helper.make_graph([n("Mul", ["x", "two"], ["t"])], "then", [],
                                   [info("t", T.FLOAT, [2, 3])],
                                   [numpy_helper.from_array(np.float32(2), "two")])
    else_graph = helper.make_graph([n("Neg", ["x"], ["e"])], "else", [],
                                   [info("e", T.FLOAT, [2, 3])])
    models["if"] = model("if", [
        n("ReduceSum", ["x"], ["total"], keepdims=0),
        n("Greater", ["total", "zero"], ["cond"]),
        n("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph)],
        [info("x", T.FLOAT, [2, 3])], [info("y", T.FLOAT, None)],
        [numpy_helper.from_array(np.float32(0), "zero")])
    body = helper.make_graph([
        n("Add", ["acc_in", "x"], ["acc_out"]),
        n("Identity", ["cond_in"], ["cond_out"]),
        n("Relu", ["acc_out"], ["scan_out"])], "body",
        [info("i", T.INT64, []), info("cond_in", T.BOOL, []), info("acc_in", T.FLOAT, [3])],
        [info("cond_out", T.BOOL, []), info("acc_out", T.FLOAT, [3]),
         info("scan_out", T.FLOAT, [3])])
    models["loop"] = model("loop", [
        n("Loop", ["trips", "", "init"], ["final", "scans"], body=body),
        n("ReduceSum", ["scans"], ["s"], keepdims=0),
        n("Add", ["final", "s"], ["y"])],
        [info("x", T.FLOAT, [3])], [info("y", T.FLOAT, None)],
        [ints("trips", 4), init("init", (3,))])
    scan_body = helper.make_graph([
        n("Add", ["state", "row"], ["next"]),
        n("Tanh", ["next"], ["out"])], "scan_body",
        [info("state", T.FLOAT, [4]), info("row", T.FLOAT, [4])],
        [info("next", T.FLOAT, [4]), info("out", T.FLOAT, [4])])
    models["scan"] = model("scan", [
        n("Scan", ["s0", "xs"], ["last", "ys"], body=scan_body, num_scan_inputs=1)],
        [info("xs", T.FLOAT, [5, 4])], [info("last", T.FLOAT, None), info("ys", T.FLOAT, None)],
        [init("s0", (4,))])
    models["rnn"] = model("rnn", [
        n("LSTM", ["x", "W", "R", "B"], ["ys", "h"], hidden_size=5),
        n("Squeeze", ["h", "axes0"], ["hs"]),
        n("GRU", ["x", "Wg", "Rg"], ["", "hg"], hidden_size=5),
        n("Squeeze", ["hg", "axes0"], ["hgs"]),
        n("Add", ["hs", "hgs"], ["y"])],
        [info("x", T.FLOAT, [6, 2, 3])], [info("y", T.FLOAT, None)],
        [init("W", (1, 20, 3)), init("R", (1, 20, 5)), init("B", (1, 40)),
         init("Wg", (1, 15, 3)), init("Rg", (1, 15, 5)), ints("axes0", [0])])
    models["reduce"] = model("reduce", [
        n("ReduceMean", ["x", "axes1"], ["m"], keepdims=1),
        n("Sub", ["x", "m"], ["d"]),
        n("ArgMax", ["d"], ["am"], axis=1),
        n("TopK", ["d", "k"], ["tv", "ti"], axis=-1),
        n("Clip", ["tv", "lo", "hi"], ["c"]),
        n("Pad", ["c", "pads"], ["p"]),
        n("Where", ["wc", "p", "p"], ["w"]),
        n("Resize", ["w", "", "scales"], ["y"], mode="nearest"),
        n("Cast", ["am"], ["y2"], to=T.FLOAT)],
        [info("x", T.FLOAT, [2, 6])], [info("y", T.FLOAT, None), info("y2", T.FLOAT, None)],
        [ints("axes1", [1]), ints("k", [3]), numpy_helper.from_array(np.float32(-1), "lo"),
         numpy_helper.from_array(np.float32(1), "hi"), ints("pads", [0, 1, 0, 1]),
         numpy_helper.from_array(np.array([[True], [False]]), "wc"),
         numpy_helper.from_array(np.array([1, 2], np.float32), "scales")], opset=18)
    models["integers"] = model("integers", [
        n("Add", ["a", "b"], ["s"]),
        n("Mod", ["s", "seven"], ["m"]),
        n("Equal", ["m", "a"], ["e"]),
        n("Not", ["e"], ["ne"]),
        n("Where", ["ne", "m", "b"], ["w"]),
        n("Einsum", ["fa", "fa"], ["ein"], equation="ij,ij->i"),
        n("Cast", ["w"], ["y"], to=T.FLOAT),
        n("Identity", ["ein"], ["y2"])],
        [info("a", T.INT64, [2, 3]), info("b", T.INT64, [2, 3]), info("fa", T.FLOAT, [2, 3])],
        [info("y", T.FLOAT, None), info("y2", T.FLOAT, None)],
        [ints("seven", 7)])
    return models


def _torch_models():
    """name -> ModelProto: PyTorch exports of small nets."""
    import io
    import warnings

    import onnx
    import torch

    nn = torch.nn
    torch.manual_seed(0)

    class Lstm(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(4, 6, batch_first=True)

        def forward(self, x):
            return self.lstm(x)[0]

    nets = {
        "torch-mlp": (nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4),
                                    nn.LogSoftmax(-1)), torch.randn(2, 8)),
        "torch-cnn": (nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4),
                                    nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(),
                                    nn.Linear(64, 5)), torch.randn(1, 3, 8, 8)),
        "torch-lstm": (Lstm(), torch.randn(2, 5, 4)),
        "torch-encoder": (nn.TransformerEncoder(
            nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 1,
            enable_nested_tensor=False), torch.randn(1, 5, 8)),
    }
    models = {}
    for name, (net, example) in nets.items():
        net.eval()
        buffer = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(net, (example,), buffer, dynamo=False, opset_version=17,
                              input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch"}})
        models[name] = onnx.load_model_from_string(buffer.getvalue())
    return models


def corpus(torch=True):
    """The models mutated: name -> ModelProto."""
    models = _helper_models()
    if torch:
        models.update(_torch_models())
    return models


# Mutations.
def _graphs(graph):
    """``graph`` and its subgraphs, depth first."""
    found = [graph]
    for node in graph.node:
        for attr in node.attribute:
            found.extend(g for sub in ([attr.g] if attr.HasField("g") else list(attr.graphs))
                         for g in _graphs(sub))
    return found


def _value_names(graph):
    names = [i.name for i in graph.input] + [t.name for t in graph.initializer]
    return names + [o for node in graph.node for o in node.output]


INTS = (0, -1, 1, 2, 3, 7, -7, 1000, 2**31 - 1, -(2**31), 2**62)
FLOATS = (0.0, -1.0, 0.5, 2.0, 1e30, -1e-30, float("nan"), float("inf"))
STRINGS = (b"", b"bogus", b"NOTSET", b"SAME_UPPER", b"VALID", b"linear", b"nearest", b"cubic",
           b"DCR", b"CRD", b"reverse", b"bidirectional", b"Tanh", b"ij,jk->ik", b"\xff")


def _mutate_attribute(node, rng, schema):
    """Change, add or remove one attribute: mostly its value (same type, or an attribute of
    the op's schema), sometimes its type."""
    from onnx import AttributeProto as A
    from onnx import numpy_helper

    if node.attribute and rng.random() < 0.7:
        attr = rng.choice(node.attribute)
    else:
        attr = node.attribute.add()
        names = list(schema.attributes) if schema is not None and schema.attributes else []
        attr.name = rng.choice(names or ["axis", "bogus"])
        declared = schema.attributes.get(attr.name) if schema is not None else None
        attr.type = declared.type.value if declared is not None else A.INT
    if rng.random() < 0.1:
        node.attribute.remove(attr)
        return f"attribute {attr.name} of {node.op_type} removed"
    if rng.random() < 0.1:
        attr.type = rng.choice([t for t in A.AttributeType.values() if t != attr.type])
        return f"attribute {attr.name} of {node.op_type} made type {attr.type}"
    if attr.type == A.INT:
        attr.i = rng.choice(INTS)
        value = attr.i
    elif attr.type == A.FLOAT:
        attr.f = rng.choice(FLOATS)
        value = attr.f
    elif attr.type == A.STRING:
        attr.s = rng.choice(STRINGS)
        value = attr.s
    elif attr.type in (A.INTS, A.FLOATS):
        field, pool = (attr.ints, INTS) if attr.type == A.INTS else (attr.floats, FLOATS)
        values = rng.choice(([], [rng.choice(pool)], [rng.choice(pool)] * rng.randint(2, 8),
                             [rng.randint(-3, 4) for _ in range(rng.randint(1, 8))]))
        del field[:]
        field.extend(values)
        value = values
    elif attr.type == A.TENSOR:
        shape = rng.choice(((), (1,), (2, 2), (0,), (3,)))
        dtype = rng.choice((np.float32, np.int64, np.int8, np.bool_, np.float64))
        attr.t.CopyFrom(numpy_helper.from_array(np.full(shape, rng.choice(INTS[:7]), dtype)))
        value = f"{dtype.__name__}{list(shape)}"
    else:
        attr.type = A.INT
        value = "(made INT)"
    return f"attribute {attr.name} of {node.op_type} -> {value!r}"


def _mutate_dims(value_info, rng):
    shape = value_info.type.tensor_type.shape
    if not shape.dim or rng.random() < 0.2:
        if rng.random() < 0.5:
            value_info.type.tensor_type.ClearField("shape")
            return f"shape of {value_info.name} removed"
        shape.dim.add().dim_value = rng.choice(DIMS)
        return f"dimension added to {value_info.name}"
    dim = rng.choice(shape.dim)
    if rng.random() < 0.2:
        dim.dim_param = rng.choice(("n", "batch", ""))
    elif rng.random() < 0.1:
        shape.dim.remove(dim)
    else:
        dim.dim_value = rng.choice(DIMS)
    return f"shape of {value_info.name} -> {[d.dim_value or d.dim_param for d in shape.dim]}"


def _mutate_initializer(graph, rng):
    from onnx import TensorProto

    tensor = rng.choice(graph.initializer)
    kind = rng.randrange(5)
    if kind == 0:
        tensor.dims.append(rng.choice(DIMS[:6]))
        return f"initializer {tensor.name} dims -> {list(tensor.dims)}"
    if kind == 1:
        tensor.data_type = rng.choice(TensorProto.DataType.values())
        return f"initializer {tensor.name} type -> {tensor.data_type}"
    if kind == 4 and rng.random() < 0.7:
        from onnx import numpy_helper

        shape = tuple(rng.choice((0, 1, 2, 3, 5)) for _ in range(rng.randint(0, 4)))
        dtype = rng.choice((np.float32, np.int64, np.int32, np.float16, np.bool_))
        values = np.random.default_rng(rng.randrange(1 << 30)).integers(-3, 5, shape)
        tensor.CopyFrom(numpy_helper.from_array(values.astype(dtype), tensor.name))
        return f"initializer {tensor.name} -> {dtype.__name__}{list(shape)}"
    if kind == 2 and tensor.raw_data:
        tensor.raw_data = tensor.raw_data[:rng.randrange(len(tensor.raw_data) + 1)]
        return f"initializer {tensor.name} data truncated"
    if kind == 3:
        tensor.data_location = TensorProto.EXTERNAL
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", rng.choice(("weights.bin", "../x", "/etc/passwd"))
        return f"initializer {tensor.name} made external"
    graph.initializer.remove(tensor)
    return f"initializer {tensor.name} removed"


# Mutation kinds of mutate_model, those that keep more models importable more often.
_KINDS = (0, 1, 1, 1, 2, 3, 3, 4, 4, 5, 5, 6, 7, 7, 7, 8, 9, 10, 11, 12, 13, 14)


def mutate_model(model, rng, supported):
    """Change one thing in ``model`` (a ModelProto, in place); returns what was done."""
    from onnx import TensorProto, helper

    from myelin.importers.onnx import proto

    graph = rng.choice(_graphs(model.graph))
    node = rng.choice(graph.node) if graph.node else None
    kind = rng.choice(_KINDS)
    if kind == 0 and node is not None:
        old, node.op_type = node.op_type, rng.choice(supported + list(OTHER_OPS))
        return f"op {old} -> {node.op_type}"
    if kind == 1 and node is not None:
        names = _value_names(graph) + ["", "nowhere"]
        if node.input and rng.random() < 0.5:
            index = rng.randrange(len(node.input))
            node.input[index] = rng.choice(names)
            return f"input {index} of {node.op_type} -> {node.input[index]!r}"
        if node.input and rng.random() < 0.5:
            del node.input[rng.randrange(len(node.input))]
            return f"an input of {node.op_type} removed"
        node.input.insert(rng.randint(0, len(node.input)), rng.choice(names))
        return f"an input of {node.op_type} added"
    if kind == 2 and node is not None:
        if node.output and rng.random() < 0.5:
            del node.output[rng.randrange(len(node.output))]
            return f"an output of {node.op_type} removed"
        node.output.append(rng.choice(_value_names(graph) + ["", "fresh"]))
        return f"an output of {node.op_type} added"
    if kind in (3, 4) and node is not None:
        return _mutate_attribute(node, rng, proto.schema(node, proto.opset(model)))
    if kind == 5 and (graph.input or graph.output):
        return _mutate_dims(rng.choice(list(graph.input) + list(graph.output)), rng)
    if kind == 6 and (graph.input or graph.output):
        value = rng.choice(list(graph.input) + list(graph.output))
        value.type.tensor_type.elem_type = rng.choice(TensorProto.DataType.values())
        return f"type of {value.name} -> {value.type.tensor_type.elem_type}"
    if kind == 7 and graph.initializer:
        return _mutate_initializer(graph, rng)
    if kind == 8:
        if model.opset_import and rng.random() < 0.8:
            model.opset_import[0].version = rng.choice(OPSETS)
            return f"opset -> {model.opset_import[0].version}"
        model.ClearField("opset_import")
        return "opset_import removed"
    if kind == 9 and node is not None:
        node.domain = rng.choice(("com.microsoft", "ai.onnx.ml", "ai.onnx", "x"))
        return f"domain of {node.op_type} -> {node.domain}"
    if kind == 10 and len(graph.node) > 1:
        nodes = list(graph.node)
        rng.shuffle(nodes)
        del graph.node[:]
        graph.node.extend(nodes)
        return "nodes shuffled"
    if kind == 11:        # the graph nested in If branches, a few or many levels deep
        depth = rng.choice((1, 2, 3, 20))
        flat = helper.make_graph(list(model.graph.node), "flat", [], list(model.graph.output),
                                 list(model.graph.initializer))
        inner = flat
        for level in range(depth):
            try:
                inner = helper.make_graph(
                    [helper.make_node("Constant", [], [f"c{level}"], value=helper.make_tensor(
                        "v", TensorProto.BOOL, [], [True])),
                     helper.make_node("If", [f"c{level}"], [o.name for o in flat.output],
                                      then_branch=inner, else_branch=flat)],
                    f"level{level}", [], list(flat.output))
            except Exception:  # noqa: BLE001: protobuf's own nesting limit (about 30)
                depth = level
                break
        inner.input.extend(model.graph.input)
        model.graph.CopyFrom(inner)
        return f"graph nested {depth} If levels deep"
    if kind == 12 and graph.output:
        output = rng.choice(graph.output)
        output.name = rng.choice(_value_names(graph) + ["nowhere"])
        return f"a graph output -> {output.name}"
    if kind == 13 and node is not None:
        graph.node.extend([copy.deepcopy(node)])
        return f"{node.op_type} duplicated"
    model.ir_version = rng.choice((0, 3, 7, 10, 100))
    return f"ir_version -> {model.ir_version}"


def make_case(models, index, seed, supported):
    """Case ``index`` of the run with ``seed``: a corpus model mutated."""
    rng = random.Random(f"{seed}/{index}")
    name = rng.choice(sorted(models))
    model = copy.deepcopy(models[name])
    done = []
    if rng.random() < 0.85:
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            done.append(mutate_model(model, rng, supported))
    try:
        data = model.SerializeToString()
    except Exception as error:  # noqa: BLE001: protobuf refuses some mutants
        done.append(f"(not serializable: {type(error).__name__}; original bytes)")
        data = models[name].SerializeToString()
    if not done or rng.random() < 0.12:
        data, what = mutate_bytes(data, rng)
        done.append(what)
    return fuzzing.Case(index, data, f"{name}: " + "; ".join(done))


# Running a case.
def _input_shape(value_info):
    dims = value_info.type.tensor_type.shape.dim if value_info.type.HasField("tensor_type") \
        else []
    return tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else 2
                 for d in dims)


def run_case(data, seed):
    """Parse, import, compile and run the ONNX model ``data`` (random inputs from ``seed``)."""
    import myelin.onnx
    from myelin.flow import dtypes
    from myelin.importers.onnx import proto

    rng = np.random.default_rng(seed)
    model = proto.load(data)
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    shapes = {i.name: _input_shape(i) for i in inputs}
    if any(int(np.prod(s, dtype=object)) > INPUT_ELEMENTS for s in shapes.values()):
        myelin.onnx.load(model, input_shapes=shapes, cache=False)
        return
    compiled = myelin.onnx.load(model, cache=False)
    feeds = {}
    for info in inputs:
        dtype = dtypes.to_numpy(proto.value_type(info)[0])
        shape = shapes[info.name]
        if dtype.kind == "f":
            feeds[info.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[info.name] = rng.random(shape) < 0.5
        else:
            feeds[info.name] = rng.integers(0, 4, shape).astype(dtype)
    if any(node.op_type == "Loop" for graph in _graphs(model.graph) for node in graph.node):
        with fuzzing.running_program():      # (a loop's trip count may be huge)
            compiled.run(feeds)
    else:
        compiled.run(feeds)


def main():
    parser = fuzzing.arguments(__doc__.split("\n\n")[0], 2000, "fuzz-out/onnx")
    parser.add_argument("--no-torch", action="store_true", help="helper-built models only")
    args = parser.parse_args()
    if args.replay:
        fuzzing.replay(run_case, args.replay)
        return
    import myelin.onnx

    models = corpus(torch=not args.no_torch)
    supported = myelin.onnx.supported_ops()
    cases = (make_case(models, index, args.seed, supported) for index in range(args.cases))
    tally = fuzzing.campaign(f"mutated ONNX models (seed {args.seed})", cases,
                             "fuzz_onnx:run_case", ".onnx", args.workers, args.timeout,
                             args.out, args.verbose)
    sys.exit(1 if tally.defects else 0)


if __name__ == "__main__":
    main()
