"""Scaled dot-product attention (issue 25): the Attention op's reference against attention
written out in NumPy, the pass that makes the op from the exporters' patterns (and leaves near
misses alone), the CPU kernel against the reference, and an attention module exported from
PyTorch against ONNX Runtime."""

import io
import math
import warnings

import numpy as np
import pytest

import myelin
from myelin import reference
from myelin.builder import verify
from myelin.errors import ShapeError
from myelin.optimize import Context
from myelin.ops.attention import PERMS
from myelin.optimize.attention import absorb_transposes, fuse_attention
from myelin.optimize.cleanup import eliminate_dead_code

from jitcheck import PRESETS, poison, relative_error, run_and_compare

LOWEST = float(np.finfo(np.float32).min)


def numpy_attention(q, k, v, biases=(), scale=1.0, causal=False):
    """Attention in float64, query by query: the keys a causal query does not see are left
    out, a query that sees none gives NaN."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    for bias in biases:
        scores = scores + bias
    batch = np.broadcast_shapes(scores.shape[:-2], v.shape[:-2])
    scores = np.broadcast_to(scores, batch + scores.shape[-2:])
    v = np.broadcast_to(v, batch + v.shape[-2:])
    sq, skv = scores.shape[-2:]
    out = np.empty(batch + (sq, v.shape[-1]))
    for index in np.ndindex(*batch):
        for query in range(sq):
            seen = query + skv - sq + 1 if causal else skv
            if seen <= 0:
                out[index + (query,)] = math.nan if causal else 0.0
                continue
            s = scores[index + (query,)][:seen]
            with np.errstate(invalid="ignore"):
                w = np.exp(s - s.max())
                out[index + (query,)] = (w / w.sum()) @ v[index][:seen]
    return out


def attention_op(f, shapes, dtype="float32", **attrs):
    """An Attention op of inputs q, k, v, b0, b1, ... of ``shapes`` in function ``f``."""
    names = ["q", "k", "v"] + [f"b{i}" for i in range(len(shapes) - 3)]
    inputs = [f.var(name, dtype, shape) for name, shape in zip(names, shapes)]
    return f.op("Attention", inputs, "y", attrs=attrs), inputs


def random_inputs(rng, inputs):
    return {var: rng.standard_normal(var.shape).astype(var.dtype) for var in inputs}


# The reference.
REFERENCE_CASES = [
    # shapes of q, k, v, biases; attributes
    ([[2, 5, 4], [2, 7, 4], [2, 7, 3]], {}),
    ([[2, 3, 5, 4], [3, 7, 4], [1, 3, 7, 6], [5, 7], [2, 1, 1, 7]], {"scale": 0.3}),
    ([[2, 5, 4], [2, 4, 7], [2, 7, 3]], {"transpose_k": True, "causal": True}),
    ([[7, 4], [5, 4], [5, 3]], {"causal": True}),          # queries 0, 1 see no key
    ([[1, 4], [6, 4], [6, 2], [1, 6]], {"causal": True}),   # one query sees every key
]


@pytest.mark.parametrize("shapes, attrs", REFERENCE_CASES)
def test_reference_is_attention(shapes, attrs):
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    y, inputs = attention_op(f, shapes, **attrs)
    values = random_inputs(rng, inputs)
    got = reference.run(flow, "f", values)[y.name]
    q, k, v, *biases = (values[var] for var in inputs)
    if attrs.get("transpose_k"):
        k = np.swapaxes(k, -1, -2)
    want = numpy_attention(q, k, v, biases, attrs.get("scale", 1.0), attrs.get("causal", False))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_reference_reads_and_writes_through_permutations(causal):
    """perm_q, perm_k and perm_v permute the inputs into the operands, perm_out the result
    into the output (the heads of [batch, sequence, heads, depth] layouts)."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    perms = {"perm_q": [0, 2, 1, 3], "perm_k": [0, 2, 3, 1], "perm_v": [0, 2, 1, 3],
             "perm_out": [0, 2, 1, 3]}
    y, inputs = attention_op(f, [[2, 5, 3, 4], [2, 7, 3, 4], [2, 7, 3, 6]], transpose_k=True,
                             causal=causal, **perms)
    assert y.shape == (2, 5, 3, 6)
    values = random_inputs(rng, inputs)
    got = reference.run(flow, "f", values)[y.name]
    q, k, v = (np.transpose(values[var], (0, 2, 1, 3)) for var in inputs)
    want = numpy_attention(q, k, v, causal=causal)
    np.testing.assert_allclose(got, np.transpose(want, (0, 2, 1, 3)), rtol=1e-12, atol=1e-12)


def test_reference_over_no_keys():
    rng = np.random.default_rng()
    for causal, want in ((False, 0.0), (True, math.nan)):
        flow = myelin.Flow()
        f = myelin.Builder(flow, "f")
        y, inputs = attention_op(f, [[3, 4], [0, 4], [0, 2]], causal=causal)
        got = reference.run(flow, "f", random_inputs(rng, inputs))[y.name]
        np.testing.assert_array_equal(got, np.full((3, 2), want))


@pytest.mark.parametrize("shapes, attrs, message", [
    ([[5, 4], [7, 3], [7, 2]], {}, "differ in depth"),
    ([[5, 4], [7, 4], [6, 2]], {}, "differ in keys"),
    ([[5, 4], [4, 7], [6, 2]], {"transpose_k": True}, "differ in keys"),
    ([[2, 5, 4], [3, 7, 4], [7, 2]], {}, "do not broadcast"),
    ([[5, 4], [7, 4], [7, 2], [5, 1, 7]], {}, "does not broadcast to the scores"),
    ([[4], [7, 4], [7, 2]], {}, "rank 2 or more"),
    ([[2, 5, 4], [2, 7, 4], [2, 7, 2]], {"perm_q": [1, 2, 0]}, "perm_q .* moves the last"),
    ([[2, 5, 4], [2, 7, 4], [2, 7, 2]], {"perm_k": [0, 0, 1]}, "not a permutation"),
    ([[2, 5, 4], [2, 7, 4], [2, 7, 2]], {"perm_out": [0, 2, 1]}, "perm_out .* moves"),
])
def test_shape_errors(shapes, attrs, message):
    f = myelin.Builder(myelin.Flow(), "f")
    with pytest.raises(ShapeError, match=message):
        attention_op(f, shapes, **attrs)


# The pass.
def softmax(f, x, axis=-1, divide=True):
    """Softmax as the ONNX importer writes it (a Div) or as the Builder does (Reciprocal
    and Mul)."""
    e = f.exp(f.sub(x, f.max(x, axis, keepdims=True)))
    total = f.sum(e, axis, keepdims=True)
    return f.div(e, total) if divide else f.mul(e, f.rcp(total))


def pattern(scale=("Mul", 0.125), bias_shapes=((1, 1, 5, 7),), transpose_b=False,
            divide=True, dtype="float32", axis=-1, output_scores=False, bias_values=None):
    """A flow computing attention of q [2, 3, 5, 8], k and v [2, 3, 7, 8] as the exporters
    write it: y = softmax(q k^T * scale + biases) v, with the near misses the arguments
    ask for."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    q = f.var("q", dtype, [2, 3, 5, 8])
    k = f.var("k", dtype, [2, 3, 7, 8] if transpose_b else [2, 3, 8, 7])
    v = f.var("v", dtype, [2, 3, 7, 8])
    s = f.matmul(q, k, transpose_b=transpose_b)
    if scale is not None:
        kind, value = scale
        s = f.op(kind, [s, f.const(np.asarray(value, dtype))])
    for i, shape in enumerate(bias_shapes):
        bias = (f.var(f"b{i}", dtype, shape) if bias_values is None
                else f.array(f"b{i}", bias_values[i].astype(dtype)))
        s = f.add(s, bias)
    if output_scores:
        f.identity(s, name="scores")
    f.matmul(softmax(f, s, axis, divide), v, name="y")
    flow.infer_inputs_and_outputs()
    return flow


def fused(flow):
    """A copy of ``flow`` after the attention pass, and whether it changed anything."""
    copy = flow.copy()
    changed = fuse_attention(copy, Context())
    verify.check(copy)
    return copy, changed


def attention_ops(flow):
    return [op for op in flow.funcs["f"].ops if op.type == "Attention"]


def check_same_results(flow, optimized):
    """The reference gives the same results before and after the pass."""
    rng = np.random.default_rng()
    inputs = random_inputs(rng, [v for v in flow.vars.values() if v.is_input])
    before = reference.run(flow, "f", inputs)
    after = reference.run(optimized, "f", {optimized.vars[v.name]: x for v, x in inputs.items()})
    for name, want in before.items():
        np.testing.assert_allclose(after[name], want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("options, attrs, biases", [
    ({}, {"scale": "0.125", "transpose_k": "1"}, 1),
    ({"scale": ("Div", 4.0), "divide": False, "transpose_b": True}, {"scale": "0.25"}, 1),
    ({"scale": None, "bias_shapes": ()}, {"transpose_k": "1"}, 0),
    ({"bias_shapes": ((3, 5, 7), (7,))}, {"scale": "0.125", "transpose_k": "1"}, 2),
])
def test_pass_fuses_the_pattern(options, attrs, biases):
    flow = pattern(**options)
    optimized, changed = fused(flow)
    assert changed
    (op,) = attention_ops(optimized)
    assert dict(op.attrs.items()) == attrs
    assert [v.name for v in op.inputs] == ["f/q", "f/k", "f/v"] + [f"f/b{i}"
                                                                  for i in range(biases)]
    assert op.outputs[0].name == "f/y"
    assert [o.type for o in optimized.funcs["f"].ops] == ["Attention"]
    check_same_results(flow, optimized)


@pytest.mark.parametrize("masked", [-math.inf, LOWEST])
def test_pass_turns_a_constant_causal_mask_into_causal(masked):
    seen = np.arange(7) <= np.arange(5)[:, None] + 2
    causal = np.where(seen, 0.0, masked)[None, None]
    positions = np.random.default_rng().standard_normal((1, 3, 5, 7))
    flow = pattern(bias_shapes=((1, 3, 5, 7), (1, 1, 5, 7)), bias_values=[positions, causal])
    optimized, _ = fused(flow)
    (op,) = attention_ops(optimized)
    assert op.attrs.get_bool("causal") and [v.name for v in op.inputs[3:]] == ["f/b0"]
    check_same_results(flow, optimized)


def test_pass_keeps_a_lowest_value_mask_where_a_query_sees_no_key():
    # 5 queries, 3 keys: queries 0 and 1 see none. With -3.4e38 the unfused softmax is over
    # the masked scores, not over none.
    seen = np.arange(3) <= np.arange(5)[:, None] - 2
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    s = f.add(f.matmul(f.var("q", "float32", [5, 4]), f.var("k", "float32", [4, 3])),
              f.array("mask", np.where(seen, 0.0, LOWEST).astype(np.float32)))
    f.matmul(softmax(f, s), f.var("v", "float32", [3, 2]), name="y")
    flow.infer_inputs_and_outputs()
    optimized, _ = fused(flow)
    (op,) = attention_ops(optimized)
    assert not op.attrs.get_bool("causal") and len(op.inputs) == 4
    check_same_results(flow, optimized)


@pytest.mark.parametrize("options", [
    {"scale": ("Mul", np.full(7, 0.125))},        # a scale per key, not one number
    {"scale": ("Sub", 1.0)},                       # not a scale
    {"axis": -2},                                  # softmax over the queries
    {"output_scores": True},                       # the scores are read elsewhere
    {"dtype": "float16"},                          # half precision rounds every step
    {"bias_shapes": ((3, 1, 1, 1, 1),)},           # a bias that broadcasts the scores up
    {"bias_shapes": ((7,),) * 9},                  # more ops than the pass follows
])
def test_pass_leaves_near_misses(options):
    optimized, changed = fused(pattern(**options))
    assert not changed and not attention_ops(optimized)


def test_pass_leaves_a_scale_after_the_mask_and_probabilities_read_twice():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    q, k = f.var("q", "float32", [5, 4]), f.var("k", "float32", [4, 7])
    s = f.mul(f.add(f.matmul(q, k), f.var("mask", "float32", [7])), f.const(0.5))
    f.matmul(softmax(f, s), f.var("v", "float32", [7, 2]), name="y")
    p = softmax(f, f.matmul(q, k))
    f.matmul(p, f.var("w", "float32", [7, 2]), name="z")
    f.identity(p, name="p")
    flow.infer_inputs_and_outputs()
    assert not fused(flow)[1]


def heads_pattern(v_layout=([2, 9, 3, 8], [0, 2, 1, 3]), read_twice=False):
    """Attention as Hugging Face's encoders write it: q, k and v made [batch, heads,
    sequence, depth] from [batch, sequence, heads, depth] by Transposes (k straight to K^T),
    and the result moved back."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    q, k = (f.var(name, "float32", [2, 9, 3, 8]) for name in "qk")
    v = f.var("v", "float32", v_layout[0])
    heads_q = f.transpose(q, [0, 2, 1, 3])
    s = f.mul(f.matmul(heads_q, f.transpose(k, [0, 2, 3, 1])), f.const(np.float32(0.35)))
    heads_v = f.transpose(v, v_layout[1])
    y = f.matmul(softmax(f, s), heads_v)
    f.transpose(y, [0, 2, 1, 3], name="y")
    if read_twice:
        f.identity(heads_q, name="heads_q")
    flow.infer_inputs_and_outputs()
    return flow


def test_attention_reads_and_writes_through_the_transposes_next_to_it():
    flow = heads_pattern()
    optimized, _ = fused(flow)
    assert absorb_transposes(optimized, Context())
    eliminate_dead_code(optimized, Context())
    verify.check(optimized)
    (op,) = attention_ops(optimized)
    assert [o.type for o in optimized.funcs["f"].ops] == ["Attention"]
    assert [v.name for v in op.inputs] == ["f/q", "f/k", "f/v"]
    assert {name: op.attrs.get_ints(name) for name in PERMS + ("perm_out",)} == {
        "perm_q": [0, 2, 1, 3], "perm_k": [0, 2, 3, 1], "perm_v": [0, 2, 1, 3],
        "perm_out": [0, 2, 1, 3]}
    check_same_results(flow, optimized)
    net = myelin.Compiler().compile(flow)
    assert [step.type for step in net.cell("f").steps] == ["Attention"]


def test_attention_leaves_transposes_read_elsewhere_or_moving_the_last_axis():
    flow = heads_pattern(v_layout=([2, 8, 3, 9], [0, 2, 3, 1]), read_twice=True)
    optimized, _ = fused(flow)
    absorb_transposes(optimized, Context())
    (op,) = attention_ops(optimized)
    assert op.inputs[0].producer.type == "Transpose"         # read by Identity too
    assert op.inputs[2].producer.type == "Transpose"         # v's last axis would move
    assert [v.name for v in op.inputs[1:2]] == ["f/k"]
    check_same_results(flow, optimized)


def test_pytorch_multihead_attention_reads_its_heads_in_place():
    """nn.MultiheadAttention's export: each operand's heads moved by a Reshape, a Transpose
    and a Reshape that adds the batch axis, q and k scaled by a constant each, K^T made by
    one more Transpose, the result moved back: the Transposes meet (simplify_algebra moves
    them past the Reshapes of ones) and the Attention takes them in with the factors."""
    rng = np.random.default_rng(3)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    factor = f.const(np.float32(8 ** -0.25))

    def heads(name):
        x = f.var(name, "float32", [9, 1, 24])
        return f.reshape(f.transpose(f.reshape(x, [9, 3, 8]), [1, 0, 2]), [1, 3, 9, 8]), x

    (q, xq), (k, xk), (v, xv) = heads("q"), heads("k"), heads("v")
    scores = f.matmul(f.mul(q, factor), f.mul(f.transpose(k, [0, 1, 3, 2]), factor))
    y = f.matmul(softmax(f, scores), v)
    f.reshape(f.transpose(y, [2, 0, 1, 3]), [9, 24], name="y")
    net = run_and_compare(flow, {"f": random_inputs(rng, [xq, xk, xv])}, 2e-6)
    types = [step.type for step in net.cell("f").steps]
    assert "Attention" in types and "Transpose" not in types and "Mul" not in types, types


def test_pipeline_runs_the_pass_and_the_compiled_cell_has_one_step():
    flow = pattern()
    net = myelin.Compiler().compile(flow)
    assert [step.type for step in net.cell("f").steps] == ["Attention"]
    assert "fuse_attention" in myelin.optimize.pass_names()
    unfused = myelin.Compiler(disable_passes=["fuse_attention"]).compile(flow)
    assert "Attention" not in [step.type for step in unfused.cell("f").steps]


def test_cuda_planner_leaves_attention_unfused():
    from myelin.codegen.cuda import planner
    assert "Attention" not in [step.type for step in planner.plan(pattern()).cell("f").steps]


# The kernel.
KERNEL_CASES = [
    # batch, Sq, Skv, D, Dv, attributes, bias shapes
    ([2], 1, 7, 32, 32, {}, []),
    ([1, 4], 128, 128, 64, 64, {"scale": 0.125, "transpose_k": True}, [[1, 1, 128, 128]]),
    ([3], 129, 129, 80, 80, {"causal": True, "scale": 0.1}, []),
    ([2, 2], 7, 129, 33, 17, {"transpose_k": True}, [[2, 1, 7, 1], [129]]),
    ([2], 9, 5, 64, 64, {"causal": True}, []),       # queries 0 to 3 see no key
    ([2], 1, 300, 16, 24, {"causal": True}, [[300]]),    # one query sees every key
    ([], 40, 200, 32, 32, {"scale": 0.2}, [[40, 200]]),
]


def check_kernel(rng, batch, sq, skv, d, dv, attrs, bias_shapes, threads=1, features="host",
                 fill=None, dtype="float32", tolerance=2e-6):
    """Compile an Attention op, compute it on random inputs (``fill(values)`` may change
    them) and compare with the reference."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    k_shape = [d, skv] if attrs.get("transpose_k") else [skv, d]
    shapes = [batch + [sq, d], batch + k_shape, batch + [skv, dv]] + bias_shapes
    y, inputs = attention_op(f, shapes, dtype, **attrs)
    compute_and_compare(rng, flow, y, inputs, threads, features, fill, tolerance)


def compute_and_compare(rng, flow, y, inputs, threads=1, features="host", fill=None,
                        tolerance=2e-6):
    """Compile ``flow``, compute its output ``y`` on random ``inputs`` (``fill(values)`` may
    change them) in a poisoned instance and compare it with the reference."""
    net = myelin.Compiler(threads=threads, features=features).compile(flow)
    data = net.cell("f").instance()
    poison(data)
    values = random_inputs(rng, inputs)
    if fill is not None:
        fill(values)
    for var, value in values.items():
        data[var] = value
    data.compute()
    want = reference.run(flow, "f", values)[y.name]
    got = np.asarray(data[y])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    error = relative_error(got, want)
    assert error < tolerance, f"relative error {error:.3g} [{features}, {threads} threads]"


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", KERNEL_CASES)
def test_kernel_matches_reference(case, threads):
    check_kernel(np.random.default_rng(), *case, threads=threads)


@pytest.mark.parametrize("features", PRESETS)
def test_kernel_under_cpu_features(features):
    check_kernel(np.random.default_rng(), [2], 13, 37, 20, 12, {"causal": True},
                 [[13, 37]], features=features)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("sq, skv, d, dv, causal", [
    (128, 128, 64, 64, False), (9, 37, 20, 12, True), (1, 300, 32, 48, True)])
@pytest.mark.parametrize("layout", ["heads", "keys"])
def test_kernel_through_permutations(layout, sq, skv, d, dv, causal, threads):
    """Operands read and the result written in the layouts exporters keep them in: q, v and
    the output [batch, sequence, heads, depth] and K^T from k of the same layout (Hugging
    Face's encoders), or from k [batch, heads, keys, depth] (Llama's)."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    heads = 3
    if layout == "heads":
        k_shape, perm_k = [2, skv, heads, d], [0, 2, 3, 1]
    else:
        k_shape, perm_k = [2, heads, skv, d], [0, 1, 3, 2]
    y, inputs = attention_op(
        f, [[2, sq, heads, d], k_shape, [2, skv, heads, dv], [2, 1, 1, skv]],
        transpose_k=True, causal=causal, scale=0.3, perm_q=[0, 2, 1, 3], perm_k=perm_k,
        perm_v=[0, 2, 1, 3], perm_out=[0, 2, 1, 3])
    compute_and_compare(rng, flow, y, inputs, threads)


def test_kernel_in_float64():
    check_kernel(np.random.default_rng(), [3], 11, 45, 16, 9, {"scale": 0.25}, [[45]],
                 dtype="float64", tolerance=1e-13)


@pytest.mark.parametrize("causal", [False, True])
def test_kernel_masked_rows_infinities_and_nans(causal):
    """Rows masked with -inf everywhere give NaN, rows masked with the lowest float give the
    mean of the values (as the unfused softmax), a row masked in its first block of keys only
    the softmax of the others; a NaN or +inf score makes its row NaN; a NaN key or infinite
    value a causal query does not see stays out of its row."""
    def fill(values):
        q, k, v, mask = values.values()
        mask[...] = 0
        mask[0, 1] = -math.inf
        mask[0, 2] = LOWEST
        mask[1, 3, :128] = -math.inf
        q[1, 4, 0] = math.nan
        q[1, 5, 0] = math.inf
        if causal:
            k[0, 154, :] = math.nan         # seen by query 5 only
            v[1, 153, 0] = math.inf         # seen by queries 4 and 5 only
    # (Each row averages up to 155 values of size 1 into an output of about 0.1, while the
    # float32 sums' rounding follows the values: 2-3e-6 of the outputs' norm is rounding.)
    for threads in (1, 2):
        check_kernel(np.random.default_rng(), [2], 6, 155, 64, 64, {"causal": causal},
                     [[2, 6, 155]], threads=threads, fill=fill, tolerance=1e-5)


def test_kernel_over_no_keys():
    rng = np.random.default_rng()
    for attrs in ({}, {"causal": True}):
        check_kernel(rng, [2], 3, 0, 4, 5, attrs, [])


# An attention module exported from PyTorch.
def test_pytorch_attention_matches_onnxruntime():
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    import myelin.onnx

    class SelfAttention(torch.nn.Module):
        """Multi-head self-attention with a padding mask, as transformers' BERT writes it."""

        def __init__(self, width=48, heads=3):
            super().__init__()
            self.heads = heads
            self.qkv = torch.nn.Linear(width, 3 * width)

        def forward(self, x, mask):
            b, n, width = x.shape
            q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2)
                       for t in self.qkv(x).split(width, -1))
            scores = q @ k.transpose(-1, -2) / math.sqrt(width // self.heads)
            scores = scores + (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min
            return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, width)

    torch.manual_seed(0)
    module = SelfAttention().eval()
    x, mask = torch.randn(2, 37, 48), torch.ones(2, 37)
    mask[1, 29:] = 0
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x, mask), buffer, dynamo=False, opset_version=17,
                          input_names=["x", "mask"], output_names=["y"])
    model = myelin.onnx.load(buffer.getvalue())
    feeds = {"x": x.numpy(), "mask": mask.numpy()}
    (y,) = model.run(feeds)
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)[0]
    assert np.abs(y - want).max() <= 1e-4 * np.abs(want).max()
    assert [step.type for step in model.network().cell("main").steps].count("Attention") == 1
