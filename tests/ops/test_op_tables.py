"""The registry is the only op table: every element-wise op it holds is lowered (or expanded)
by each back end and made by a Builder method, and every op is converted by the importers of
the formats that have an op of its name; the tables of the other layers derive from it."""

import numpy as np
import onnx
import onnx.defs
import pytest

import myelin
from myelin import ops
from myelin.codegen.cuda import expressions
from myelin.codegen.llvm import elementwise
from myelin.importers.onnx import converters as onnx_converters
from jitcheck import registry_domains

ELEMENT_WISE = [t for t in ops.types()
                if ops.lookup(t).kind in (ops.Kind.ELEMWISE, ops.Kind.BROADCAST)]
# Element-wise by kind, but never a fused loop: passes remove them before planning.
REWRITTEN = {"BatchNormalization": "folded into the convolution or scaled by the optimizer",
             "Dropout": "the identity at inference, removed by the optimizer"}


@pytest.mark.parametrize("op_type", ELEMENT_WISE)
def test_every_back_end_lowers_or_expands_it(op_type):
    if op_type in REWRITTEN:
        pytest.skip(REWRITTEN[op_type])
    assert elementwise.supported(op_type)
    assert expressions.supported(op_type)


def test_composite_ops_have_no_lowering_of_their_own():
    composite = {t for t in ELEMENT_WISE if ops.expansion_uses(t) is not None}
    assert {"Cot", "Acsch", "Softsign", "QuickGelu"} <= composite
    assert composite.isdisjoint(expressions.op_types())


@pytest.mark.parametrize("op_type", [t for t in ops.types() if ops.helper(ops.lookup(t))])
def test_the_builder_has_its_helper(op_type):
    assert callable(getattr(myelin.Builder, ops.helper(ops.lookup(op_type))))


@pytest.mark.parametrize("op_type", sorted(registry_domains(1)) + sorted(registry_domains(2)))
def test_a_helper_makes_its_op(op_type):
    f = myelin.Builder(myelin.Flow(), "f")
    args = [f.var(f"x{i}", "float32", [3]) for i in range(ops.lookup(op_type).inputs[0])]
    assert getattr(f, ops.helper(ops.lookup(op_type)))(*args).producer.type == op_type


# TensorFlow ops of a registered op's name that its importer does not convert, and why.
TENSORFLOW_GAPS = {
    "Assign": "TF1's reference variables, which graphs frozen for inference no longer hold",
    "Conv": "TF 2's generic N-D Conv, which Keras does not emit (Conv2D and Conv3D convert)",
    "If": "TensorFlow's functional control flow (If, StatelessIf) is not imported yet",
    "TopK": "TF1's TopK with k an attribute (TopKV2, its successor, is not imported yet)",
}


@pytest.mark.parametrize("op_type", ops.types())
def test_the_importers_convert_it_where_the_format_has_it(op_type):
    opdef = ops.lookup(op_type)
    for name in opdef.names.get("onnx", ()):
        domain, _, onnx_type = name.rpartition(".")
        assert onnx_converters.find(onnx_type, domain) is not None, name
    if onnx.defs.has(op_type):           # ONNX has an op of this name
        assert onnx_converters.find(op_type) is not None
    tf = pytest.importorskip("tensorflow")
    from myelin.importers.tensorflow import converters as tf_converters
    for name in opdef.names.get("tensorflow", ()):
        assert hasattr(tf.raw_ops, name), name
        assert tf_converters.find(name) is not None, name
    if hasattr(tf.raw_ops, op_type) and op_type not in TENSORFLOW_GAPS:
        assert tf_converters.find(op_type) is not None


def test_torch_names_are_aten_ops():
    torch = pytest.importorskip("torch")
    from myelin.importers.torch import converters as torch_converters
    for name, op_type in ops.named("torch").items():
        assert hasattr(torch.ops.aten, name), name
        assert torch_converters.find(f"aten.{name}.default") is not None, name


def test_a_contrib_op_named_by_the_registry_imports_with_its_attributes():
    """com.microsoft.QuickGelu (ONNX Runtime's transformer optimizer writes it for CLIP-style
    x sigmoid(1.702 x)) comes from the registry's names alone, alpha included."""
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 33])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 33])
    nodes = [onnx.helper.make_node("QuickGelu", ["x"], ["h"], domain="com.microsoft"),
             onnx.helper.make_node("QuickGelu", ["h"], ["y"], domain="com.microsoft", alpha=1.0)]
    graph = onnx.helper.make_graph(nodes, "g", [x], [y])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17),
                                                         onnx.helper.make_opsetid(
                                                             "com.microsoft", 1)])
    values = np.random.default_rng(0).normal(0, 4, (4, 33)).astype(np.float32)
    (got,) = myelin.onnx.load(model.SerializeToString()).run({"x": values})
    h = values / (1 + np.exp(-1.702 * values.astype(np.float64)))
    np.testing.assert_allclose(got, h / (1 + np.exp(-h)), rtol=2e-6, atol=1e-7)
    onnxruntime = pytest.importorskip("onnxruntime")
    (theirs,) = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": values})
    np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-6)
