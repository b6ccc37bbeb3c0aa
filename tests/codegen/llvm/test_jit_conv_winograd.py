"""Winograd F(2x2, 3x3) convolutions of channel-blocked images: the weight transform, the
layout pass's choice, the op's checks, and the kernel against the float64 reference (odd
planes, padding on some sides, several chunks, bands in groups, a last band of fewer blocks,
fused epilogues, blocks of 16, NaN)."""

import numpy as np
import pytest

import myelin
from jitcheck import run_and_compare
from myelin import optimize, reference
from myelin.codegen.llvm.kernels import conv_winograd
from myelin.errors import MyelinError
from myelin.ops import layout
from myelin.optimize import layout as layout_pass
from test_jit_conv_blocked import TOLERANCE, _conv_net


def test_weight_transform_round_trips():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((24, 16, 3, 3))
    packed = layout.winograd_weight(w, 8)
    assert packed.shape == (3, 4, 4, 2, 8, 8) and packed.dtype == np.float32
    u = layout.WINOGRAD_G @ w[13, 11] @ layout.WINOGRAD_G.T      # [M/b, 4, 4, C/b, c, m]
    np.testing.assert_allclose(packed[1, :, :, 1, 3, 5], u, rtol=1e-6)
    np.testing.assert_allclose(layout.unwinograd_weight(packed), w, rtol=1e-5, atol=1e-6)


def _winograd_convs(flow, size=8):
    optimize.optimize(flow, channel_block=size)
    return [op for op in flow.ops.values()
            if op.type in ("Conv", "FusedConv") and op.attrs.get_int("winograd", 0)]


def test_pass_chooses_large_planes_of_few_channels():
    rng = np.random.default_rng(1)
    flow, _ = _conv_net(rng, (1, 16, 14, 14), 16, (3, 3), dict(pads=[1, 1, 1, 1]))
    assert len(_winograd_convs(flow)) == 1          # 49 tiles
    for shape, attrs in [((1, 16, 12, 12), dict(pads=[1, 1, 1, 1])),      # 36 tiles
                         ((1, 16, 14, 14), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
                         ((1, 16, 16, 16), dict(pads=[2, 2, 2, 2], dilations=[2, 2])),
                         ((1, 264, 14, 14), dict(pads=[1, 1, 1, 1]))]:     # 264 channels
        flow, _ = _conv_net(rng, shape, 16, (3, 3), attrs)
        assert not _winograd_convs(flow), (shape, attrs)


# (input shape, output channels, attributes): odd planes (tiles past the edge), padding on
# some sides only, none, a last band of one block (3 blocks), batches.
CASES = [
    ((1, 16, 9, 11), 32, dict(pads=[1, 1, 1, 1])),
    ((2, 8, 10, 7), 24, dict(pads=[0, 1, 2, 0])),
    ((1, 24, 13, 12), 16, {}),
    ((2, 16, 4, 4), 40, dict(auto_pad="SAME_UPPER")),
    ((1, 8, 3, 3), 8, dict(pads=[1, 1, 1, 1])),          # one tile past both edges
]


@pytest.mark.parametrize("chunk_bytes", [conv_winograd.CHUNK_BYTES, 1])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_winograd_matches_reference(case, threads, chunk_bytes, monkeypatch):
    """One chunk an image, or one register tile a chunk (several chunks a task); on two
    threads the bands of an image's one chunk in groups."""
    monkeypatch.setattr(layout_pass, "WINOGRAD_TILES", 0)
    monkeypatch.setattr(conv_winograd, "CHUNK_BYTES", chunk_bytes)
    shape, out_channels, attrs = CASES[case]
    rng = np.random.default_rng(case)
    flow, x = _conv_net(rng, shape, out_channels, (3, 3), attrs,
                        tail="clip" if case % 2 else "relu")
    value = rng.standard_normal(shape).astype(np.float32)
    # (AVX2's blocks of 8, which the cases' channel counts are made for, on any x86 host)
    net = run_and_compare(flow, {"f": {x: value}}, TOLERANCE, "noavx512", threads=threads,
                          cache=False)
    steps = [s for s in net.cell("f").steps if s.kernel is not None
             and s.kernel.name == "BlockedConv" and s.attrs.get_int("winograd", 0)]
    assert len(steps) == 1


def test_largest_buffers_on_a_workers_stack():
    """14x14 of 256 channels, as ResNet's: one chunk of 49 tiles (784 KiB of transformed
    patches on the stack), its bands in two groups, one run by a worker thread."""
    rng = np.random.default_rng(5)
    flow, x = _conv_net(rng, (1, 256, 14, 14), 32, (3, 3), dict(pads=[1, 1, 1, 1]))
    value = rng.standard_normal((1, 256, 14, 14)).astype(np.float32)
    net = run_and_compare(flow, {"f": {x: value}}, TOLERANCE, threads=2, cache=False)
    assert any(s.attrs.get_int("winograd", 0) for s in net.cell("f").steps)


def test_blocks_of_16(monkeypatch):
    monkeypatch.setattr(layout_pass, "WINOGRAD_TILES", 0)
    rng = np.random.default_rng(2)
    flow, x = _conv_net(rng, (2, 32, 9, 11), 48, (3, 3), dict(pads=[1, 1, 1, 1]))
    assert len(_winograd_convs(flow, 16)) == 1
    value = rng.standard_normal((2, 32, 9, 11)).astype(np.float32)
    run_and_compare(flow, {"f": {x: value}}, TOLERANCE, cache=False)


def test_empty_batch(monkeypatch):
    monkeypatch.setattr(layout_pass, "WINOGRAD_TILES", 0)
    rng = np.random.default_rng(6)
    flow, x = _conv_net(rng, (0, 16, 9, 11), 16, (3, 3), dict(pads=[1, 1, 1, 1]))
    assert len(_winograd_convs(flow.copy())) == 1
    net = run_and_compare(flow, {"f": {x: np.zeros((0, 16, 9, 11), np.float32)}}, TOLERANCE,
                          cache=False)
    assert np.asarray(net.cell("f").instance()["f/out"]).shape == (0, 16, 9, 11)


def test_nan_and_infinity_reach_their_tile(monkeypatch):
    """A NaN or an infinity in the input spoils the outputs that read it (and, through the
    transform, the rest of their 2x2 tile), not other tiles."""
    monkeypatch.setattr(layout_pass, "WINOGRAD_TILES", 0)
    rng = np.random.default_rng(3)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", (1, 8, 12, 12))
    w = f.const(rng.standard_normal((8, 8, 3, 3)).astype(np.float32))
    f.op("Identity", [f.op("Conv", [x, w], None, dict(pads=[1, 1, 1, 1]))], "out")
    value = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    value[0, 2, 5, 6], value[0, 4, 0, 0] = np.nan, np.inf
    data = myelin.Compiler(cache=False).compile(flow).cell("f").instance()
    data[x] = value
    data.compute()
    got = np.asarray(data["f/out"])
    want = reference.run(flow, "f", {x: value})["f/out"]
    reached = ~np.isfinite(want)
    assert not np.isfinite(got[reached]).any()
    tiles = reached.reshape(8, 6, 2, 6, 2).any(axis=(0, 2, 4)).repeat(2, 0).repeat(2, 1)
    np.testing.assert_allclose(got[:, :, ~tiles], want[:, :, ~tiles], rtol=1e-4, atol=1e-4)


def test_bad_winograd_conv_is_a_myelin_error():
    f = myelin.Builder(myelin.Flow(), "f")
    x = f.var("x", "float32", (1, 2, 5, 5, 8))
    packed = f.const(np.zeros((2, 4, 4, 2, 8, 8), np.float32))
    with pytest.raises(MyelinError, match="needs a channel-blocked Conv of group 1"):
        f.op("Conv", [f.var("plain", "float32", (1, 16, 5, 5)), packed], None,
             {"winograd": 1})
    with pytest.raises(MyelinError, match="not in Winograd's form"):
        f.op("Conv", [x, f.const(np.zeros((2, 2, 3, 3, 8, 8), np.float32))], None,
             {"channel_block": 8, "winograd": 1})
    with pytest.raises(MyelinError, match="strides and dilations 1, not kernel"):
        f.op("Conv", [x, packed], None, {"channel_block": 8, "winograd": 1, "strides": [2, 2]})
    with pytest.raises(MyelinError, match="group 1"):
        f.op("Conv", [x, packed], None, {"channel_block": 8, "winograd": 1, "group": 2})
    y = f.op("Conv", [x, packed], None, {"channel_block": 8, "winograd": 1,
                                         "pads": [1, 1, 1, 1]})
    assert tuple(y.shape) == (1, 2, 5, 5, 8)


def test_too_many_channels_for_the_stack_is_a_compile_error():
    """A hand-made Winograd step whose smallest chunk would overflow a thread's stack."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", (1, 1500, 4, 4, 8))
    w = f.const(np.zeros((1, 4, 4, 1500, 8, 8), np.float32))
    f.op("Identity", [f.op("Conv", [x, w], None, {"channel_block": 8, "winograd": 1})], "y")
    with pytest.raises(MyelinError, match="bytes of stack for 12000 input channels"):
        myelin.Compiler(cache=False).compile(flow)
