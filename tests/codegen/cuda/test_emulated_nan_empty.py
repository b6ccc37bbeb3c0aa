"""The GPU kernels on NaN and empty tensors, in host emulation against the reference: Relu
and MaxPool propagate NaN (MaxPool's Indices give the first NaN), and reductions over an empty
axis give their identities (Mean: NaN)."""

import numpy as np

import myelin


def test_nan_and_empty_tensors(compare, rng):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "nan")
    x = f.var("x", "float32", [2, 3, 5, 7])
    f.relu(x)
    f.op("MaxPool", [x], attrs={"kernel_shape": [2, 3]})
    f.op("MaxPool", [x], attrs={"kernel_shape": [3, 2], "strides": [2, 2], "indices": True})
    f.op("GlobalMaxPool", [x])
    g = myelin.Builder(flow, "empty")
    e = g.var("e", "float32", [4, 0, 3])
    for op in ("Sum", "Product", "Max", "Min", "Mean"):
        g.reduce(op, e, axis=1)
    g.reduce("Max", e)
    values = rng.uniform(-3, 3, (2, 3, 5, 7)).astype(np.float32)
    values.reshape(-1)[rng.random(values.size) < 0.2] = np.nan
    values[0, 0, 0, 0] = np.nan
    compare(flow, {"nan": {x: values}, "empty": {e: np.zeros((4, 0, 3), np.float32)}}, 0)
