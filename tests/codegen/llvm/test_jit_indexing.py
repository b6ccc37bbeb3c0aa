"""Compiled indexing ops (Pad, Tile, BroadcastTo, Gather on an axis, GatherElements, GatherND,
ScatterElements, ScatterND, CumSum, TopK, OneHot, Trilu), the new element-wise ops (Mod,
BitShift, Bitwise*, IsNaN, IsInf) and ArgMax/ArgMin options against the float64 reference, with
fresh random inputs and poisoned outputs, under the CPU feature presets."""

import numpy as np
import pytest

import myelin
from jitcheck import PRESETS, random_array, run_and_compare

# float16 has its own test under every preset (without F16C, as in the SSE preset, its conversions
# are integer code).
DTYPES = ["float32", "float64", "int8", "int64", "uint16", "bool"]


class Cases:
    """One flow holding many one-op functions, with a generator of inputs for each."""

    def __init__(self):
        self.flow = myelin.Flow()
        self.feeds = {}
        self.count = 0

    def add(self, optype, inputs, attrs=None, feed=None):
        """Add function ``optype<n>`` computing ``optype`` of vars made from (name, dtype, shape)
        ``inputs``; ``feed(rng, var)`` makes the value of a var (default: random_array)."""
        f = myelin.Builder(self.flow, f"{optype}{self.count}")
        self.count += 1
        variables = [f.var(name, dtype, shape) for name, dtype, shape in inputs]
        f.op(optype, variables, attrs=attrs)
        self.feeds[f.func.name] = (variables, feed)
        return variables

    def inputs(self, rng):
        result = {}
        for name, (variables, feed) in self.feeds.items():
            result[name] = {v: (feed(rng, v) if feed else None) for v in variables}
            for v in variables:
                if result[name][v] is None:
                    result[name][v] = random_array(rng, v.dtype, v.shape)
        return result

    def check(self, features, tolerance=0, exact=True):
        return run_and_compare(self.flow, self.inputs(np.random.default_rng()), tolerance,
                               features, exact=exact)


def _indices(low, high, names=("indices",)):
    """A feed giving indices in [low(var), high(var)) for the vars in ``names``."""
    def feed(rng, var):
        if var.name.split("/")[-1] in names:
            return rng.integers(low(var), high(var), var.shape).astype(var.dtype)
        return None
    return feed


PAD_CASES = [((7,), [2, 3]), ((3, 5), [1, 0, 2, 4]), ((3, 5), [-1, 2, 1, -2]),
             ((2, 3, 4), [0, 1, 2, 1, 0, 3]), ((1, 2, 3, 5), [0, 1, 0, 2, 1, 0, 1, 3]),
             ((6,), [9, 11]), ((4, 1), [3, 2, 1, 4])]


@pytest.mark.parametrize("features", PRESETS)
def test_pad(features):
    cases = Cases()
    for dtype in DTYPES:
        for shape, pads in PAD_CASES:
            for mode in ["constant", "reflect", "edge", "wrap"]:
                if mode != "constant" and any(d == 1 for d in shape) and dtype != "float32":
                    continue
                cases.add("Pad", [("x", dtype, shape)], {"pads": pads, "mode": mode})
        cases.add("Pad", [("x", dtype, (3, 4)), ("value", dtype, ())], {"pads": [1, 2, 0, 3]})
    cases.check(features)


@pytest.mark.parametrize("features", PRESETS)
def test_tile_and_broadcast_to(features):
    cases = Cases()
    for dtype in DTYPES:
        for shape, repeats in [((5,), [3]), ((3, 1), [2, 33]), ((2, 3, 4), [1, 2, 3]),
                               ((2, 1, 3, 2), [2, 3, 1, 2]), ((3, 2), [1, 1])]:
            cases.add("Tile", [("x", dtype, shape)], {"repeats": repeats})
        for shape, target in [((1,), [17]), ((3, 1), [3, 33]), ((5,), [2, 3, 5]),
                              ((2, 1, 3), [4, 2, 5, 3]), ((1, 1), [2, 7]), ((), [3, 2])]:
            cases.add("BroadcastTo", [("x", dtype, shape)], {"shape": target})
    cases.check(features)


@pytest.mark.parametrize("features", PRESETS)
def test_float16_movement(features):
    cases = Cases()
    cases.add("Pad", [("x", "float16", (3, 5))], {"pads": [1, 2, 2, 1], "mode": "reflect"})
    cases.add("Pad", [("x", "float16", (3, 5)), ("value", "float16", ())], {"pads": [1, 2, 2, 1]})
    cases.add("Tile", [("x", "float16", (3, 5))], {"repeats": [2, 3]})
    cases.add("BroadcastTo", [("x", "float16", (3, 1))], {"shape": [2, 3, 9]})
    cases.add("Trilu", [("x", "float16", (5, 6))], {"k": 1})
    cases.add("CumSum", [("x", "float16", (5, 6))], {"axis": 1})
    cases.add("TopK", [("x", "float16", (5, 6))], {"k": 3})
    cases.add("GatherElements", [("data", "float16", (4, 5)), ("indices", "int32", (3, 5))],
              feed=_indices(lambda v: -4, lambda v: 4))
    cases.check(features, 1e-3, exact=False)


@pytest.mark.parametrize("features", ["host", "sse"])
def test_gather_on_an_axis(features):
    cases = Cases()
    for dtype in ["float32", "float64", "int8", "int64", "bool"]:
        for shape, ishape, axis in [((4, 7), (5,), 1), ((3, 5, 6), (2, 3), 1),
                                    ((3, 5, 6), (4,), -1), ((2, 3, 4, 5), (), 2),
                                    ((6, 3), (2, 2), 0)]:
            for itype in ["int32", "int64"]:
                size = shape[axis]
                cases.add("Gather", [("params", dtype, shape), ("indices", itype, ishape)],
                          {"axis": axis}, _indices(lambda v: 0, lambda v, n=size: n))
    cases.check(features)


def test_gather_elements_and_scatter_elements():
    # Scalar kernels (no vector code): the host preset is enough.
    features = "host"
    cases = Cases()
    for dtype in ["float32", "float64", "int16", "uint8", "bool"]:
        for case, (dshape, ishape, axis) in enumerate([
                ((7,), (5,), 0), ((4, 5), (3, 5), 0), ((4, 5), (4, 2), 1),
                ((3, 4, 5), (2, 4, 9), 2), ((2, 3, 4, 5), (2, 3, 2, 5), -2)]):
            for itype in [["int32", "int64"][case % 2]]:
                n = dshape[axis]
                feed = _indices(lambda v, n=n: -n, lambda v, n=n: n)
                cases.add("GatherElements", [("data", dtype, dshape), ("indices", itype, ishape)],
                          {"axis": axis}, feed)
                reductions = ["none"] if dtype == "bool" else ["none", "add", "mul", "max", "min"]
                for reduction in reductions:
                    cases.add("ScatterElements", [("data", dtype, dshape),
                                                  ("indices", itype, ishape),
                                                  ("updates", dtype, ishape)],
                              {"axis": axis, "reduction": reduction}, feed)
    # Reductions round in the data type, the reference in float64.
    cases.check(features, 1e-6, exact=False)


@pytest.mark.parametrize("features", ["host", "sse"])
def test_gather_nd_and_scatter_nd(features):
    cases = Cases()

    def feed_for(dshape, batch_dims):
        def feed(rng, var):
            if var.name.endswith("indices"):
                k = var.shape[-1]
                dims = np.array(dshape[batch_dims:batch_dims + k])
                return rng.integers(-dims, dims, var.shape).astype(var.dtype)
            return None
        return feed

    for dtype in ["float32", "int32", "bool"]:
        for dshape, ishape, batch_dims in [((7,), (3, 1), 0), ((4, 5), (3, 2), 0),
                                           ((4, 5, 3), (2, 3, 1), 0), ((4, 5, 3), (2, 2), 0),
                                           ((2, 5, 3), (2, 4, 1), 1), ((2, 3, 5, 4), (2, 3, 2), 2),
                                           ((2, 3, 5, 4), (2, 1, 2, 3), 1)]:
            cases.add("GatherND", [("data", dtype, dshape), ("indices", "int64", ishape)],
                      {"batch_dims": batch_dims}, feed_for(dshape, batch_dims))
        for dshape, ishape in [((7,), (3, 1)), ((4, 5), (3, 2)), ((4, 5, 3), (2, 3, 1)),
                               ((4, 5, 3), (5, 2)), ((2, 3, 5, 4), (3, 3))]:
            ushape = ishape[:-1] + dshape[ishape[-1]:]
            reductions = ["none"] if dtype == "bool" else ["none", "add", "mul", "max", "min"]
            for reduction in reductions:
                cases.add("ScatterND", [("data", dtype, dshape), ("indices", "int32", ishape),
                                        ("updates", dtype, ushape)], {"reduction": reduction},
                          feed_for(dshape, 0))
    cases.check(features, 1e-6, exact=False)


def test_cumsum():
    features = "host"   # scalar kernel
    cases = Cases()
    for dtype in ["float32", "float64", "int32", "uint8"]:
        for shape, axis in [((17,), 0), ((3, 5), 1), ((3, 5), -2), ((2, 3, 4), 1),
                            ((2, 3, 4, 5), 3)]:
            for exclusive in (False, True):
                for reverse in (False, True):
                    cases.add("CumSum", [("x", dtype, shape)],
                              {"axis": axis, "exclusive": exclusive, "reverse": reverse})
    cases.check(features, 1e-6, exact=False)


def _ties(rng, var):
    """Small integers (as any dtype) so that TopK and ArgMax see ties."""
    return rng.integers(0, 4, var.shape).astype(var.dtype)


def test_topk():
    features = "host"   # scalar kernel
    cases = Cases()
    for dtype in ["float32", "int8", "uint32"]:
        for shape, axis, k in [((17,), 0, 5), ((3, 9), 1, 9), ((3, 9), 0, 2), ((2, 5, 4), 1, 3),
                               ((2, 3, 4, 5), -1, 1), ((4, 6), -1, 6)]:
            for largest in (True, False):
                for feed in (None, _ties):
                    cases.add("TopK", [("x", dtype, shape)],
                              {"k": k, "axis": axis, "largest": largest}, feed)
    cases.check(features)


def test_topk_nan_is_the_greatest():
    x = np.array([1, np.nan, 3, np.nan, -1], np.float32)
    for largest, values, indices in [(True, [np.nan, np.nan, 3], [1, 3, 2]),
                                     (False, [-1, 1, 3], [4, 0, 2])]:
        flow = myelin.Flow()
        f = myelin.Builder(flow, "f")
        v = f.var("x", "float32", [5])
        top, where = f.op("TopK", [v], attrs={"k": 3, "largest": largest})
        data = myelin.Compiler().compile(flow).cell("f").instance()
        data[v] = x
        data.compute()
        np.testing.assert_array_equal(np.asarray(data[top]), values)
        np.testing.assert_array_equal(np.asarray(data[where]), indices)
        expected = myelin.reference.run(flow, "f", {v: x})
        np.testing.assert_array_equal(expected[where.name], indices)


def test_onehot_and_trilu():
    features = "host"   # scalar kernels
    cases = Cases()
    for vtype in ["float32", "int64", "bool"]:
        for case, (ishape, axis) in enumerate([((5,), -1), ((5,), 0), ((3, 4), 1),
                                               ((2, 3, 4), -2), ((2, 3), 2)]):
            for itype in [["int32", "uint8", "int8"][case % 3]]:
                cases.add("OneHot", [("indices", itype, ishape), ("values", vtype, (2,))],
                          {"depth": 7, "axis": axis},
                          _indices(lambda v: -9 if v.dtype[0] == "i" else 0, lambda v: 9))
    for dtype in ["float32", "int8", "bool"]:
        for shape in [(5, 5), (3, 7), (7, 3), (2, 4, 5), (2, 1, 3, 4)]:
            for upper in (True, False):
                for k in (-2, 0, 9) if upper else (-9, 0, 1):
                    cases.add("Trilu", [("x", dtype, shape)], {"upper": upper, "k": k})
    cases.check(features)


def _elementwise_feed(rng, var):
    dtype = np.dtype(var.dtype)
    if var.producer is None and var.consumers[0].type == "BitShift" and var.name.endswith("y"):
        low = -3 if dtype.kind == "i" else 0   # negative and too large amounts give 0 (or -1)
        return rng.integers(low, dtype.itemsize * 8 + 3, var.shape).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if var.consumers[0].type.startswith("Bit"):
            return rng.integers(info.min, info.max, var.shape, dtype=dtype, endpoint=True)
        values = rng.integers(max(info.min, -50), min(info.max, 50), var.shape, endpoint=True)
        return values.astype(dtype)
    values = rng.uniform(-20, 20, var.shape)
    if var.consumers[0].type in ("IsNaN", "IsInf"):
        flat = values.reshape(-1)
        flat[::3], flat[1::4], flat[2::5] = np.inf, -np.inf, np.nan
    return values.astype(dtype)


@pytest.mark.parametrize("features", PRESETS)
def test_new_elementwise_ops(features):
    cases = Cases()
    for shape, other in [((33,), (33,)), ((3, 17), (17,)), ((2, 3, 5), (2, 1, 5))]:
        for dtype in ["int8", "int64", "uint8", "uint32"]:
            for fmod in (0, 1):
                cases.add("Mod", [("x", dtype, shape), ("y", dtype, other)], {"fmod": fmod},
                          _elementwise_feed)
            for optype in ["BitwiseAnd", "BitwiseOr", "BitwiseXor"]:
                cases.add(optype, [("x", dtype, shape), ("y", dtype, other)],
                          feed=_elementwise_feed)
            cases.add("BitwiseNot", [("x", dtype, shape)], feed=_elementwise_feed)
            for direction in ("LEFT", "RIGHT"):
                cases.add("BitShift", [("x", dtype, shape), ("y", dtype, other)],
                          {"direction": direction}, _elementwise_feed)
        for dtype in ["float32", "float64"][len(shape) % 2:][:1]:
            for fmod in (0, 1):
                cases.add("Mod", [("x", dtype, shape), ("y", dtype, other)], {"fmod": fmod},
                          _elementwise_feed)
            cases.add("IsNaN", [("x", dtype, shape)], feed=_elementwise_feed)
            for negative, positive in [(1, 1), (0, 1), (1, 0), (0, 0)]:
                cases.add("IsInf", [("x", dtype, shape)],
                          {"detect_negative": negative, "detect_positive": positive},
                          _elementwise_feed)
    cases.check(features, 1e-6, exact=False)


MOD_EDGE_X = [0.0, -0.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0, np.inf, -np.inf, 1.0, 1.0, np.nan, 1.0,
              -4.3, 7.2, 5.0, 4.3, -7.2, 8.0]
MOD_EDGE_Y = [-2.0, 2.0, 2.0, -2.0, np.inf, np.inf, -np.inf, -np.inf, 2.0, 2.0, 0.0, -0.0, 2.0,
              np.nan, 2.1, -3.4, 8.0, -2.1, 3.4, 5.0]


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fmod", [0, 1])
def test_float_mod_edge_cases(features, dtype, fmod):
    """Signed zeros, infinite and zero divisors and NaN, bit for bit like NumPy."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x, y = (f.var(name, dtype, [len(MOD_EDGE_X)]) for name in "xy")
    z = f.op("Mod", [x, y], attrs={"fmod": fmod})
    data = myelin.Compiler(features=features).compile(flow).cell("f").instance()
    data[x], data[y] = np.array(MOD_EDGE_X, dtype), np.array(MOD_EDGE_Y, dtype)
    data.compute()
    with np.errstate(divide="ignore", invalid="ignore"):
        want = (np.fmod if fmod else np.mod)(data[x], data[y])
    got = np.asarray(data[z])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("features", PRESETS)
def test_signed_bitshift_edges(features):
    """LEFT shifts the bits as unsigned; out-of-range amounts give 0, or -1 for RIGHT of x < 0."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x, y = f.var("x", "int8", [8]), f.var("y", "int8", [8])
    left = f.op("BitShift", [x, y], attrs={"direction": "LEFT"})
    right = f.op("BitShift", [x, y], attrs={"direction": "RIGHT"})
    data = myelin.Compiler(features=features).compile(flow).cell("f").instance()
    data[x] = np.array([1, -1, 64, -128, -5, -5, 5, 3], np.int8)
    data[y] = np.array([7, 1, 1, 0, -1, 8, 8, 100], np.int8)
    data.compute()
    assert np.asarray(data[left]).tolist() == [-128, -2, -128, -128, 0, 0, 0, 0]
    assert np.asarray(data[right]).tolist() == [0, -1, 32, -128, -1, -1, 0, 0]


def test_new_elementwise_ops_fuse():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x, y = f.var("x", "int32", [5, 33]), f.var("y", "int32", [33])
    z = f.op("BitwiseNot", [f.op("BitwiseXor", [f.op("Mod", [x, y]), y])])
    f.op("BitwiseAnd", [z, x], name="out")
    rng = np.random.default_rng()
    feeds = {x: rng.integers(-99, 99, (5, 33)).astype(np.int32),
             y: rng.integers(1, 20, 33).astype(np.int32)}
    net = run_and_compare(flow, {"f": feeds}, 0, exact=True)
    assert [op.type for op in net.flow.ops.values()] == ["Calculate"]


def test_argmax_argmin_options():
    features = "host"   # scalar kernel
    cases = Cases()
    for optype in ["ArgMax", "ArgMin"]:
        for dtype in ["float32", "int32", "uint8"]:
            for shape, axis in [((17,), None), ((3, 9), 1), ((3, 9), 0), ((2, 5, 4), -2)]:
                for last in (False, True):
                    for keepdims in (False, True):
                        attrs = {"select_last_index": last, "keepdims": keepdims,
                                 "dtype": "int64" if last else "int32"}
                        if axis is not None:
                            attrs["axis"] = axis
                        cases.add(optype, [("x", dtype, shape)], attrs, _ties)
    cases.check(features)


def _run(flow, feeds):
    data = myelin.Compiler().compile(flow).cell("f").instance()
    for var, value in feeds.items():
        data[var] = value
    data.compute()
    return data


@pytest.mark.parametrize("optype,bad", [("Gather", 4), ("Gather", -1), ("GatherElements", 4),
                                        ("GatherElements", -5), ("GatherND", 4),
                                        ("ScatterElements", -5), ("ScatterND", 4)])
def test_index_out_of_range_is_an_input_error(optype, bad):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    data = f.var("data", "float32", [4, 3])
    updates = None
    if optype == "Gather":
        indices = f.var("indices", "int32", [2])
        f.op("Gather", [data, indices])
    elif optype in ("GatherElements", "ScatterElements"):
        indices = f.var("indices", "int32", [2, 3])
        if optype.startswith("Scatter"):
            updates = f.var("updates", "float32", [2, 3])
    else:
        indices = f.var("indices", "int64", [2, 1])
        if optype.startswith("Scatter"):
            updates = f.var("updates", "float32", [2, 3])
    if optype != "Gather":
        f.op(optype, [data, indices] + ([updates] if updates is not None else []))
    value = np.zeros(indices.shape, np.dtype(indices.dtype))
    value.reshape(-1)[-1] = bad
    feeds = {data: np.ones((4, 3), np.float32), indices: value}
    if updates is not None:
        feeds[updates] = np.ones(updates.shape, np.float32)
    with pytest.raises(myelin.InputError, match=optype):
        _run(flow, feeds)
    with pytest.raises(myelin.InputError, match=f"index {bad}"):
        myelin.reference.run(flow, "f", feeds)
    # The instance stays usable after the error.
    value.reshape(-1)[-1] = 1
    _run(flow, feeds)
