"""Operator fusion: the groups it forms, kernel counts of representative graphs after
compilation, and the compiled results against the reference interpreter."""

import numpy as np
import pytest

import myelin
from myelin import reference
from myelin.builder import verify
from myelin.ops import recipe
from myelin.optimize import Context, fusion

from jitcheck import guide_flow, relative_error


def inferred_guide_flow(rng):
    flow = guide_flow(rng)[0]
    flow.infer_inputs_and_outputs()
    return flow


def fused(flow):
    flow = flow.copy()
    assert fusion.fuse(flow, Context())
    verify.check(flow)
    return flow


def types_and_recipes(flow, func="f"):
    return [(op.type, op.attrs.get("expr")) for op in flow.funcs[func].ops]


def compile_and_check(flow, inputs, tolerance=2e-5):
    """Compile at the default level, compare every output with the reference on ``flow``."""
    net = myelin.Compiler().compile(flow)
    for name, values in inputs.items():
        data = net.cell(name).instance()
        for key, value in values.items():
            data[key] = value
        data.compute()
        for out, want in reference.run(flow, name, values).items():
            assert relative_error(np.asarray(data[out]), want) < tolerance, out
    return net


def test_guide_example_fuses_like_myelin():
    flow = fused(inferred_guide_flow(np.random.default_rng()))
    assert types_and_recipes(flow) == [
        ("FusedMatMul", "@0=Relu(Add(%0,%1))"),
        ("Max", None),
        ("Calculate", "@0=Exp(Sub(%0,%1));@1=Sum(@0)"),
        ("Calculate", "@0=Mul(%1,Reciprocal(%0))"),
    ]
    assert "f/y" in flow.vars and flow.vars["f/y"].producer.type == "Calculate"
    assert "expr = @0=Exp(Sub(%0,%1));@1=Sum(@0)" in str(flow)
    assert "Exp(Sub(%0,%1))" in flow.to_dot("f")


def test_guide_example_compiles_to_four_steps():
    rng = np.random.default_rng()
    flow = inferred_guide_flow(rng)
    net = compile_and_check(flow, {"f": {"f/x": rng.random((1, 64), dtype=np.float32)}})
    cell = net.cell("f")
    assert len(cell.steps) == 4
    text = str(cell)
    assert "f/y = Calculate" in text and "FusedMatMul" in text
    assert "// @0=Exp(Sub(%0,%1));@1=Sum(@0)" in text


def test_cycles_through_outside_ops_are_refused():
    # Sub reads Exp directly and through a Sum over axis 0 (not a trailing reduction, so the
    # Sum stays outside): fusing Sub with Exp would make a cycle through the Sum.
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    e = f.exp(f.var("x", "float32", [4, 6]))
    f.sub(e, f.sum(e, axis=0, keepdims=True), name="y")
    flow.infer_inputs_and_outputs()
    copy = flow.copy()
    assert not fusion.fuse(copy, Context())
    assert [op.type for op in copy.funcs["f"].ops] == ["Exp", "Sum", "Sub"]


def test_two_groups_feeding_each_other_are_not_both_formed():
    # HRNet's exchange units: group A = {Add, Relu, Add} reads a product of group B's Relu,
    # and group B reads a product of group A's Relu. Each group alone has no path out and
    # back, but fused together they would be a cycle A -> MatMul -> B -> MatMul -> A.
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x, y = (f.var(name, "float32", [3, 5]) for name in ("x", "y"))
    w = [f.const(rng.standard_normal((5, 5)).astype(np.float32)) for _ in range(2)]
    a = f.relu(f.add(x, x))
    b = f.relu(f.mul(y, y))
    f.add(a, f.matmul(b, w[0]), name="p")
    f.add(b, f.matmul(a, w[1]), name="q")
    flow.infer_inputs_and_outputs()
    flow.order(fused(flow).funcs["f"])      # no cycle
    compile_and_check(flow, {"f": {"f/x": rng.standard_normal((3, 5), dtype=np.float32),
                                   "f/y": rng.standard_normal((3, 5), dtype=np.float32)}})


def test_intermediate_outputs_stay_outputs():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [3, 5])
    h = f.tanh(x, name="h")
    f.mul(h, h, name="y")
    flow.vars["f/h"].is_output = True
    flow.infer_inputs_and_outputs()
    out = fused(flow)
    (op,) = out.funcs["f"].ops
    assert op.type == "Calculate" and [v.name for v in op.outputs] == ["f/h", "f/y"]
    assert recipe.parse(op.attrs["expr"]).outputs == 2


def test_broadcast_scalar_subgroup_is_inlined():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [4, 8])
    scale = f.op("Reciprocal", [f.sum(x, axis=-1, keepdims=True)])   # [4x1]
    f.mul(f.exp(x), scale, name="y")
    flow.infer_inputs_and_outputs()
    ops = types_and_recipes(fused(flow))
    assert ("Calculate", "@0=Mul(Exp(%1),Reciprocal(%0))") in ops


def test_a_comparison_fuses_into_the_select_it_feeds():
    """A ReLU's gradient, Select(Greater(y, 0), dy): the bool condition stays in registers,
    and the group is the epilogue of the product computing dy; results against the
    reference."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    y = f.var("y", "float32", [9, 20])
    dy = f.matmul(f.var("a", "float32", [9, 7]), f.var("w", "float32", [20, 7]),
                  transpose_b=True)
    f.select(f.greater(y, 0.0), dy, name="dx")
    flow.infer_inputs_and_outputs()
    assert types_and_recipes(fused(flow)) == [("FusedMatMul", "@0=Select(Greater(%1,%2),%0)")]
    inputs = {"f/y": rng.standard_normal((9, 20), dtype=np.float32),
              "f/a": rng.standard_normal((9, 7), dtype=np.float32),
              "f/w": rng.standard_normal((20, 7), dtype=np.float32)}
    compile_and_check(flow, {"f": inputs})


@pytest.mark.parametrize("host", ["matmul", "conv"])
def test_a_product_read_twice_by_its_epilogue_fuses(host):
    """SiLU, x * sigmoid(x), reads the product twice: it is still one epilogue (EfficientNet's
    convolutions), and the product itself is not kept."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    if host == "matmul":
        x = f.var("x", "float32", [5, 19])
        product = f.matmul(x, f.array("w", rng.standard_normal((19, 21)).astype(np.float32)))
    else:
        x = f.var("x", "float32", [1, 3, 9, 10])
        w = f.array("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
        product = f.op("Conv", [x, w], None, {"pads": [1, 1, 1, 1]})
    f.mul(product, f.sigmoid(product), name="y")
    flow.infer_inputs_and_outputs()
    fused_type = "FusedMatMul" if host == "matmul" else "FusedConv"
    assert types_and_recipes(fused(flow)) == [(fused_type, "@0=Mul(%0,Sigmoid(%0))")]
    compile_and_check(flow, {"f": {"f/x": rng.standard_normal(x.shape).astype(np.float32)}})


@pytest.mark.parametrize("shared", [False, True])
def test_a_condition_fuses_only_when_nothing_else_reads_it(shared):
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x, y = f.var("x", "float32", [4, 33]), f.var("y", "float32", [4, 33])
    condition = f.less(x, f.neg(y))
    f.op("Cond", [condition, f.exp(x), f.mul(y, 2.0)], name="z")
    if shared:
        f.op("Not", [condition], name="other")
    flow.infer_inputs_and_outputs()
    copy = flow.copy()
    assert fusion.fuse(copy, Context()) != shared
    ops = types_and_recipes(copy)
    if shared:     # the comparison stays a step of its own; Cond cannot fuse without it
        assert [t for t, _ in ops] == ["Neg", "Less", "Exp", "Mul", "Cond", "Not"]
    else:
        assert ops == [("Calculate", "@0=Cond(Less(%1,Neg(%0)),Exp(%1),Mul(%0,%2))")]
    inputs = {"f/x": rng.standard_normal((4, 33), dtype=np.float32),
              "f/y": rng.standard_normal((4, 33), dtype=np.float32)}
    net = compile_and_check(flow, {"f": inputs})
    assert len(net.cell("f").steps) == (6 if shared else 1), str(net.cell("f"))


def mlp(rng, batch=8):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [batch, 32])
    h = x
    for width in (64, 64, 10):
        w = f.array(f"w{width}_{h.shape[1]}", rng.standard_normal((h.shape[1], width),
                                                                  dtype=np.float32) * 0.2)
        b = f.array(f"b{width}_{h.shape[1]}", rng.standard_normal(width, dtype=np.float32))
        h = f.add(f.matmul(h, w), b)
        if width != 10:
            h = f.relu(h)
    f.softmax(h, name="y")
    return flow, {"f": {"f/x": rng.standard_normal((batch, 32), dtype=np.float32)}}


def layer_norm_gelu(rng, rows=6, width=48):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [rows, width])
    gamma = f.array("gamma", rng.standard_normal(width, dtype=np.float32))
    beta = f.array("beta", rng.standard_normal(width, dtype=np.float32))
    mean = f.mean(x, axis=-1, keepdims=True)
    centered = f.sub(x, mean)
    variance = f.mean(f.square(centered), axis=-1, keepdims=True)
    normed = f.mul(centered, f.rsqrt(f.add(variance, 1e-5)))
    f.gelu(f.add(f.mul(normed, gamma), beta), name="y")
    return flow, {"f": {"f/x": rng.standard_normal((rows, width), dtype=np.float32)}}


def attention(rng, tokens=7, width=16):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    q = f.var("q", "float32", [tokens, width])
    k = f.var("k", "float32", [tokens, width])
    v = f.var("v", "float32", [tokens, width])
    scores = f.mul(f.matmul(q, k, transpose_b=True), 1 / np.sqrt(width))
    f.matmul(f.softmax(scores), v, name="y")
    inputs = {name: rng.standard_normal((tokens, width), dtype=np.float32) for name in "qkv"}
    return flow, {"f": {f"f/{name}": value for name, value in inputs.items()}}


@pytest.mark.parametrize("build, steps", [
    (mlp, 3 + 3),               # 3 fused matmuls; softmax: Max, Exp/Sub/Sum, Mul/Reciprocal
    (layer_norm_gelu, 3),       # mean; sub+square+mean; rsqrt+normalize+affine+gelu
    (attention, 1),             # one Attention: matmul, scale, softmax and matmul
])
def test_kernel_counts(build, steps):
    rng = np.random.default_rng()
    flow, inputs = build(rng)
    unfused = myelin.Compiler(opt_level=0).compile(flow)
    net = compile_and_check(flow, inputs, tolerance=5e-5)
    assert len(net.cell("f").steps) == steps, str(net.cell("f"))
    assert len(unfused.cell("f").steps) > steps
