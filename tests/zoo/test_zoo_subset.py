"""The zoo's quick subset: tiny models of the kinds that real models broke on (a depthwise
convolution quantized to QDQ, a dynamic-axis export, a float16 model, inputs declared with
dim_value -1, If subgraphs feeding an LSTM, a parallel convolution block computed many times),
built here with torch.nn and onnx.helper and checked by the zoo runner's own functions
(benchmarks/zoo/check.py) against ONNX Runtime."""

import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

import myelin.onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from zoo import check  # noqa: E402
from zoo.catalog import Input  # noqa: E402

nn = torch.nn


def _meta(name, inputs, precision="float32"):
    return {"name": name, "precision": precision,
            "inputs": [spec.describe(n) for n, spec in inputs.items()]}


def _check(path, meta):
    return check.check_model(path, meta, repeats=20, timing=False)


def _export(module, shape, path, dynamic=False):
    torch.manual_seed(0)
    module.eval()
    axes = {"x": {0: "batch"}, "y": {0: "batch"}} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the classic exporter is deprecated
        torch.onnx.export(module, (torch.randn(shape),), str(path), dynamo=False,
                          input_names=["x"], output_names=["y"], dynamic_axes=axes,
                          opset_version=17)


class _Depthwise(nn.Module):
    """A MobileNet block: 1x1 expansion, 3x3 depthwise convolution, 1x1 projection."""

    def __init__(self, channels=8, expand=4):
        super().__init__()
        wide = channels * expand
        self.block = nn.Sequential(
            nn.Conv2d(channels, wide, 1), nn.ReLU6(),
            nn.Conv2d(wide, wide, 3, padding=1, groups=wide), nn.ReLU6(),
            nn.Conv2d(wide, channels, 1))

    def forward(self, x):
        return x + self.block(x)


def test_inputs_of_each_kind():
    specs = {"ids": Input("tokens", (2, 16), "int64", high=50), "mask": Input("mask", (2, 16),
             "int64"), "sr": Input("value", (), "int64", value=16000),
             "image": Input("image", (1, 3, 4, 4), "float16")}
    feeds = check.make_inputs(specs, np.random.default_rng(0))
    assert feeds["ids"].dtype == np.int64 and 0 <= feeds["ids"].min() and feeds["ids"].max() < 50
    assert feeds["mask"][:, :12].all() and not feeds["mask"][:, 12:].any()
    assert feeds["sr"].shape == () and feeds["sr"] == 16000
    assert feeds["image"].dtype == np.float16 and feeds["image"].shape == (1, 3, 4, 4)


def test_errors_have_an_absolute_floor_for_outputs_near_zero():
    # ONNX Runtime's float32 sigmoid(-17) is 8.9e-8 where the true value is 4.1e-8.
    want = np.full((4,), 8.9e-8, np.float32)
    got = np.full((4,), 4.1e-8, np.float32)
    errs = check.errors([got], [want])
    assert check.relative(errs) > 0.5
    assert check.within(errs, "float32")
    assert not check.within(check.errors([got + 1e-5], [want]), "float32")
    # Shapes or NaN positions that differ are infinitely wrong.
    assert check.errors([np.zeros(3)], [np.zeros(4)])[0][0] == np.inf
    assert check.errors([np.array([np.nan, 1])], [np.array([1.0, 1])])[0][0] == np.inf


def test_depthwise_convolution_quantized_to_qdq(tmp_path):
    from onnxruntime import quantization as q

    shape = (1, 8, 24, 24)
    float_path, path = tmp_path / "block.onnx", tmp_path / "block_int8.onnx"
    _export(_Depthwise(), shape, float_path)
    rng = np.random.default_rng(1)
    batches = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])
    reader = type("Reader", (), {"get_next": lambda self: next(batches, None)})()
    q.quantize_static(str(float_path), str(path), reader, quant_format=q.QuantFormat.QDQ,
                      activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8)
    meta = _meta("block_int8", {"x": Input("image", shape)}, "int8")
    result = _check(path, meta)
    assert result["outcome"] == "ok", result
    # QuantizeLinear rounds x/scale half to even as the spec says, in the fused forms too: the
    # output is the float64 evaluation of the quantized graph but for rare near-ties (ONNX
    # Runtime's int8 kernels put a few percent of the values one step off it).
    feeds = check.make_inputs({"x": Input("image", shape)}, np.random.default_rng(7))
    (got,) = myelin.onnx.load(str(path)).run(feeds)
    (exact,), _ = check.higher_precision(path, meta, feeds)
    off = np.abs(got - exact) > 1e-5 * np.abs(exact).max()
    assert off.mean() < 0.005, f"{off.mean():.2%} of the values differ"


def test_dynamic_batch_export(tmp_path):
    path = tmp_path / "dynamic.onnx"
    module = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                           nn.Flatten(), nn.Linear(8, 5))
    _export(module, (1, 3, 16, 16), path, dynamic=True)
    declared = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim[0]
    assert declared.dim_param == "batch"
    result = _check(path, _meta("dynamic", {"x": Input("image", (3, 3, 16, 16))}))
    assert result["outcome"] == "ok", result


def _mlp_float16(path):
    rng = np.random.default_rng(2)
    w1 = numpy_helper.from_array((rng.standard_normal((32, 64)) / 6).astype(np.float16), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(64).astype(np.float16), "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((64, 10)) / 8).astype(np.float16), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["z"]),
             helper.make_node("Softmax", ["z"], ["y"], axis=-1)]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4, 10])], [w1, b1, w2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_float16_model(tmp_path):
    path = tmp_path / "mlp16.onnx"
    _mlp_float16(path)
    result = _check(path, _meta("mlp16", {"x": Input("float", (4, 32), "float16")}, "float16"))
    assert result["outcome"] == "ok", result


def _paddle_style(path):
    """A classifier whose input is declared [-1, 3, ?, ?], as Paddle exports declare it."""
    rng = np.random.default_rng(3)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["p"]),
             helper.make_node("Flatten", ["p"], ["y"])]
    graph = helper.make_graph(
        nodes, "paddle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "?", "?"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.graph.input[0].type.tensor_type.shape.dim[2].ClearField("dim_param")
    model.graph.input[0].type.tensor_type.shape.dim[3].ClearField("dim_param")
    onnx.save(model, str(path))


def test_inputs_declared_with_dim_value_minus_one(tmp_path):
    path = tmp_path / "paddle.onnx"
    _paddle_style(path)
    assert onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim[0].dim_value == -1
    result = _check(path, _meta("paddle", {"x": Input("image", (1, 3, 48, 192))}))
    assert result["outcome"] == "ok", result


def _branch(name, nodes, outputs):
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(o, TensorProto.FLOAT,
                                                                            None)
                                               for o in outputs])


def _voice_activity(path, hidden=6):
    """Silero VAD's structure in small: an If on the sample rate input whose branches squeeze
    the batch axis when it is 1 (an If on a shape), add it back when the rank is 2 (an If on the
    rank of the first If's result) and run an LSTM on the result."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, 8)).astype(np.float32)
                                     / 3, "W"),
             numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, hidden))
                                     .astype(np.float32) / 3, "R"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array(3, np.int64), "three"),
             numpy_helper.from_array(np.array(16000, np.int64), "rate"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]

    def decoder(prefix, source):
        p = prefix
        squeeze = _branch(f"{p}squeeze", [helper.make_node("Squeeze", [source, "zero"],
                                                           [f"{p}squeezed"])], [f"{p}squeezed"])
        keep = _branch(f"{p}keep", [helper.make_node("Identity", [source], [f"{p}kept"])],
                       [f"{p}kept"])
        add = _branch(f"{p}add", [helper.make_node("Unsqueeze", [f"{p}y", "one"],
                                                   [f"{p}unsqueezed"])], [f"{p}unsqueezed"])
        same = _branch(f"{p}same", [helper.make_node("Identity", [f"{p}y"], [f"{p}same"])],
                       [f"{p}same"])
        return [
            helper.make_node("Shape", [source], [f"{p}shape"]),
            helper.make_node("Gather", [f"{p}shape", "zero"], [f"{p}batch"]),
            helper.make_node("Equal", [f"{p}batch", "one"], [f"{p}single"]),
            helper.make_node("Squeeze", [f"{p}single"], [f"{p}single0"]),
            helper.make_node("If", [f"{p}single0"], [f"{p}y"], then_branch=squeeze,
                             else_branch=keep),
            helper.make_node("Shape", [f"{p}y"], [f"{p}yshape"]),
            helper.make_node("Size", [f"{p}yshape"], [f"{p}rank"]),
            helper.make_node("Equal", [f"{p}rank", "three"], [f"{p}is3"]),
            helper.make_node("Not", [f"{p}is3"], [f"{p}not3"]),
            helper.make_node("If", [f"{p}not3"], [f"{p}seq"], then_branch=add,
                             else_branch=same),
            helper.make_node("LSTM", [f"{p}seq", "W", "R"], [f"{p}all", f"{p}h"],
                             hidden_size=hidden),
        ]

    then_nodes = decoder("a_", "x")
    else_nodes = [helper.make_node("Mul", ["x", "two"], ["x2"])] + decoder("b_", "x2")
    graph = helper.make_graph(
        [helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
         helper.make_node("If", ["is16k"], ["y"], then_branch=_branch("then", then_nodes,
                                                                      ["a_h"]),
                          else_branch=_branch("else", else_nodes, ["b_h"]))],
        "vad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "time", 8]),
                helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]), str(path))


def test_if_subgraphs_on_shapes_feeding_an_lstm(tmp_path):
    path = tmp_path / "vad.onnx"
    _voice_activity(path)
    result = _check(path, _meta("vad", {"x": Input("audio", (1, 5, 8)),
                                        "sr": Input("value", (), "int64", value=16000)}))
    assert result["outcome"] == "ok", result


class _SqueezeExcite(nn.Module):
    """EfficientNet's MBConv block: expansion, depthwise convolution, squeeze and excitation
    (a global pool and two 1x1 convolutions scaling the channels), projection."""

    def __init__(self, channels=16, expand=6):
        super().__init__()
        wide = channels * expand
        self.expand = nn.Sequential(nn.Conv2d(channels, wide, 1, bias=False),
                                    nn.BatchNorm2d(wide), nn.SiLU())
        self.depthwise = nn.Sequential(nn.Conv2d(wide, wide, 5, padding=2, groups=wide,
                                                 bias=False), nn.BatchNorm2d(wide), nn.SiLU())
        self.excite = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(wide, 4, 1), nn.SiLU(),
                                    nn.Conv2d(4, wide, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(wide, channels, 1, bias=False),
                                     nn.BatchNorm2d(channels))

    def forward(self, x):
        y = self.depthwise(self.expand(x))
        return x + self.project(y * self.excite(y))


def test_parallel_block_gives_the_same_result_every_time(tmp_path):
    # Large enough that the kernels split their work over threads; a race between tasks (a
    # shared scratch buffer, a step starting before the one it reads has finished) shows as
    # results that differ from run to run.
    path = tmp_path / "mbconv.onnx"
    _export(nn.Sequential(_SqueezeExcite(), _SqueezeExcite()), (1, 16, 56, 56), path)
    result = check.check_model(path, _meta("mbconv", {"x": Input("image", (1, 16, 56, 56))}),
                               repeats=100, timing=False)
    assert result["outcome"] == "ok", result
    assert result["repeat_differs"] == 0



def test_runner_checks_each_model_in_a_subprocess(tmp_path):
    from zoo import catalog, run

    _mlp_float16(tmp_path / "mlp16.onnx")
    meta = _meta("mlp16", {"x": Input("float", (4, 32), "float16")}, "float16")
    catalog.write_meta(tmp_path / "mlp16.json", meta)
    result = run.check_in_subprocess("mlp16", tmp_path, timeout=300)
    assert result["outcome"] == "ok" and result["repeat_differs"] == 0, result
    assert result["ratio"] > 0 and "mlp16 |" in run.markdown_row(result)
    assert run.check_in_subprocess("absent", tmp_path, timeout=300)["outcome"] == "not built"
    late = run.check_in_subprocess("mlp16", tmp_path, timeout=0.01)
    assert late["outcome"] == "timeout", late
