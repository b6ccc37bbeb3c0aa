"""RNN, GRU and LSTM converters against ONNX Runtime (or ONNX's reference evaluator where
ONNX Runtime lacks the case: layout 1)."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import myelin.onnx
from myelin.errors import ShapeError

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_OUTPUTS = {"RNN": ["Y", "Y_h"], "GRU": ["Y", "Y_h"], "LSTM": ["Y", "Y_h", "Y_c"]}


def _case(op, seq=4, batch=3, input_size=5, hidden=6, direction="forward", layout=0,
          bias=True, initial=False, lengths=None, peepholes=False, weights_as_inputs=False,
          seed=0, **attrs):
    """(model, feeds) for one recurrent node with random weights and inputs."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    gates = _GATES[op]

    def rand(*shape, scale=0.5):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    x_shape = (batch, seq, input_size) if layout else (seq, batch, input_size)
    state_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    values = {"X": rand(*x_shape, scale=1.0), "W": rand(dirs, gates * hidden, input_size),
              "R": rand(dirs, gates * hidden, hidden)}
    names = ["X", "W", "R"]
    if bias:
        values["B"] = rand(dirs, 2 * gates * hidden)
    names.append("B" if bias else "")
    if lengths is not None:
        values["sequence_lens"] = np.array(lengths, np.int32)
    names.append("sequence_lens" if lengths is not None else "")
    if initial:
        values["initial_h"] = rand(*state_shape, scale=1.0)
    names.append("initial_h" if initial else "")
    if op == "LSTM":
        if initial:
            values["initial_c"] = rand(*state_shape, scale=1.0)
        names.append("initial_c" if initial else "")
        if peepholes:
            values["P"] = rand(dirs, 3 * hidden)
        names.append("P" if peepholes else "")
    while names and not names[-1]:
        names.pop()
    outputs = _OUTPUTS[op]
    node = helper.make_node(op, names, outputs, hidden_size=hidden, direction=direction,
                            **({"layout": layout} if layout else {}), **attrs)
    runtime = {"X"} | ({"W", "R", "B", "initial_h"} if weights_as_inputs else set())
    inputs, inits, feeds = [], [], {}
    for name in names:
        if not name:
            continue
        value = values[name]
        elem = TensorProto.INT32 if name == "sequence_lens" else TensorProto.FLOAT
        if name in runtime:
            inputs.append(helper.make_tensor_value_info(name, elem, value.shape))
            feeds[name] = value
        else:
            inits.append(numpy_helper.from_array(value, name))
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                               for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model, feeds


def _ort(model, feeds):
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _check(model, feeds, expected=None):
    expected = expected if expected is not None else _ort(model, feeds)
    actual = myelin.onnx.load(model).run(feeds)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions(op, direction):
    _check(*_case(op, seq=3, direction=direction, initial=direction != "forward",
                  weights_as_inputs=direction == "reverse"))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_sequence_lengths(op):
    """Steps past a sequence's end keep the state and give zeros (an empty sequence has zero
    final states); the reverse direction reads each sequence backwards from its own end."""
    _check(*_case(op, batch=4, direction="bidirectional", lengths=[4, 2, 0, 3],
                  initial=True))


def test_no_bias_no_initial_state_one_step():
    for op in ("RNN", "GRU", "LSTM"):
        _check(*_case(op, seq=1, batch=1, bias=False))


def test_gru_linear_before_reset_and_clip():
    _check(*_case("GRU", direction="bidirectional", linear_before_reset=1, clip=0.7,
                  initial=True))
    _check(*_case("GRU", linear_before_reset=1, bias=False))


def test_lstm_peepholes_input_forget_clip():
    _check(*_case("LSTM", peepholes=True, initial=True, clip=1.5))
    _check(*_case("LSTM", direction="bidirectional", peepholes=True, input_forget=1))


@pytest.mark.parametrize("op,activations,alpha,beta", [
    ("RNN", ["LeakyRelu"], [0.3], None),
    ("RNN", ["ScaledTanh", "Affine"], [0.8, 1.3], [1.2, 0.1]),
    ("GRU", ["HardSigmoid", "Softsign"], [0.25], [0.4]),
    ("LSTM", ["Sigmoid", "Elu", "Softplus"], [0.7], None),
    ("LSTM", ["HardSigmoid", "Tanh", "ThresholdedRelu"], [0.3, 0.1], [0.45]),
])
def test_activations(op, activations, alpha, beta):
    direction = "bidirectional" if len(activations) == 2 and op == "RNN" else "forward"
    attrs = {"activations": activations}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    _check(*_case(op, direction=direction, **attrs))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_layout_batch_major(op):
    """layout=1 ([batch, seq, ...]); ONNX Runtime does not support it, the reference does."""
    model, feeds = _case(op, layout=1, direction="bidirectional", initial=True)
    expected = ReferenceEvaluator(model).run(None, feeds)
    _check(model, feeds, expected)


def test_only_final_state_output():
    model, feeds = _case("LSTM", direction="reverse", initial=True)
    node = model.graph.node[0]
    node.output[0] = ""
    node.output[2] = ""
    del model.graph.output[2]
    del model.graph.output[0]
    _check(model, feeds)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_input_of_another_rank_is_a_shape_error(op):
    model, feeds = _case(op)
    model.graph.input[0].type.tensor_type.shape.dim.add().dim_value = 1
    feeds["X"] = feeds["X"][..., None]
    with pytest.raises(ShapeError, match=f"{op}.*X must be 3-D"):
        myelin.onnx.load(model).run(feeds)
