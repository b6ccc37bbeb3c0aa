"""Compiled data movement against the reference: transpose, reshape, concat, split, slice,
gather, shape queries and assignment."""

import itertools

import numpy as np
import pytest

import myelin
from jitcheck import PRESETS, random_array, run_and_compare


def _inputs(flow, rng):
    inputs = {}
    for name, func in flow.funcs.items():
        values = {}
        for op in func.ops:
            for var in op.inputs:
                if not var.constant and var.producer is None:
                    values[var] = random_array(rng, var.dtype, var.shape)
        inputs[name] = values
    return inputs


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_transpose(dtype, features):
    flow, count = myelin.Flow(), 0
    # (17, 16), (3, 37, 29), (2, 3, 20, 9): the last two axes swap in register blocks with
    # leftover rows and columns.
    for shape in [(3, 5), (1, 33), (17, 16), (2, 3, 4), (5, 1, 7), (2, 3, 4, 5), (3, 37, 29),
                  (2, 3, 20, 9)]:
        for perm in itertools.permutations(range(len(shape))):
            f = myelin.Builder(flow, f"f{count}")
            count += 1
            f.transpose(f.var("x", dtype, shape), list(perm))
    run_and_compare(flow, _inputs(flow, np.random.default_rng()), 0, features, exact=True)


@pytest.mark.parametrize("threads", [2, 3])
def test_transpose_split_over_threads(threads):
    """Large transposes in register blocks split over the threads: by planes (the outer
    axes: 64 planes, 2 x 5), or by bands of rows where the planes are fewer than the tasks
    (one plane whose rows do not fill the last band, or its last register block)."""
    flow = myelin.Flow()
    for count, (shape, perm) in enumerate([((64, 16, 257), (0, 2, 1)),
                                           ((2, 5, 300, 40), (1, 0, 3, 2)),
                                           ((1, 196, 520), (0, 2, 1)),
                                           ((1000, 1030), (1, 0)),
                                           ((33, 4099), (1, 0))]):
        f = myelin.Builder(flow, f"f{count}")
        f.transpose(f.var("x", "float32", shape), list(perm))
    run_and_compare(flow, _inputs(flow, np.random.default_rng()), 0, exact=True,
                    threads=threads)


@pytest.mark.parametrize("features", ["host", "sse"])
def test_concat_split_slice(features):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "concat1")
    f.concat([f.var("a", "float32", [3, 5]), f.var("b", "float32", [3, 7]),
              f.var("c", "float32", [3, 1])], axis=1)
    f = myelin.Builder(flow, "concat0")
    f.concat([f.var("a", "float32", [2, 5]), f.var("b", "float32", [3, 5])], axis=0)
    f = myelin.Builder(flow, "concat3d")
    f.concat([f.var("a", "int32", [2, 3, 4]), f.var("b", "int32", [2, 2, 4])], axis=1)
    f = myelin.Builder(flow, "split")
    f.split(f.var("x", "float32", [4, 9]), 3, axis=1)
    f = myelin.Builder(flow, "split0")
    f.split(f.var("x", "float64", [6, 5]), 2, axis=0)
    f = myelin.Builder(flow, "slice")
    f.slice(f.var("x", "float32", [5, 17]), [1, 3], [3, 9])
    f = myelin.Builder(flow, "slice3d")
    f.slice(f.var("x", "int32", [4, 5, 6]), [2, 0, 1], [2, 5, 4])
    run_and_compare(flow, _inputs(flow, np.random.default_rng()), 0, features, exact=True)


@pytest.mark.parametrize("features", ["host", "sse"])
def test_reshape_identity_views(features):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [4, 6])
    r = f.reshape(x, [2, 12])
    y = f.exp(r, name="y")
    z = f.reshape(y, [24], name="z")
    f.identity(x, name="copy")
    net = run_and_compare(flow, _inputs(flow, np.random.default_rng()), 3e-6, features)
    cell = net.cell("f")
    # The reshapes are views: no code, and z shares y's space.
    z_spec, y_spec = cell.spec(z.name), cell.spec(y.name)
    assert z_spec.root() is y_spec
    assert "view, no code" in str(cell)


def test_reshape_of_constant_output_is_copied():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    c = f.array("c", np.arange(6, dtype=np.float32))
    f.reshape(c, [2, 3], name="y")
    net = myelin.Compiler().compile(flow)
    data = net.cell("f").instance()
    data.compute()
    np.testing.assert_array_equal(np.asarray(data["f/y"]), np.arange(6).reshape(2, 3))


@pytest.mark.parametrize("features", ["host", "sse"])
def test_gather(features):
    rng = np.random.default_rng()
    flow = myelin.Flow()
    for i, (rows, dims, count) in enumerate([(10, (4,), 3), (50, (33,), 7), (7, (2, 3), 5)]):
        f = myelin.Builder(flow, f"f{i}")
        params = f.var("params", "float32", (rows,) + dims)
        indices = f.var("indices", "int32", [count])
        f.gather(params, indices)
    inputs = {}
    for name, func in flow.funcs.items():
        params, indices = func.ops[0].inputs
        inputs[name] = {params: random_array(rng, "float32", params.shape),
                        indices: rng.integers(0, params.shape[0], indices.shape).astype(np.int32)}
    run_and_compare(flow, inputs, 0, features, exact=True)


def test_gather_out_of_range_reads_oov_row():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    params = f.array("params", np.arange(12, dtype=np.float32).reshape(4, 3))
    oov = f.array("oov", np.full(3, -1, dtype=np.float32))
    indices = f.var("indices", "int32", [4])
    y = f.gather(params, indices, oov, name="y")
    data = myelin.Compiler().compile(flow).cell("f").instance()
    data[indices] = np.array([2, -1, 4, 0], dtype=np.int32)
    data.compute()
    np.testing.assert_array_equal(np.asarray(data[y]),
                                  [[6, 7, 8], [-1, -1, -1], [-1, -1, -1], [0, 1, 2]])


def test_shape_size_rank():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [3, 5, 7])
    s, n, r = f.shape(x, name="s"), f.size(x, name="n"), f.rank(x, name="r")
    data = myelin.Compiler().compile(flow).cell("f").instance()
    data.compute()
    assert list(np.asarray(data[s])) == [3, 5, 7]
    assert data[n] == 105 and data[r] == 3


def test_assign_to_learnable_parameter():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    w = f.var("w", "float32", [5])
    w.learnable = True
    x = f.var("x", "float32", [5])
    f.assign(w, f.add(w, x))
    net = myelin.Compiler().compile(flow)
    data = net.cell("f").instance()
    values = np.arange(5, dtype=np.float32)
    data[x] = values
    data.compute()
    data.compute()
    np.testing.assert_array_equal(np.asarray(net[w]), 2 * values)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("opt_level", [0, 3])
def test_large_element_wise_loops_split_over_threads(threads, opt_level):
    """Transposes, element-wise ops (with broadcasting) and fused Calculate loops large enough
    to be split into tasks along their first axis, with an uneven last task; a flat loop is
    split into whole vectors."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [131, 5, 67])
    y = f.var("y", "float32", [5, 131, 67])
    bias = f.var("b", "float32", [67])
    flat = f.var("v", "float32", [100003])
    moved = f.op("Transpose", [x], "t", dict(perm=[1, 0, 2]))
    f.tanh(f.add(f.mul(moved, y), bias), name="z")
    f.op("Exp", [flat], name="e")
    inputs = {"f": {var: random_array(rng, "float32", var.shape) for var in (x, y, bias, flat)}}
    run_and_compare(flow, inputs, 1e-6, threads=threads, opt_level=opt_level)


def test_slice_with_a_begin_computed_at_run_time_is_unsupported():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [5, 4])
    begin = f.var("begin", "int32", [2])
    f.slice(x, begin, f.const(np.int32([2, 4])), name="y")
    with pytest.raises(myelin.errors.UnsupportedOpError, match="no CPU kernel supports"):
        myelin.Compiler().compile(flow)
