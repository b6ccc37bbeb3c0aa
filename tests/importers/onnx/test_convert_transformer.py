"""Attention, RMSNormalization, RotaryEmbedding and GroupNormalization converters against
ONNX Runtime (and ONNX's reference evaluator for the features ONNX Runtime lacks)."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import myelin.onnx

_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
          np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}


def _model(op, feeds, outputs, opset, initializers=None, **attrs):
    """A one-node model; ``feeds`` (name -> array, None for an absent input, named by blanks)
    are graph inputs,
    ``initializers`` constants."""
    initializers = initializers or {}
    names = [n.strip() for n in feeds]
    out_type = _TYPES[next(iter(feeds.values())).dtype]
    node = helper.make_node(op, names, outputs, **attrs)
    inputs = [helper.make_tensor_value_info(n, _TYPES[v.dtype], v.shape)
              for n, v in feeds.items() if v is not None and n not in initializers]
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info(o, out_type, None)
                              for o in outputs if o],
        [numpy_helper.from_array(v, n) for n, v in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, oracle="ort", rtol=1e-4, atol=1e-5):
    runtime = {n: v for n, v in feeds.items()
               if v is not None and n not in {t.name for t in model.graph.initializer}}
    if oracle == "ort":
        session = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=["CPUExecutionProvider"])
        expected = session.run(None, runtime)
    else:
        expected = ReferenceEvaluator(model).run(None, runtime)
    actual = myelin.onnx.load(model).run(runtime)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=rtol, atol=atol)


def _rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# Attention.
@pytest.mark.parametrize("heads,kv_heads,causal,scale,softcap", [
    (2, 2, 0, None, None), (4, 2, 1, None, None), (3, 3, 0, 0.3, None),
    (4, 1, 1, None, 2.0), (2, 2, 1, 0.5, 1.5)])
def test_attention_4d(heads, kv_heads, causal, scale, softcap):
    rng = np.random.default_rng(heads * 10 + kv_heads)
    feeds = {"Q": _rand(rng, 2, heads, 5, 8), "K": _rand(rng, 2, kv_heads, 7, 8),
             "V": _rand(rng, 2, kv_heads, 7, 6)}
    attrs = {k: v for k, v in (("is_causal", causal), ("scale", scale), ("softcap", softcap))
             if v is not None}
    _check(_model("Attention", feeds, ["Y"], 23, **attrs), feeds)


@pytest.mark.parametrize("mask_shape,dtype,causal", [
    ((5, 7), np.float32, 0), ((2, 1, 5, 7), np.bool_, 0), ((3, 5, 7), np.float32, 1),
    ((5, 7), np.bool_, 1), ((1, 3, 5, 4), np.float32, 0)])
def test_attention_masks(mask_shape, dtype, causal):
    rng = np.random.default_rng(len(mask_shape))
    feeds = {"Q": _rand(rng, 2, 3, 5, 4), "K": _rand(rng, 2, 3, 7, 4), "V": _rand(rng, 2, 3, 7, 4)}
    if dtype == np.bool_:
        mask = rng.random(mask_shape) < 0.7
        mask[..., 0] = True       # every row attends something
    else:
        mask = _rand(rng, *mask_shape)
    feeds["attn_mask"] = mask
    # A mask shorter than the keys is padded with -inf: ONNX's reference defines it.
    oracle = "ort" if mask_shape[-1] == 7 else "reference"
    _check(_model("Attention", feeds, ["Y"], 23, is_causal=causal), feeds, oracle)


def test_attention_fully_masked_row_is_zero():
    rng = np.random.default_rng(3)
    feeds = {"Q": _rand(rng, 1, 2, 3, 4), "K": _rand(rng, 1, 2, 3, 4), "V": _rand(rng, 1, 2, 3, 4),
             "attn_mask": np.array([[False] * 3, [True, False, True], [True] * 3])}
    model = _model("Attention", feeds, ["Y", "", "", "qk"], 24, qk_matmul_output_mode=3)
    _check(model, feeds, "reference")
    y = myelin.onnx.load(model).run({k: v for k, v in feeds.items()})[0]
    assert np.all(y[:, :, 0] == 0) and np.all(np.isfinite(y))


@pytest.mark.parametrize("heads,kv_heads,mode,causal", [
    (2, 2, 0, 0), (4, 2, 1, 1), (2, 2, 2, 0), (6, 3, 3, 1)])
def test_attention_3d_past_present_qk(heads, kv_heads, mode, causal):
    rng = np.random.default_rng(mode)
    head_size = 4
    feeds = {"Q": _rand(rng, 2, 3, heads * head_size),
             "K": _rand(rng, 2, 3, kv_heads * head_size),
             "V": _rand(rng, 2, 3, kv_heads * 5),
             "attn_mask": _rand(rng, 3, 8),
             "past_key": _rand(rng, 2, kv_heads, 5, head_size),
             "past_value": _rand(rng, 2, kv_heads, 5, 5)}
    model = _model("Attention", feeds, ["Y", "present_key", "present_value", "qk"], 23,
                   q_num_heads=heads, kv_num_heads=kv_heads, qk_matmul_output_mode=mode,
                   is_causal=causal, softcap=3.0)
    _check(model, feeds, "reference")


def test_attention_nonpad_window_and_float16():
    rng = np.random.default_rng(5)
    feeds = {"Q": _rand(rng, 2, 4, 3, 8), "K": _rand(rng, 2, 2, 6, 8), "V": _rand(rng, 2, 2, 6, 8),
             "": None, " ": None, "  ": None, "nonpad_kv_seqlen": np.array([4, 6], np.int64)}
    _check(_model("Attention", feeds, ["Y"], 24, is_causal=1), feeds, "reference")
    _check(_model("Attention", feeds, ["Y"], 25, left_window_size=2, right_window_size=1),
           feeds, "reference")
    half = {k: v.astype(np.float16) if v is not None and v.dtype == np.float32 else v
            for k, v in feeds.items()}
    _check(_model("Attention", half, ["Y"], 24, is_causal=1), half, "reference",
           rtol=2e-3, atol=2e-3)


# Normalizations and rotary embeddings.
@pytest.mark.parametrize("shape,axis,epsilon", [((4, 7), -1, 1e-5), ((2, 3, 5), 1, 1e-2),
                                                ((2, 3, 4, 5), 0, 1e-5)])
def test_rms_normalization(shape, axis, epsilon):
    rng = np.random.default_rng(len(shape))
    feeds = {"X": _rand(rng, *shape), "scale": _rand(rng, *shape[axis:])}
    _check(_model("RMSNormalization", feeds, ["Y"], 23, axis=axis, epsilon=epsilon), feeds)


@pytest.mark.parametrize("opset,shape,groups", [(21, (2, 6, 3, 4), 3), (21, (3, 4, 5), 4),
                                                (18, (2, 6, 3, 4), 2), (18, (2, 4, 7), 4)])
def test_group_normalization(opset, shape, groups):
    rng = np.random.default_rng(opset + groups)
    params = shape[1] if opset >= 21 else groups
    feeds = {"X": _rand(rng, *shape), "scale": _rand(rng, params), "bias": _rand(rng, params)}
    model = _model("GroupNormalization", feeds, ["Y"], opset, num_groups=groups,
                   epsilon=1e-3)
    _check(model, feeds)


@pytest.mark.parametrize("rank,interleaved,rotary_dim,positions", [
    (4, 0, 0, True), (4, 1, 0, True), (3, 0, 4, True), (3, 1, 6, False), (4, 0, 4, False)])
def test_rotary_embedding(rank, interleaved, rotary_dim, positions):
    rng = np.random.default_rng(rank * 7 + interleaved)
    batch, heads, seq, size = 2, 3, 5, 8
    half = (rotary_dim or size) // 2
    x = _rand(rng, batch, heads, seq, size) if rank == 4 else _rand(rng, batch, seq, heads * size)
    if positions:
        cache = (10, half)
        ids = rng.integers(0, 10, (batch, seq)).astype(np.int64)
    else:
        cache = (batch, seq, half)
    angles = rng.random(cache).astype(np.float32) * 6
    feeds = {"X": x, "cos": np.cos(angles), "sin": np.sin(angles)}
    if positions:
        feeds["position_ids"] = ids
    attrs = {"interleaved": interleaved}
    if rotary_dim:
        attrs["rotary_embedding_dim"] = rotary_dim
    if rank == 3:
        attrs["num_heads"] = heads
    _check(_model("RotaryEmbedding", feeds, ["Y"], 23, **attrs), feeds)
