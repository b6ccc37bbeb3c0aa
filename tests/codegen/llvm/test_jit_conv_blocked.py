"""The channel-blocked layout (NCHW[b]c): the layout helpers, the pass that moves convolutions
and what follows them into it, and the blocked convolution kernels against the float64
reference (group 1, groups of whole blocks and depthwise, padding, strides, dilations, odd
sizes, fused epilogues)."""

import numpy as np
import pytest

import myelin
from jitcheck import PRESETS, run_and_compare
from myelin import optimize, reference
from myelin.codegen.llvm.kernels import conv_blocked
from myelin.errors import MyelinError
from myelin.ops import fused as fused_ops
from myelin.ops import layout

TOLERANCE = 2e-5


def test_layout_round_trips():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 16, 5, 7))
    blocked = layout.block(x, 8)
    assert blocked.shape == layout.blocked_shape(x.shape, 8) == (2, 2, 5, 7, 8)
    assert blocked[1, 1, 2, 3, 5] == x[1, 13, 2, 3]
    np.testing.assert_array_equal(layout.unblock(blocked), x)
    w = rng.standard_normal((24, 16, 3, 3))
    packed = layout.block_weight(w, 8, False)
    assert packed.shape == layout.blocked_weight_shape(w.shape, 8, False) == (3, 2, 3, 3, 8, 8)
    assert packed[1, 1, 0, 2, 3, 5] == w[13, 11, 0, 2]     # [M/b, C/b, K..., c, m]
    np.testing.assert_array_equal(layout.unblock_weight(packed, False), w)
    colours = rng.standard_normal((16, 3, 7, 7))          # a plain image's, a channel a block
    packed = layout.block_weight(colours, 8, False, in_size=1)
    assert packed.shape == layout.blocked_weight_shape(colours.shape, 8, False, 1)
    assert packed.shape == (2, 3, 7, 7, 1, 8) and packed[1, 2, 4, 6, 0, 5] == colours[13, 2, 4, 6]
    np.testing.assert_array_equal(layout.unblock_weight(packed, False), colours)
    d = rng.standard_normal((16, 1, 5, 5))
    packed = layout.block_weight(d, 8, True)
    assert packed.shape == (2, 1, 5, 5, 8) and packed[1, 0, 2, 1, 3] == d[11, 0, 2, 1]
    np.testing.assert_array_equal(layout.unblock_weight(packed, True), d)


def _conv_net(rng, shape, out_channels, kernel, attrs, depthwise=False, tail="relu"):
    """x -> Conv (constant weights and bias) -> ``tail`` -> outputs (and a second conv's
    residual sum, so that element-wise ops and epilogues stay blocked)."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    channels = shape[1]
    x = f.var("x", "float32", shape)
    attrs = dict(attrs, group=channels) if depthwise else dict(attrs)
    group = attrs.get("group", 1)
    w_shape = ((channels, 1) + kernel if depthwise
               else (out_channels, channels // group) + kernel)
    w = f.const(rng.standard_normal(w_shape).astype(np.float32))
    bias = f.const(rng.standard_normal(w_shape[0]).astype(np.float32))
    y = f.op("Conv", [x, w, bias], None, attrs)
    if tail == "relu":
        y = f.op("Relu", [y])
    elif tail == "clip":            # ReLU6 as Clip's bounds, and a per-channel scale
        y = f.op("Minimum", [f.op("Maximum", [y, f.const(np.float32(0))]),
                             f.const(np.float32(6))])
        scale = rng.standard_normal((w_shape[0], 1, 1)).astype(np.float32)
        y = f.op("Mul", [y, f.const(scale)])
    m = w_shape[0]
    w2 = f.const(rng.standard_normal((m, m, 1, 1)).astype(np.float32))
    z = f.op("Add", [f.op("Conv", [y, w2], None, {}), y])
    f.op("Identity", [z], "out")
    f.op("Identity", [f.op("GlobalAveragePool", [z])], "mean")
    f.op("Identity", [f.op("GlobalMaxPool", [z])], "max")
    return flow, x


# (input shape, output channels, kernel, attributes, depthwise)
CASES = [
    ((1, 16, 9, 11), 32, (3, 3), dict(pads=[1, 1, 1, 1]), False),
    ((1, 16, 9, 11), 32, (3, 3), {}, False),
    ((2, 16, 9, 11), 24, (3, 3), dict(pads=[1, 2, 0, 1], strides=[2, 2]), False),  # 3 blocks
    ((1, 8, 7, 7), 40, (3, 3), dict(pads=[1, 1, 1, 1]), False),
    ((2, 16, 5, 6), 48, (3, 3), dict(pads=[2, 1, 1, 2], dilations=[2, 2]), False),
    ((1, 16, 13, 10), 16, (5, 3), dict(auto_pad="SAME_UPPER", strides=[2, 3]), False),
    ((2, 16, 20, 30), 48, (1, 1), {}, False),
    ((1, 32, 14, 14), 16, (1, 1), dict(strides=[2, 2]), False),
    ((1, 16, 1, 1), 64, (1, 1), {}, False),                    # a squeeze-excitation product
    ((1, 32, 9, 11), 48, (3, 3), dict(group=2, pads=[1, 1, 1, 1]), False),  # 3 blocks a group
    ((2, 64, 7, 10), 64, (3, 3), dict(group=4, strides=[2, 2], pads=[1, 1, 1, 1]), False),
    ((1, 48, 6, 6), 96, (1, 1), dict(group=6), False),       # 1 input, 2 output blocks a group
    # Border regions reading fewer taps: FCN's dilated layers; a border reading none at all.
    ((1, 16, 16, 16), 24, (3, 3), dict(pads=[4, 4, 4, 4], dilations=[4, 4]), False),
    ((1, 16, 4, 5), 16, (3, 3), dict(pads=[3, 2, 3, 4]), False),
    ((1, 16, 12, 12), 16, (3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2]), False),  # ResNet's
    ((1, 16, 7, 5), 16, (3, 1), dict(pads=[1, 0, 1, 0]), False),  # borders alike but in place
    ((1, 40, 9, 11), 24, (3, 3), dict(pads=[1, 1, 1, 1]), False),  # 5 input blocks (sliced)
    # A plain image of a few channels read a channel at a time: ResNet's first layer; one
    # channel; a 1x1 of five.
    ((2, 3, 20, 22), 16, (7, 7), dict(pads=[3, 3, 3, 3], strides=[2, 2]), False),
    ((1, 1, 7, 5), 8, (3, 3), {}, False),
    ((1, 5, 6, 7), 24, (1, 1), {}, False),
    ((1, 24, 14, 14), 24, (3, 3), dict(pads=[1, 1, 1, 1]), True),
    ((1, 16, 13, 29), 16, (5, 5), dict(pads=[2, 2, 2, 2], strides=[2, 2]), True),
    ((2, 8, 9, 40), 8, (3, 3), dict(pads=[2, 2, 2, 2], dilations=[2, 2]), True),
    ((1, 16, 3, 2), 16, (3, 3), dict(pads=[1, 1, 1, 1]), True),  # a row narrower than a tile
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_blocked_conv_matches_reference(case):
    shape, out_channels, kernel, attrs, depthwise = CASES[case]
    rng = np.random.default_rng(case)
    flow, x = _conv_net(rng, shape, out_channels, kernel, attrs, depthwise,
                        tail="clip" if case % 2 else "relu")
    # (AVX2's blocks of 8, which the cases' channel counts are made for, on any x86 host;
    # blocks of 16 are test_blocks_of_16's)
    net = run_and_compare(flow, {"f": {x: rng.standard_normal(shape).astype(np.float32)}},
                          TOLERANCE, "noavx512")
    kernels = [s.kernel.name for s in net.cell("f").steps if s.kernel is not None]
    assert sum(k.startswith("BlockedConv") for k in kernels) == 2, kernels


SLICED = [case for case, (_, _, _, _, depthwise) in enumerate(CASES) if not depthwise]


@pytest.mark.parametrize("slice_bytes, pass_bytes", [(1, 1), (10000, 1 << 30)])
@pytest.mark.parametrize("case", SLICED)
def test_blocked_conv_in_slices(case, slice_bytes, pass_bytes, monkeypatch):
    """Weights read a slice of input blocks at a time (as large 3x3 layers' are), the
    partial sums kept in the output between slices: one block a slice and one unit a pass,
    or slices of several blocks (two of a 3x3 kernel's, the last of 5 shorter) and every
    unit in one pass."""
    monkeypatch.setattr(conv_blocked, "SLICE_ABOVE", 0)
    monkeypatch.setattr(conv_blocked, "SLICE", slice_bytes)
    monkeypatch.setattr(conv_blocked, "PASS", pass_bytes)
    shape, out_channels, kernel, attrs, _ = CASES[case]
    rng = np.random.default_rng(case)
    flow, x = _conv_net(rng, shape, out_channels, kernel, attrs,
                        tail="clip" if case % 2 else "relu")
    run_and_compare(flow, {"f": {x: rng.standard_normal(shape).astype(np.float32)}},
                    TOLERANCE, cache=False)


POOLS = [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[2, 3], strides=[1, 2], pads=[1, 0, 0, 2],
                     dilations=[2, 1])),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 2, 2], ceil_mode=1,
                         count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 2, 0], ceil_mode=1)),
]


@pytest.mark.parametrize("case", range(len(POOLS)))
def test_blocked_pools_match_reference(case):
    """Pools between blocked convolutions stay blocked (a NaN included: MaxPool passes it)."""
    op_type, attrs = POOLS[case]
    rng = np.random.default_rng(10 + case)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", (2, 16, 13, 22))
    w = f.const(rng.standard_normal((16, 16, 3, 3)).astype(np.float32))
    y = f.op(op_type, [f.op("Conv", [x, w], None, dict(pads=[1, 1, 1, 1]))], None, attrs)
    w2 = f.const(rng.standard_normal((8, 16, 1, 1)).astype(np.float32))
    f.op("Identity", [f.op("Conv", [y, w2], None, {})], "out")
    value = rng.standard_normal((2, 16, 13, 22)).astype(np.float32)
    net = run_and_compare(flow, {"f": {x: value}}, TOLERANCE)
    kernels = [s.kernel.name for s in net.cell("f").steps if s.kernel is not None]
    assert "BlockedPool" in kernels, kernels
    if op_type == "MaxPool":
        value[0, :, 6, 6] = np.nan
        data = net.cell("f").instance()
        data[x] = value
        data.compute()
        want = reference.run(flow, "f", {x: value})["f/out"]
        np.testing.assert_array_equal(np.isnan(np.asarray(data["f/out"])), np.isnan(want))


@pytest.mark.parametrize("features", PRESETS)
def test_blocked_conv_under_every_preset(features):
    """Blocks of the float32 vector's lanes where it has 8 or more; plain images with SSE."""
    rng = np.random.default_rng(1)
    flow, x = _conv_net(rng, (1, 16, 9, 11), 32, (3, 3), dict(pads=[1, 1, 1, 1]))
    net = run_and_compare(flow, {"f": {x: rng.standard_normal((1, 16, 9, 11))
                                       .astype(np.float32)}}, TOLERANCE, features)
    blocked = any(s.kernel is not None and s.kernel.name.startswith("BlockedConv")
                  for s in net.cell("f").steps)
    assert blocked == (myelin.Compiler(features=features).target.vector_bytes >= 32)


@pytest.mark.parametrize("shape, out_channels, kernel, attrs, sliced", [
    ((2, 32, 9, 11), 48, (3, 3), dict(pads=[1, 1, 1, 1]), False),
    ((1, 48, 9, 11), 32, (3, 3), dict(pads=[1, 1, 1, 1]), True),     # 3 slices of a block
    ((2, 3, 12, 14), 32, (7, 7), dict(pads=[3, 3, 3, 3], strides=[2, 2]), False),  # colours
])
def test_blocks_of_16(shape, out_channels, kernel, attrs, sliced, monkeypatch):
    """Blocks of 16 channels (AVX-512's width) compute the same on any machine."""
    if sliced:
        monkeypatch.setattr(conv_blocked, "SLICE_ABOVE", 0)
    rng = np.random.default_rng(2)
    flow, x = _conv_net(rng, shape, out_channels, kernel, attrs)
    optimize.optimize(flow, channel_block=16)
    convs = [op for op in flow.ops.values() if op.type in ("Conv", "FusedConv")]
    assert convs and all(op.attrs.get_int("channel_block") == 16 for op in convs)
    value = rng.standard_normal(shape).astype(np.float32)
    run_and_compare(flow, {"f": {x: value}}, TOLERANCE, cache=False)


@pytest.mark.parametrize("side, in_place, widths_wanted", [
    (28, False, {6}),           # 784 pixels: 130 tiles of 6, and 4
    (28, True, {6, 4}),
    (7, False, {6, 1}),         # 49: 8 tiles and 1
])
def test_pixels_past_the_whole_tiles_take_one_more_whole_tile(side, in_place, widths_wanted,
                                                               monkeypatch):
    """A plane's pixels past its whole tiles are computed by one more whole tile ending with
    the plane, in the same tile function, where that computes few pixels twice (not 5 of a
    7x7 plane's 49), and not where Y may take an input's place (a residual sum in place,
    which the kernel does not offer yet): that tile would read pixels it stored."""
    widths = set()
    real = conv_blocked._tile_function

    def recording(module, shape, tiles):
        widths.add(shape.width)
        return real(module, shape, tiles)

    monkeypatch.setattr(conv_blocked, "_tile_function", recording)
    if in_place:
        monkeypatch.setattr(conv_blocked.BlockedConvKernel, "inplace", lambda self, step: [
            i for i, t in enumerate(step.inputs) if i >= fused_ops.first_extra(step)
            and t.shape == step.outputs[0].shape])
    rng = np.random.default_rng(5)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", (1, 16, side, side))

    def conv(v):
        return f.op("Conv", [v, f.const(rng.standard_normal((16, 16, 1, 1)).astype(np.float32))],
                    None, {})

    residual, y = f.op("Relu", [conv(x)]), f.op("Relu", [conv(x)])
    f.op("Identity", [f.op("Relu", [f.op("Add", [conv(y), residual])])], "out")
    value = rng.standard_normal((1, 16, side, side)).astype(np.float32)
    run_and_compare(flow, {"f": {x: value}}, TOLERANCE, "noavx512", cache=False)
    assert widths == widths_wanted


def test_pass_reorders_only_at_the_edges():
    rng = np.random.default_rng(3)
    flow, _ = _conv_net(rng, (1, 16, 9, 11), 32, (3, 3), dict(pads=[1, 1, 1, 1]))
    optimize.optimize(flow, channel_block=8)
    types = [op.type for op in flow.ops.values()]
    # In: one reorder of x. Out: one for the image, one each for the two pooled values.
    assert types.count("Transpose") == 4, types
    assert types.count("FusedConv") == 2


def test_empty_batch_and_nan():
    rng = np.random.default_rng(4)
    flow, x = _conv_net(rng, (0, 16, 5, 5), 16, (3, 3), dict(pads=[1, 1, 1, 1]))
    net = run_and_compare(flow, {"f": {x: np.zeros((0, 16, 5, 5), np.float32)}}, TOLERANCE)
    assert net.cell("f").instance() is not None
    flow, x = _conv_net(rng, (1, 16, 5, 5), 16, (3, 3), dict(pads=[1, 1, 1, 1]),
                        depthwise=True)
    value = rng.standard_normal((1, 16, 5, 5)).astype(np.float32)
    value[0, 3, 2, 2] = np.nan
    cell = myelin.Compiler().compile(flow).cell("f")
    data = cell.instance()
    data[x] = value
    data.compute()
    want = reference.run(flow, "f", {x: value})["f/out"]
    got = np.asarray(data["f/out"])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.allclose(got[~np.isnan(got)], want[~np.isnan(want)], rtol=1e-4, atol=1e-4)


def test_bad_blocked_conv_is_a_myelin_error():
    f = myelin.Builder(myelin.Flow(), "f")
    x = f.var("x", "float32", (1, 2, 5, 5, 8))
    with pytest.raises(MyelinError, match="not packed in blocks of 8"):
        f.op("Conv", [x, f.const(np.zeros((4, 16, 3, 3), np.float32))], None,
             {"channel_block": 8})
    with pytest.raises(MyelinError, match="groups of whole blocks of 8 channels"):
        f.op("Conv", [x, f.const(np.zeros((2, 1, 3, 3, 8, 8), np.float32))], None,
             {"channel_block": 8, "group": 4})
    with pytest.raises(MyelinError, match="not group=0"):
        f.op("Conv", [x, f.const(np.zeros((2, 2, 3, 3, 8, 8), np.float32))], None,
             {"channel_block": 8, "group": 0})
    with pytest.raises(MyelinError, match="channel_block=-8 must be 0 or positive"):
        f.op("Conv", [x, f.const(np.zeros((2, 2, 3, 3, 8, 8), np.float32))], None,
             {"channel_block": -8})
    x = f.var("x4", "float32", (1, 2, 5, 5, 4))              # blocks of 4, not 8
    with pytest.raises(MyelinError, match="not an image in blocks of 8"):
        f.op("Conv", [x, f.const(np.zeros((2, 2, 3, 3, 8, 8), np.float32))], None,
             {"channel_block": 8})
    plain = f.var("plain", "float32", (1, 3, 5, 5, 1))       # three channels, one a block
    with pytest.raises(MyelinError, match="input_block=1 needs a channel-blocked Conv"):
        f.op("MaxPool", [plain], None, {"kernel_shape": [2, 2], "input_block": 1})
    with pytest.raises(MyelinError, match="input_block=1 needs group 1, not group=3"):
        f.op("Conv", [plain, f.const(np.zeros((3, 1, 3, 3, 1, 8), np.float32))], None,
             {"channel_block": 8, "input_block": 1, "group": 3})
    with pytest.raises(MyelinError, match="not packed in blocks of 8"):
        f.op("Conv", [plain, f.const(np.zeros((1, 3, 3, 3, 8, 8), np.float32))], None,
             {"channel_block": 8, "input_block": 1})
    with pytest.raises(MyelinError, match="input_block=-1 must be 0 or positive"):
        f.op("Conv", [plain, f.const(np.zeros((1, 3, 3, 3, 1, 8), np.float32))], None,
             {"channel_block": 8, "input_block": -1})
