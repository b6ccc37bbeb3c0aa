"""Compiled convolutions, pools and LRN against the float64 reference under every CPU preset,
and batch normalization folded into a preceding Conv (structure and numbers)."""

import numpy as np
import pytest

import myelin
from jitcheck import PRESETS, random_array, run_and_compare
from myelin.builder import verify
from myelin.optimize import Context
from myelin.optimize.inference import fold_scale_axis, simplify_inference

TOLERANCE = {"float32": 2e-5, "float64": 1e-12}
# Tests of the kernels for plain NC... images compile without the channel-blocked layout,
# which would take their convolutions of channels in multiples of 8 (test_jit_conv_blocked).
PLAIN = {"disable_passes": ("block_channels",)}

# (op type, input shapes, attributes): odd sizes, strides, pads, dilations, groups, auto_pad.
CONV = [
    ("Conv", [(2, 4, 9, 10), (6, 2, 3, 3), (6,)],
     dict(group=2, strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2])),
    ("Conv", [(1, 3, 13, 37), (9, 3, 3, 3), (9,)], dict(pads=[1, 1, 1, 1])),
    ("Conv", [(1, 5, 11, 29), (7, 5, 3, 3)], {}),
    ("Conv", [(1, 3, 20, 41), (5, 3, 7, 7)], dict(pads=[3, 3, 3, 3], strides=[2, 2])),
    ("Conv", [(1, 4, 17, 23), (6, 4, 3, 3)], dict(strides=[3, 3], pads=[1, 2, 0, 1])),
    ("Conv", [(1, 3, 23, 45), (4, 3, 11, 11)], dict(strides=[4, 5], pads=[2, 2, 2, 2])),
    ("Conv", [(2, 16, 7, 7), (20, 16, 1, 1), (20,)], {}),
    ("Conv", [(1, 8, 9, 9), (12, 8, 1, 1)], dict(strides=[2, 2])),
    ("Conv", [(1, 6, 12, 19), (6, 1, 3, 3), (6,)], dict(group=6, pads=[1, 1, 1, 1])),
    ("Conv", [(1, 6, 12, 19), (12, 2, 3, 5)], dict(group=3, dilations=[2, 3],
                                                     auto_pad="SAME_UPPER")),
    ("Conv", [(1, 3, 9, 10), (5, 3, 3, 2)], dict(auto_pad="SAME_LOWER", strides=[2, 3])),
    ("Conv", [(1, 3, 9, 10), (5, 3, 3, 2)], dict(auto_pad="VALID", strides=[2, 1])),
    ("Conv", [(2, 4, 33), (5, 4, 3), (5,)], dict(pads=[2, 1])),
    ("Conv", [(1, 4, 40), (4, 1, 5)], dict(group=4, strides=[2], dilations=[2],
                                           auto_pad="SAME_UPPER")),
    ("Conv", [(1, 2, 5, 6, 7), (3, 2, 2, 3, 2), (3,)], dict(pads=[1, 0, 1, 0, 1, 1],
                                                         strides=[1, 2, 2])),
    ("Conv", [(1, 3, 4, 9, 18), (5, 3, 3, 3, 3)], dict(pads=[1, 1, 1, 1, 1, 1])),
    ("Conv", [(1, 1, 1, 1), (3, 1, 1, 1), (3,)], {}),
    ("Conv", [(1, 2, 3, 3), (2, 2, 5, 5)], dict(pads=[2, 2, 2, 2])),
]
CONV_TRANSPOSE = [
    ("ConvTranspose", [(2, 4, 5, 6), (4, 3, 3, 3), (6,)],
     dict(group=2, strides=[2, 1], pads=[1, 0, 0, 1], dilations=[1, 2], output_padding=[1, 0])),
    ("ConvTranspose", [(1, 3, 5, 6), (3, 2, 3, 3)], dict(strides=[2, 2], output_shape=[10, 13])),
    ("ConvTranspose", [(1, 3, 5, 6), (3, 2, 3, 3)], dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ("ConvTranspose", [(1, 3, 7), (3, 2, 4), (2,)], dict(strides=[3], pads=[1, 2])),
    ("ConvTranspose", [(1, 2, 3, 4, 3), (2, 2, 2, 3, 2)], dict(strides=[2, 1, 2])),
    # Kernel = stride (each output from one column: stored), cropped by pads, with groups.
    ("ConvTranspose", [(1, 5, 7, 13), (5, 3, 2, 2), (3,)], dict(strides=[2, 2])),
    ("ConvTranspose", [(1, 3, 5, 17), (3, 2, 3, 3)], dict(strides=[3, 3], pads=[1, 2, 0, 1])),
    ("ConvTranspose", [(2, 6, 5, 18), (6, 2, 2, 2), (6,)], dict(strides=[2, 2], group=3)),
    ("ConvTranspose", [(1, 2, 4, 11), (2, 2, 5, 5), (2,)], dict(strides=[5, 5])),
    # Overlapping taps (added): 3x3 and 4x4 stride 2 pad 1, stride 1, dilations.
    ("ConvTranspose", [(1, 6, 9, 11), (6, 4, 3, 3), (4,)], dict(strides=[2, 2],
                                                             pads=[1, 1, 1, 1],
                                                             output_padding=[1, 1])),
    ("ConvTranspose", [(2, 4, 8, 21), (4, 5, 4, 4), (5,)], dict(strides=[2, 2],
                                                             pads=[1, 1, 1, 1])),
    ("ConvTranspose", [(1, 7, 6, 40), (7, 3, 3, 3)], dict(pads=[1, 1, 1, 1])),
    ("ConvTranspose", [(1, 3, 6, 19), (3, 2, 3, 2)], dict(strides=[2, 2], dilations=[2, 3],
                                                       pads=[0, 1, 2, 0])),
    # Gaps the taps do not reach (bias only): kernel < stride, output_padding, stride 5.
    ("ConvTranspose", [(1, 3, 4, 9), (3, 2, 1, 1), (2,)], dict(strides=[2, 3])),
    ("ConvTranspose", [(1, 3, 5, 9), (3, 2, 2, 2), (2,)], dict(strides=[2, 2],
                                                            output_padding=[1, 1])),
    ("ConvTranspose", [(1, 2, 3, 10), (2, 3, 3, 3)], dict(strides=[5, 5], pads=[0, 1, 2, 0])),
    # 1-D and 3-D.
    ("ConvTranspose", [(2, 4, 45), (4, 3, 4), (3,)], dict(strides=[2], pads=[1, 1])),
    ("ConvTranspose", [(1, 3, 50), (3, 2, 2)], dict(strides=[2])),
    ("ConvTranspose", [(1, 4, 3, 5, 19), (4, 3, 2, 2, 2), (3,)], dict(strides=[2, 2, 2])),
    ("ConvTranspose", [(1, 2, 4, 6, 9), (2, 3, 3, 3, 3)], dict(strides=[2, 1, 2],
                                                             pads=[1, 1, 1, 1, 0, 1],
                                                             output_padding=[1, 0, 1])),
]
POOL = [
    ("MaxPool", [(2, 3, 9, 10)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", [(2, 3, 9, 10)], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", [(1, 3, 8, 11)], dict(kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 0, 1],
                                      ceil_mode=1, dilations=[2, 1])),
    ("MaxPool", [(1, 2, 17)], dict(kernel_shape=[4], auto_pad="SAME_LOWER", strides=[3])),
    ("MaxPool", [(1, 2, 5, 7, 6)], dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2],
                                        pads=[1, 1, 0, 0, 1, 1])),
    ("AveragePool", [(2, 3, 9, 10)], dict(kernel_shape=[3, 3], strides=[2, 2],
                                          pads=[1, 1, 2, 2], ceil_mode=1)),
    ("AveragePool", [(2, 3, 9, 10)], dict(kernel_shape=[3, 3], strides=[2, 2],
                                          pads=[1, 1, 2, 2], ceil_mode=1, count_include_pad=1)),
    ("AveragePool", [(1, 4, 9)], dict(kernel_shape=[4], strides=[3], pads=[1, 2],
                                      count_include_pad=1)),
    ("AveragePool", [(1, 3, 9, 10)], dict(kernel_shape=[3, 2], auto_pad="SAME_UPPER",
                                          strides=[2, 2])),
    ("AveragePool", [(1, 2, 4, 6, 5)], dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2])),
    # Rows wide enough for whole vectors of outputs between border columns (2-D, strides 1, 2).
    ("MaxPool", [(1, 2, 7, 45)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", [(1, 2, 5, 50)], dict(kernel_shape=[2, 3], dilations=[1, 2], pads=[0, 2, 1, 0],
                                      ceil_mode=1)),
    ("AveragePool", [(1, 2, 6, 40)], dict(kernel_shape=[2, 3], pads=[1, 1, 0, 2],
                                          count_include_pad=1, ceil_mode=1)),
    ("AveragePool", [(1, 2, 7, 71)], dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1])),
    # The same along the last axis of 1-D and 3-D pools.
    ("MaxPool", [(1, 2, 61)], dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ("AveragePool", [(2, 3, 45)], dict(kernel_shape=[4], pads=[2, 1], count_include_pad=1,
                                       ceil_mode=1)),
    ("MaxPool", [(1, 2, 4, 5, 43)], dict(kernel_shape=[2, 3, 3], strides=[1, 2, 2],
                                         pads=[1, 1, 1, 0, 1, 1], dilations=[2, 1, 1])),
    ("MaxPool", [(1, 3, 3, 4, 50)], dict(kernel_shape=[1, 2, 3], dilations=[1, 1, 2],
                                         pads=[0, 1, 0, 0, 0, 2], ceil_mode=1)),
    ("AveragePool", [(1, 2, 5, 6, 37)], dict(kernel_shape=[3, 2, 3], strides=[2, 1, 1],
                                             pads=[1, 0, 1, 1, 1, 2])),
    ("AveragePool", [(1, 2, 5, 6, 37)], dict(kernel_shape=[3, 2, 3], strides=[2, 2, 1],
                                             pads=[1, 1, 2, 1, 1, 0], count_include_pad=1,
                                             ceil_mode=1)),
    ("LpPool", [(1, 3, 9, 10)], dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 1],
                                     p=3)),
    ("LpPool", [(1, 3, 9, 10)], dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("LpPool", [(1, 3, 7)], dict(kernel_shape=[3], p=1)),
    ("GlobalAveragePool", [(2, 3, 5, 6)], {}),
    ("GlobalAveragePool", [(1, 5, 7, 7)], {}),
    ("GlobalAveragePool", [(1, 4, 1, 1)], {}),
    ("GlobalAveragePool", [(2, 3, 33)], {}),
    ("GlobalMaxPool", [(2, 3, 5, 6, 2)], {}),
    ("GlobalMaxPool", [(1, 6, 14, 14)], {}),
    ("GlobalMaxPool", [(1, 2, 3)], {}),
    ("GlobalLpPool", [(1, 3, 7)], dict(p=2)),
    ("LRN", [(2, 7, 4, 5)], dict(size=3, alpha=0.01, beta=0.75, bias=2.0)),
    ("LRN", [(1, 10, 3, 11)], dict(size=4, alpha=0.1, beta=0.5)),
    ("LRN", [(1, 5, 2, 2)], dict(size=5)),
]


def _flow(cases, dtype, indices=False):
    flow = myelin.Flow()
    for i, (op_type, shapes, attrs) in enumerate(cases):
        f = myelin.Builder(flow, f"f{i}")
        inputs = [f.var(f"x{k}", dtype, shape) for k, shape in enumerate(shapes)]
        if indices and op_type == "MaxPool":
            attrs = dict(attrs, indices=True)
        f.op(op_type, inputs, None, attrs)
    return flow


def _check(cases, dtype, features, indices=False, **options):
    rng = np.random.default_rng()
    flow = _flow(cases, dtype, indices)
    inputs = {name: {var: random_array(rng, dtype, var.shape) for var in func.ops[0].inputs}
              for name, func in flow.funcs.items()}
    net = run_and_compare(flow, inputs, TOLERANCE[dtype], features, **options)
    return {name: net.cell(name).steps[0].kernel.name for name in flow.funcs}


@pytest.mark.parametrize("dtype,features", [("float32", p) for p in PRESETS]
                         + [("float64", p) for p in dict.fromkeys(["host", PRESETS[0]])])
def test_conv(dtype, features):
    _check(CONV, dtype, features)


@pytest.mark.parametrize("features", PRESETS)
def test_conv_transpose(features):
    _check(CONV_TRANSPOSE, "float32", features)
    if features == "host":
        _check(CONV_TRANSPOSE, "float64", features)


@pytest.mark.parametrize("threads", [1, 3])
def test_conv_transpose_windows_and_tasks(threads):
    """Transposed convolutions large enough for several windows of columns (the last moved
    back), tasks by blocks of output rows (overlapping taps recomputed at block edges), and
    row blocks of whole channels where one panel of every row would not fit the buffer."""
    cases = [("ConvTranspose", [(1, 8, 30, 41), (8, 24, 2, 2), (24,)], dict(strides=[2, 2])),
             ("ConvTranspose", [(2, 16, 17, 19), (16, 8, 3, 3), (8,)],
              dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
             ("ConvTranspose", [(1, 24, 40, 40), (24, 1, 2, 2)], dict(strides=[2, 2])),
             ("ConvTranspose", [(1, 12, 20, 23), (12, 4, 4, 4), (8,)],
              dict(strides=[2, 2], pads=[1, 1, 1, 1], group=2)),
             ("ConvTranspose", [(1, 2, 5, 6), (2, 200, 4, 4), (200,)], dict(strides=[2, 2])),
             ("ConvTranspose", [(1, 6, 200), (6, 5, 5), (5,)], dict(strides=[3], pads=[2, 1]))]
    kernels = _check(cases, "float32", "host", threads=threads)
    assert set(kernels.values()) == {"ConvTranspose"}
    _check(cases[1:2], "float64", "host", threads=threads)


@pytest.mark.parametrize("features", PRESETS)
def test_pools_and_lrn(features):
    _check(POOL, "float32", features)


def test_pools_float64_and_max_pool_indices():
    _check(POOL, "float64", "host")
    _check([case for case in POOL if case[0] == "MaxPool"], "float32", "host", indices=True)
    _check([("MaxPool", [(2, 3, 8, 11)], dict(kernel_shape=[3, 2], strides=[2, 3], ceil_mode=1,
                                              storage_order=1)),
            ("MaxPool", [(1, 2, 5, 7, 6)], dict(kernel_shape=[2, 3, 2], storage_order=1))],
           "float32", "host", indices=True)


def test_larger_conv_sizes():
    """Sizes where every tile shape of the kernel is used: wide, single and half vectors,
    remainder channel rows and border columns."""
    cases = [("Conv", [(1, 13, 30, 71), (10, 13, 3, 3), (10,)], dict(pads=[1, 1, 1, 1])),
             ("Conv", [(1, 8, 31, 64), (9, 8, 3, 3)], dict(strides=[2, 2], pads=[0, 1, 1, 0])),
             ("Conv", [(1, 24, 14, 14), (24, 24, 1, 1), (24,)], {})]
    _check(cases, "float32", "host")


@pytest.mark.parametrize("threads", [1, 3])
def test_conv_as_matrix_product_split_over_threads(threads):
    """2-D convolutions with one group run as matrix products over gathered panels, split
    into tasks by output pixels; grouped ones with 4 channels per group keep the direct
    kernel."""
    cases = [("Conv", [(2, 16, 30, 33), (24, 16, 3, 3), (24,)], dict(pads=[1, 1, 1, 1])),
             ("Conv", [(1, 8, 40, 37), (20, 8, 3, 3)], dict(strides=[2, 2], pads=[1, 0, 1, 1],
                                                             dilations=[1, 2])),
             ("Conv", [(1, 32, 20, 20), (40, 32, 1, 1), (40,)], {}),
             ("Conv", [(1, 3, 64, 64), (16, 3, 7, 7)], dict(strides=[2, 2], pads=[3, 3, 3, 3])),
             # Fewer panels than tasks: one row block per panel, and several for one panel.
             ("Conv", [(1, 32, 7, 7), (64, 32, 3, 3), (64,)], dict(pads=[1, 1, 1, 1])),
             ("Conv", [(1, 32, 4, 4), (96, 32, 3, 3)], dict(pads=[1, 1, 1, 1])),
             ("Conv", [(1, 16, 24, 24), (16, 4, 3, 3)], dict(group=4, pads=[1, 1, 1, 1]))]
    kernels = _check(cases, "float32", "host", threads=threads)
    assert list(kernels.values()) == ["ConvGemm"] * 6 + ["Conv"]


# 1-D and 3-D convolutions with one group, which run as matrix products as 2-D ones do: odd
# sizes, strides 1 to 5, asymmetric pads, dilations, rows wide enough for whole-vector loads.
CONV_1D_3D = [
    ("Conv", [(2, 5, 37), (7, 5, 3), (7,)], dict(pads=[2, 1])),
    ("Conv", [(1, 3, 101), (9, 3, 10)], dict(strides=[5])),
    ("Conv", [(1, 6, 83), (11, 6, 3), (11,)], dict(strides=[2], dilations=[2], pads=[0, 3])),
    ("Conv", [(1, 4, 50), (6, 4, 4)], dict(strides=[3], pads=[1, 2], dilations=[3])),
    ("Conv", [(1, 9, 31), (10, 9, 1)], {}),
    ("Conv", [(1, 2, 5), (3, 2, 7), (3,)], dict(pads=[3, 3])),
    ("Conv", [(2, 3, 5, 9, 11), (8, 3, 3, 3, 3), (8,)], dict(pads=[1, 1, 1, 1, 1, 1])),
    ("Conv", [(1, 3, 7, 20, 19), (6, 3, 3, 7, 7)], dict(strides=[1, 2, 2],
                                                          pads=[1, 3, 3, 1, 3, 3])),
    ("Conv", [(1, 4, 6, 11, 13), (5, 4, 2, 3, 2)], dict(strides=[2, 3, 1], dilations=[2, 1, 3],
                                                         pads=[0, 1, 2, 1, 0, 1])),
    ("Conv", [(1, 8, 5, 6, 7), (12, 8, 1, 1, 1), (12,)], dict(strides=[2, 2, 2])),
    ("Conv", [(1, 6, 3, 5, 40), (7, 6, 3, 3, 3)], dict(pads=[1, 1, 1, 1, 1, 1])),
    ("Conv", [(1, 5, 4, 7, 45), (9, 5, 3, 1, 3), (9,)], dict(strides=[1, 1, 2],
                                                              pads=[2, 0, 1, 0, 0, 2])),
]


@pytest.mark.parametrize("dtype,features,threads", [("float32", p, 1) for p in PRESETS]
                         + [("float32", "host", 2), ("float64", "host", 2)])
def test_conv_1d_and_3d_as_matrix_products(dtype, features, threads):
    kernels = _check(CONV_1D_3D, dtype, features, threads=threads)
    assert set(kernels.values()) == {"ConvGemm"}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((2, 6, 45), (10, 6, 3), dict(strides=[2], pads=[1, 2])),
    ((1, 5, 4, 9, 21), (10, 5, 3, 3, 3), dict(strides=[1, 2, 2], pads=[1, 1, 1, 0, 1, 2]))])
def test_conv_1d_and_3d_with_bias_and_fused_epilogue(threads, x_shape, w_shape, attrs):
    """relu(conv(x) + bias + residual) is one FusedConv step run as a matrix product."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", list(x_shape))
    w = f.const(rng.standard_normal(w_shape).astype(np.float32))
    bias = f.const(rng.standard_normal(w_shape[0]).astype(np.float32))
    conv = f.op("Conv", [x, w, bias], None, attrs)
    residual = f.var("r", "float32", list(conv.shape))
    f.relu(f.add(conv, residual), name="y")
    inputs = {v: random_array(rng, "float32", v.shape) for v in (x, residual)}
    net = run_and_compare(flow, {"f": inputs}, TOLERANCE["float32"], threads=threads)
    steps = [step for step in net.cell("f").steps if not step.noop]
    assert [(step.type, step.kernel.name) for step in steps] == [("FusedConv", "ConvGemm")]


@pytest.mark.parametrize("threads", [1, 3])
def test_pools_split_over_threads(threads):
    """Pools large enough to be split into tasks by planes (image x channel), with an
    uneven last task."""
    cases = [("MaxPool", [(2, 13, 120, 121)], dict(kernel_shape=[3, 3], strides=[2, 2],
                                                 pads=[1, 1, 1, 1])),
             ("AveragePool", [(1, 23, 64, 64)], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
             ("GlobalAveragePool", [(3, 37, 70, 71)], {}),
             ("MaxPool", [(1, 19, 9, 30, 31)], dict(kernel_shape=[3, 3, 3], pads=[1] * 6)),
             ("AveragePool", [(2, 11, 8, 28, 29)], dict(kernel_shape=[2, 2, 2],
                                                        strides=[2, 2, 2]))]
    _check(cases, "float32", "host", threads=threads)
    _check(cases[:1], "float32", "host", indices=True, threads=threads)


# Batch normalization folded into a Conv.
def _conv_bn(f, rng, bias=True, channels=6, extra_use=False):
    x = f.var("x", "float32", [1, 3, 9, 11])
    w = f.array("W", rng.standard_normal((channels, 3, 3, 3)).astype(np.float32))
    inputs = [x, w]
    if bias:
        inputs.append(f.array("B", rng.standard_normal(channels).astype(np.float32)))
    conv = f.op("Conv", inputs, None, {"pads": [1, 1, 1, 1]})
    params = [f.array(name, value.astype(np.float32)) for name, value in [
        ("scale", rng.uniform(0.5, 2, channels)), ("shift", rng.standard_normal(channels)),
        ("mean", rng.standard_normal(channels)), ("var", rng.uniform(0.5, 2, channels))]]
    y = f.relu(f.op("BatchNormalization", [conv] + params, None, {"epsilon": 1e-3}), name="y")
    if extra_use:
        f.neg(conv, name="z")
    return y


def _build(**options):
    flow = myelin.Flow()
    _conv_bn(myelin.Builder(flow, "f"), np.random.default_rng(0), **options)
    flow.infer_inputs_and_outputs()
    return flow


def _types(flow):
    return [op.type for op in flow.order(flow.funcs["f"])]


@pytest.mark.parametrize("bias", [True, False])
def test_batch_norm_folds_into_conv(bias):
    before, after = _build(bias=bias), _build(bias=bias)
    ctx = Context()
    assert simplify_inference(after, ctx)
    assert _types(after) == ["Conv", "Mul", "Add", "Relu"]
    assert fold_scale_axis(after, ctx)
    verify.check(after)
    assert _types(after) == ["Conv", "Relu"]
    (conv,) = [op for op in after.funcs["f"].ops if op.type == "Conv"]
    assert len(conv.inputs) == 3 and all(v.constant for v in conv.inputs[1:])
    rng = np.random.default_rng()
    for _ in range(2):
        x = rng.uniform(-2, 2, (1, 3, 9, 11)).astype(np.float32)
        want = myelin.reference.run(before, "f", {"f/x": x})["f/y"]
        got = myelin.reference.run(after, "f", {"f/x": x})["f/y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_batch_norm_stays_when_the_conv_output_has_another_use():
    flow = _build(extra_use=True)
    ctx = Context()
    simplify_inference(flow, ctx)
    fold_scale_axis(flow, ctx)
    assert "Mul" in _types(flow) and "Add" in _types(flow)


def test_compiled_conv_batch_norm_matches_reference():
    """The whole pipeline (BN folded, the ReLU fused into the Conv, compiled) against the
    reference on the original."""
    flow = _build()
    rng = np.random.default_rng()
    x = flow.vars["f/x"]
    net = run_and_compare(flow, {"f": {x: random_array(rng, "float32", x.shape)}},
                          TOLERANCE["float32"])
    steps = [step for step in net.cell("f").steps if not step.noop]
    assert [(step.type, step.attrs["expr"]) for step in steps] == [("FusedConv",
                                                                    "@0=Relu(%0)")]
    assert not any(step.type == "BatchNormalization" for step in net.cell("f").steps)


def test_same_shaped_steps_with_other_small_constants_do_not_share_code():
    """Convolutions of the same shapes share one outlined function, but constants of up to
    64 bytes are compiled into the code: two depthwise layers whose epilogues scale by
    different constants (a quantized model's scales and zero points) must not share it.
    (Seeded: a product that float32 rounds to just the other side of .5 from float64's
    rounds to another integer, which no tolerance covers.)"""
    rng = np.random.default_rng(3)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [1, 8, 9, 9])
    value = x
    for scale, shift in [(2.0, 137.0), (0.5, -3.0), (2.0, 137.0)]:
        weights = f.const(rng.standard_normal((8, 1, 3, 3)).astype(np.float32))
        conv = f.op("Conv", [value, weights], None, dict(group=8, pads=[1, 1, 1, 1]))
        value = f.add(f.round(f.div(conv, f.const(np.float32(scale)))),
                      f.const(np.float32(shift)))
    f.identity(value, name="y")
    net = run_and_compare(flow, {"f": {x: random_array(rng, "float32", x.shape)}},
                          TOLERANCE["float32"], "host")
    assert [s.type for s in net.cell("f").steps].count("FusedConv") == 3


# Depthwise convolutions (as many groups as input channels, channel multiplier 1 or 2): planes
# of 1x1 to 112x112, odd sizes, strides 1 to 4, pads, dilations, kernels 1x1 to 5x5.
DEPTHWISE = [
    ("Conv", [(1, 6, 12, 19), (6, 1, 3, 3), (6,)], dict(group=6, pads=[1, 1, 1, 1])),
    ("Conv", [(2, 5, 14, 14), (5, 1, 3, 3)], dict(group=5, pads=[1, 1, 1, 1])),
    ("Conv", [(1, 4, 7, 7), (8, 1, 3, 3), (8,)], dict(group=4, pads=[1, 1, 1, 1])),
    ("Conv", [(1, 3, 5, 5), (6, 1, 5, 5)], dict(group=3, pads=[2, 2, 2, 2])),
    ("Conv", [(1, 3, 1, 1), (3, 1, 3, 3)], dict(group=3, pads=[1, 1, 1, 1])),
    ("Conv", [(1, 3, 33, 31), (3, 1, 5, 5), (3,)], dict(group=3, pads=[2, 2, 2, 2],
                                                      strides=[2, 2])),
    ("Conv", [(1, 3, 9, 11), (6, 1, 3, 3)], dict(group=3, pads=[0, 1, 2, 1], strides=[1, 2],
                                                  dilations=[2, 2])),
    ("Conv", [(1, 2, 112, 112), (2, 1, 3, 3)], dict(group=2, pads=[1, 1, 1, 1],
                                                     strides=[2, 2])),
    ("Conv", [(1, 2, 112, 112), (4, 1, 3, 3), (4,)], dict(group=2, pads=[1, 1, 1, 1])),
    ("Conv", [(1, 4, 17, 23), (4, 1, 3, 3)], dict(group=4, strides=[3, 3], pads=[1, 2, 0, 1])),
    ("Conv", [(1, 4, 17, 29), (4, 1, 2, 4)], dict(group=4, strides=[1, 4], dilations=[3, 1],
                                                   pads=[1, 2, 0, 1])),
    ("Conv", [(2, 3, 13, 9), (3, 1, 1, 1), (3,)], dict(group=3, strides=[2, 2])),
    ("Conv", [(1, 5, 28, 27), (5, 1, 3, 3)], dict(group=5, auto_pad="SAME_UPPER",
                                                   strides=[2, 2])),
]


@pytest.mark.parametrize("dtype,features,threads", [("float32", p, 1) for p in PRESETS]
                         + [("float32", "host", 2), ("float64", "host", 2)])
def test_depthwise_conv(dtype, features, threads):
    kernels = _check(DEPTHWISE, dtype, features, threads=threads)
    assert set(kernels.values()) == {"ConvDepthwise"}


@pytest.mark.parametrize("features,threads", [("host", 1), ("host", 2), ("sse", 1)])
@pytest.mark.parametrize("size,stride,epilogue", [
    (14, 1, "relu6"), (7, 1, "hardsigmoid"), (29, 2, "sigmoid"), (56, 1, "residual"),
    (15, 2, "relu6"), (9, 1, "hardswish")])
def test_depthwise_conv_with_fused_epilogue(features, threads, size, stride, epilogue):
    """epilogue(conv(x) + bias) is one FusedConv step run by the depthwise kernel (HardSwish,
    which reads the convolution twice, is not fused)."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    channels = 24
    x = f.var("x", "float32", [2, channels, size, size])
    w = f.const(rng.standard_normal((channels, 1, 3, 3)).astype(np.float32))
    bias = f.const(rng.standard_normal(channels).astype(np.float32))
    y = f.op("Conv", [x, w, bias], None, dict(group=channels, pads=[1, 1, 1, 1],
                                              strides=[stride, stride]))

    def const(value):
        return f.const(np.float32(value))
    inputs = [x]
    def hard_sigmoid(v):
        return f.minimum(f.maximum(f.add(f.mul(v, const(1 / 6)), const(0.5)), const(0)),
                         const(1))
    if epilogue == "relu6":
        y = f.minimum(f.maximum(y, const(0)), const(6))
    elif epilogue == "hardsigmoid":
        y = hard_sigmoid(y)
    elif epilogue == "hardswish":
        y = f.mul(y, hard_sigmoid(y))
    elif epilogue == "sigmoid":
        y = f.sigmoid(y)
    else:
        residual = f.var("r", "float32", list(y.shape))
        inputs.append(residual)
        y = f.add(y, residual)
    f.identity(y, name="y")
    values = {v: random_array(rng, "float32", v.shape) for v in inputs}
    net = run_and_compare(flow, {"f": values}, TOLERANCE["float32"], features, threads=threads,
                          **PLAIN)
    steps = [step for step in net.cell("f").steps if not step.noop]
    assert steps[0].kernel.name == "ConvDepthwise"
    assert epilogue == "hardswish" or [step.type for step in steps] == ["FusedConv"]


@pytest.mark.parametrize("threads", [1, 2])
def test_grouped_conv_split_over_threads(threads):
    """Grouped convolutions with few channels per group (ResNeXt's first stage; 1-D and 3-D
    too) run by the direct kernel, their rows split into tasks; with more (12 output channels
    of 8 inputs and 3x3 taps per group), as matrix products."""
    cases = [("Conv", [(1, 64, 15, 17), (64, 2, 3, 3), (64,)], dict(group=32, pads=[1, 1, 1, 1])),
             ("Conv", [(2, 32, 14, 13), (48, 8, 3, 3)], dict(group=4, strides=[2, 2],
                                                              pads=[1, 1, 1, 1])),
             ("Conv", [(1, 16, 9, 9), (32, 4, 1, 1), (32,)], dict(group=4)),
             ("Conv", [(1, 24, 301), (24, 3, 5)], dict(group=8, pads=[2, 2])),
             ("Conv", [(1, 8, 6, 9, 10), (8, 2, 3, 3, 3)], dict(group=4, pads=[1] * 6)),
             ("Conv", [(1, 128, 12, 12), (128, 4, 3, 3)], dict(group=32, pads=[1, 1, 1, 1]))]
    kernels = _check(cases, "float32", "host", threads=threads)
    assert list(kernels.values()) == ["Conv", "ConvGemm", "Conv", "Conv", "Conv", "Conv"]


# Grouped convolutions with enough channels per group, run as a matrix product per image and
# group: 1-D, 2-D and 3-D, 2 to 32 groups of 4 to 64 input channels, strides, pads,
# dilations, one grouped 1x1 (read in place), batches of two.
GROUPED = [
    ((2, 8, 13, 17), (32, 4, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
    ((1, 64, 11, 9), (64, 16, 3, 3), dict(group=4, strides=[2, 2], pads=[1, 0, 1, 1])),
    ((1, 128, 9, 10), (96, 64, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
    ((1, 256, 7, 9), (256, 8, 3, 3), dict(group=32, dilations=[2, 1], pads=[2, 1, 2, 1])),
    ((1, 64, 5, 7), (64, 32, 1, 1), dict(group=2)),
    ((2, 32, 70), (32, 8, 16), dict(group=4, pads=[8, 7])),
    ((1, 48, 61), (32, 12, 7), dict(group=4, strides=[3], dilations=[2], pads=[3, 0])),
    ((1, 16, 4, 7, 9), (32, 4, 3, 3, 3), dict(group=4, strides=[1, 2, 1], pads=[1] * 6)),
]


@pytest.mark.parametrize("dtype,features,threads",
                         [("float32", p, 1) for p in PRESETS]
                         + [("float32", "host", 2), ("float64", "host", 1),
                            ("float64", "host", 2)])
@pytest.mark.parametrize("epilogue", ["bias", "relu", "residual"])
def test_grouped_conv_as_matrix_product(dtype, features, threads, epilogue):
    """relu(conv(x) + bias (+ residual)) with groups: ConvGemm, each group's weights, bias
    and channels of the input and output its own."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    inputs = {}
    for i, (x_shape, w_shape, attrs) in enumerate(GROUPED):
        f = myelin.Builder(flow, f"f{i}")
        x = f.var("x", dtype, list(x_shape))
        w = f.const(random_array(rng, dtype, w_shape))
        bias = f.const(random_array(rng, dtype, w_shape[:1]))
        y = f.op("Conv", [x, w, bias], None, attrs)
        values = {x: random_array(rng, dtype, x_shape)}
        if epilogue == "residual":
            residual = f.var("r", dtype, list(y.shape))
            values[residual] = random_array(rng, dtype, y.shape)
            y = f.relu(f.add(y, residual))
        elif epilogue == "relu":
            y = f.relu(y)
        f.identity(y, name="y")
        inputs[f"f{i}"] = values
    net = run_and_compare(flow, inputs, TOLERANCE[dtype], features, threads=threads, **PLAIN)
    for name in inputs:
        steps = [step for step in net.cell(name).steps if not step.noop]
        assert [step.kernel.name for step in steps] == ["ConvGemm"], name


# Small output planes (7x7 and under) whose pixel panels would be partly empty: with constant
# weights and the output channels filling panels fuller than the pixels do, the channels go in
# the vector lanes (multiples of 32 channels fill them on every target; 20 channels fill 8- to
# 32-wide panels less than 49 pixels do; 24 and 40 channels fill them more than 1 to 4 pixels).
SMALL_PLANES = [
    ((2, 64, 7, 7), (64, 64, 1, 1), dict(), "ConvChannels"),
    ((1, 24, 7, 7), (32, 24, 3, 3), dict(pads=[1, 1, 1, 1]), "ConvChannels"),
    ((1, 16, 14, 14), (64, 16, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), "ConvChannels"),
    ((2, 40, 13, 13), (64, 40, 1, 1), dict(strides=[2, 2]), "ConvChannels"),
    ((1, 8, 5, 6), (32, 8, 3, 2), dict(pads=[0, 1, 1, 0], dilations=[1, 2]), "ConvChannels"),
    ((1, 12, 3, 3, 3), (32, 12, 3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1]), "ConvChannels"),
    ((1, 9, 7, 7), (20, 9, 3, 3), dict(pads=[1, 1, 1, 1]), "ConvGemm"),
    ((1, 72, 1, 1), (24, 72, 1, 1), dict(), "ConvChannels"),    # squeeze-and-excitation
    ((2, 120, 2, 2), (40, 120, 1, 1), dict(), "ConvChannels"),
]


@pytest.mark.parametrize("features,threads", [(p, 1) for p in PRESETS] + [("host", 2)])
@pytest.mark.parametrize("epilogue", ["bias", "relu", "residual"])
def test_small_planes_with_channels_in_lanes(features, threads, epilogue):
    """relu(conv(x) + bias (+ residual)) over small planes: ConvChannels where the channels
    fill panels fuller than the pixels, ConvGemm where they do not."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    inputs, expected = {}, {}
    for i, (x_shape, w_shape, attrs, kernel) in enumerate(SMALL_PLANES):
        f = myelin.Builder(flow, f"f{i}")
        x = f.var("x", "float32", list(x_shape))
        w = f.const(random_array(rng, "float32", w_shape))
        bias = f.const(random_array(rng, "float32", w_shape[:1]))
        y = f.op("Conv", [x, w, bias], None, attrs)
        values = {x: random_array(rng, "float32", x_shape)}
        if epilogue == "residual":
            residual = f.var("r", "float32", list(y.shape))
            values[residual] = random_array(rng, "float32", y.shape)
            y = f.relu(f.add(y, residual))
        elif epilogue == "relu":
            y = f.relu(y)
        f.identity(y, name="y")
        inputs[f"f{i}"] = values
        expected[f"f{i}"] = kernel
    net = run_and_compare(flow, inputs, TOLERANCE["float32"], features, threads=threads,
                          **PLAIN)
    for name, kernel in expected.items():
        steps = [step for step in net.cell(name).steps if not step.noop]
        assert [step.kernel.name for step in steps] == [kernel], name
