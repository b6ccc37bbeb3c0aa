"""Kernels that split their work over the worker pool, computed many times: every result must
be bit-identical to the first (a race shows as a result that changes from run to run) and
match the float64 reference.

The cell chains one step of each kernel that splits (a convolution with a fused residual
epilogue, one over a small plane with the channels in the lanes, a depthwise convolution with a fused clip, a grouped one, max and average pools, a
transposed convolution, a resize, a transpose, products with fused epilogues, a fused element-wise group, a single element-wise
op), each large enough to be split, so the pool publishes new work back to back. More threads
than cores make the workers be preempted at any point; a second thread computing another
instance at the same time takes the pool's other path (its tasks run alone while the first
holds the pool).
"""

import threading

import numpy as np
import pytest

import myelin
from jitcheck import random_array, relative_error
from myelin import reference

RUNS = 150


def _flow(rng):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [1, 32, 56, 56])

    def const(*shape, scale=0.1):
        return f.const((rng.standard_normal(shape) * scale).astype(np.float32))
    conv = f.op("Conv", [x, const(32, 32, 3, 3)], None, dict(pads=[1, 1, 1, 1]))
    t = f.relu(f.add(conv, x))                                    # FusedConv, residual
    t = f.op("Conv", [t, const(32, 1, 3, 3)], None, dict(group=32, pads=[1, 1, 1, 1]))
    t = f.minimum(f.maximum(t, f.const(np.float32(0))), f.const(np.float32(6)))  # depthwise
    t = f.op("Conv", [t, const(32, 4, 3, 3)], None, dict(group=8, pads=[1, 1, 1, 1]))  # grouped
    t = f.op("Conv", [t, const(32, 16, 3, 3)], None, dict(group=2, pads=[1, 1, 1, 1]))  # product
    pooled = f.op("MaxPool", [t], None, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    pooled = f.op("AveragePool", [pooled], None, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    up = f.op("ConvTranspose", [pooled, const(32, 32, 2, 2)], None, dict(strides=[2, 2]))
    down = f.op("Resize", [up], None, dict(mode="linear", sizes=[1, 32, 56, 56],
                                           scales=[1.0, 1.0, 0.5, 0.5]))
    pooled = f.add(pooled, down)
    rows = f.reshape(f.transpose(pooled, [0, 2, 3, 1]), [56 * 56, 32])
    hidden = f.relu(f.add(f.matmul(rows, const(32, 256)), const(256)))   # FusedMatMul
    back = f.add(f.matmul(hidden, const(256, 32)), rows)                  # residual epilogue
    mixed = f.add(f.mul(f.tanh(back), const(32, scale=1)), f.sigmoid(back))  # Calculate
    small = f.relu(f.op("Conv", [x, const(64, 32, 3, 3)], None,            # 7x7: ConvChannels
                        dict(strides=[8, 8], pads=[1, 1, 1, 1])))
    mixed = f.add(mixed, f.reshape(small, [56 * 56, 1]))
    f.add(mixed, mixed, name="y")                                         # one Expr
    return flow, x


@pytest.mark.parametrize("layout", ["plain", "blocked"])
def test_parallel_kernels_give_the_same_result_every_time(layout):
    """The plain kernels (the channel-blocked layout off), then the blocked ones."""
    rng = np.random.default_rng()
    flow, x = _flow(rng)
    disable = ("block_channels",) if layout == "plain" else ()
    cell = myelin.Compiler(threads=4, cache=False, disable_passes=disable).compile(flow).cell("f")
    kernels = {step.kernel.name for step in cell.steps if step.kernel is not None}
    assert any(step.type == "FusedConv" for step in cell.steps)
    if layout == "plain":
        assert {step.kernel.name for step in cell.steps if step.type == "Conv"} == {"Conv",
                                                                                    "ConvGemm"}
        assert "ConvChannels" in kernels
    else:
        assert {"BlockedConv", "BlockedPool"} <= kernels
    value = random_array(rng, "float32", x.shape)
    want = reference.run(flow, "f", {x: value})["f/y"]

    def compute(data):
        data[x] = value
        data.compute()
        return np.array(data["f/y"])

    first = compute(cell.instance())
    assert relative_error(first, want) < 1e-5
    other, stop, failures = cell.instance(), threading.Event(), []

    def alongside():
        while not stop.is_set():
            if not np.array_equal(compute(other), first):
                failures.append("second thread")
    thread = threading.Thread(target=alongside)
    thread.start()
    try:
        data = cell.instance()
        changed = [run for run in range(RUNS) if not np.array_equal(compute(data), first)]
    finally:
        stop.set()
        thread.join()
    assert not changed and not failures, f"runs {changed[:10]} differ; {failures[:3]}"
