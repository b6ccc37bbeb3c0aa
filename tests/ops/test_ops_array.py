"""Array ops (Transpose, Reshape, Concat, Split, Slice, gathers, shape queries) built with the
Builder and run by the reference interpreter, checked element by element on random inputs."""

import itertools

import numpy as np
import pytest

import myelin
from myelin import reference
from myelin.flow import dtypes


def builder():
    flow = myelin.Flow()
    return flow, myelin.Builder(flow, "f")


def run(flow, feeds, out):
    """Interpret ``flow`` on {variable: array} and return the value of ``out``."""
    result = reference.run(flow, "f", feeds)[out.name]
    assert result.shape == out.shape
    return result


def random(shape):
    return np.random.default_rng().uniform(-3, 3, shape)


@pytest.mark.parametrize("shape,perm", [((3, 7), None), ((33, 1), [1, 0]), ((2, 3, 5), None),
                                        ((2, 3, 5), [1, 0, 2]), ((2, 3, 5, 7), [3, 1, 0, 2]),
                                        ((1, 4, 3), [2, 0, 1])], ids=str)
def test_transpose(shape, perm):
    flow, f = builder()
    x = f.var("x", "float32", shape)
    y = f.transpose(x, perm)
    value = random(shape).astype(np.float32)
    result = run(flow, {x: value}, y)
    axes = perm if perm is not None else list(reversed(range(len(shape))))
    for index in itertools.product(*map(range, result.shape)):
        source = [0] * len(shape)
        for out_axis, in_axis in enumerate(axes):
            source[in_axis] = index[out_axis]
        assert result[index] == value[tuple(source)]


def test_identity_permutation_is_an_identity_op():
    flow, f = builder()
    x = f.var("x", "float32", [3, 4])
    y = f.t(x, [0, 1])
    assert y.producer.type == "Identity"
    assert f.transpose(f.var("v", "float32", [5])).producer.type == "Identity"


@pytest.mark.parametrize("shape,target,expected", [
    ((3, 4), [12], (12,)), ((3, 4), [2, -1], (2, 6)), ((2, 3, 5), [-1, 5], (6, 5)),
    ((7,), [7, 1], (7, 1)), ((33,), [1, -1, 1], (1, 33, 1)), ((), [1, 1], (1, 1))], ids=str)
def test_reshape(shape, target, expected):
    flow, f = builder()
    x = f.var("x", "float64", shape)
    y = f.reshape(x, target)
    assert y.shape == expected
    value = np.asarray(random(shape))
    result = run(flow, {x: value}, y)
    assert result.reshape(-1).tolist() == value.reshape(-1).tolist()


def test_reshape_with_shape_attribute_and_dynamic_input():
    flow, f = builder()
    x = f.var("x", "float32", [-1, 4])
    y = f.op("Reshape", [x], attrs={"shape": [-1, 2]})
    assert y.shape == (-1, 2)
    result = reference.run(flow, "f", {x: random((3, 4))})[y.name]
    assert result.shape == (6, 2)


@pytest.mark.parametrize("shapes,axis", [
    ([(3, 2), (3, 5)], 1), ([(1, 7), (2, 7), (4, 7)], 0), ([(2, 3, 4), (2, 1, 4)], 1),
    ([(2, 3, 4), (2, 3, 1)], -1), ([(5,), (33,)], 0), ([(3, 1)], 1)], ids=str)
def test_concat(shapes, axis):
    flow, f = builder()
    parts = [f.var(f"x{i}", "float32", s) for i, s in enumerate(shapes)]
    y = f.concat(parts, axis=axis)
    assert y.producer.attrs["N"] == str(len(parts))
    values = [random(s).astype(np.float32) for s in shapes]
    result = run(flow, dict(zip(parts, values)), y)
    offset = 0
    axis %= len(shapes[0])
    for value in values:
        index = [slice(None)] * value.ndim
        index[axis] = slice(offset, offset + value.shape[axis])
        np.testing.assert_array_equal(result[tuple(index)], value)
        offset += value.shape[axis]
    assert offset == result.shape[axis]


def test_concat_default_axis_is_1():
    flow, f = builder()
    a, b = f.var("a", "float32", [2, 3]), f.var("b", "float32", [2, 4])
    assert f.concat([a, b]).shape == (2, 7)


@pytest.mark.parametrize("shape,splits,axis", [((6, 3), 3, 0), ((2, 33), 3, 1), ((7,), 1, 0),
                                               ((2, 4, 6), 2, -1), ((4, 5), 4, 0)], ids=str)
def test_split(shape, splits, axis):
    flow, f = builder()
    x = f.var("x", "float64", shape)
    parts = f.split(x, splits, axis)
    assert isinstance(parts, list) and len(parts) == splits
    value = random(shape)
    results = reference.run(flow, "f", {x: value})
    size = shape[axis] // splits
    for i, part in enumerate(parts):
        index = [slice(None)] * len(shape)
        index[axis] = slice(i * size, (i + 1) * size)
        np.testing.assert_array_equal(results[part.name], value[tuple(index)])


@pytest.mark.parametrize("shape,begin,size", [((7, 5), [1, 2], [3, 3]), ((33,), [0], [33]),
                                              ((4, 6, 3), [1, 0, 2], [2, -1, 1]),
                                              ((1, 9), [0, 8], [1, 1]), ((5,), [2], [0])],
                         ids=str)
def test_slice(shape, begin, size):
    flow, f = builder()
    x = f.var("x", "float64", shape)
    y = f.slice(x, begin, size)
    value = random(shape)
    result = run(flow, {x: value}, y)
    ends = [d if s == -1 else b + s for d, b, s in zip(shape, begin, size)]
    for index in itertools.product(*map(range, result.shape)):
        assert result[index] == value[tuple(i + b for i, b in zip(index, begin))]
    assert result.shape == tuple(e - b for b, e in zip(begin, ends))


def test_slice_with_runtime_begin_out_of_range():
    flow, f = builder()
    x = f.var("x", "float32", [5, 4])
    begin = f.var("begin", "int32", [2])
    y = f.slice(x, begin, [2, 2])
    assert y.shape == (2, 2)
    assert run(flow, {x: random((5, 4)), begin: np.array([3, 1], np.int32)}, y).shape == (2, 2)
    with pytest.raises(myelin.InputError, match="outside"):
        reference.run(flow, "f", {x: random((5, 4)), begin: np.array([4, 0], np.int32)})


@pytest.mark.parametrize("params_shape,indices_shape", [((7, 3), (5,)), ((33, 2, 4), (3, 2)),
                                                        ((5,), (4,)), ((9, 6), (1, 7)),
                                                        ((4, 3), ())], ids=str)
@pytest.mark.parametrize("index_type", ["int32", "int64"])
@pytest.mark.parametrize("with_oov", [False, True])
def test_gather(params_shape, indices_shape, index_type, with_oov):
    rng = np.random.default_rng()
    flow, f = builder()
    params = f.var("params", "float32", params_shape)
    indices = f.var("indices", index_type, indices_shape)
    oov = f.var("oov", "float32", params_shape[1:]) if with_oov else None
    y = f.gather(params, indices, oov)
    assert y.shape == indices_shape + params_shape[1:]
    rows = params_shape[0]
    low, high = (-2, rows + 2) if with_oov else (0, rows)
    index_values = rng.integers(low, high, indices_shape).astype(index_type)
    feeds = {params: random(params_shape), indices: index_values}
    if with_oov:
        feeds[oov] = random(params_shape[1:])
    result = run(flow, feeds, y)
    for position in itertools.product(*map(range, indices_shape)):
        i = int(index_values[position])
        expected = feeds[params][i] if 0 <= i < rows else feeds[oov]
        np.testing.assert_array_equal(result[position], expected.astype(np.float32))


def test_gather_bad_index_without_oov_is_an_input_error():
    flow, f = builder()
    params, indices = f.var("params", "float32", [4, 3]), f.var("indices", "int32", [2])
    f.gather(params, indices)
    for bad in (4, -1):
        with pytest.raises(myelin.InputError, match=f"index {bad}"):
            reference.run(flow, "f", {params: random((4, 3)),
                                      indices: np.array([0, bad], np.int32)})


POOLS = [("gather_sum", lambda rows: np.sum(rows, axis=0)),
         ("gather_avg", lambda rows: np.sum(rows, axis=0) / len(rows)),
         ("gather_max", lambda rows: np.maximum.reduce(rows))]


@pytest.mark.parametrize("indices_shape", [(1, 5), (7,), (3, 4)], ids=str)
@pytest.mark.parametrize("method,pool", POOLS, ids=[p[0] for p in POOLS])
def test_pooling_gather(method, pool, indices_shape):
    rng = np.random.default_rng()
    flow, f = builder()
    params = f.var("params", "float32", [33, 6])
    indices = f.var("indices", "int32", indices_shape)
    y = getattr(f, method)(params, indices)
    batch = indices_shape[0] if len(indices_shape) == 2 else 1
    assert y.shape == (batch, 6)
    index_values = rng.integers(0, 33, indices_shape).astype(np.int32)
    flat = index_values.reshape(batch, -1)
    flat[-1, rng.integers(1, flat.shape[1])] = -1  # the last row's list ends early
    table = random((33, 6))
    result = run(flow, {params: table, indices: index_values}, y)
    for b, row in enumerate(flat.tolist()):
        chosen = row[:row.index(-1)] if -1 in row else row
        expected = pool([table[i].astype(np.float32).astype(np.float64) for i in chosen])
        np.testing.assert_allclose(result[b], expected, rtol=1e-12)


def test_pooling_gather_of_nothing_is_zero():
    flow, f = builder()
    params, indices = f.var("params", "float32", [4, 3]), f.var("indices", "int32", [1, 3])
    y = f.gather_max(params, indices)
    result = run(flow, {params: random((4, 3)), indices: np.array([[-1, 2, 3]], np.int32)}, y)
    np.testing.assert_array_equal(result, np.zeros((1, 3)))


@pytest.mark.parametrize("shape", [(), (1,), (7, 33), (2, 3, 5)], ids=str)
def test_shape_size_rank(shape):
    flow, f = builder()
    x = f.var("x", "float32", shape)
    outs = [f.shape(x), f.size(x), f.rank(x)]
    assert [o.dtype for o in outs] == ["int32"] * 3
    results = reference.run(flow, "f", {x: random(shape)})
    assert results[outs[0].name].tolist() == list(shape)
    assert int(results[outs[1].name]) == int(np.prod(shape))
    assert int(results[outs[2].name]) == len(shape)


def test_array_shape_errors():
    flow, f = builder()
    x = f.var("x", "float32", [3, 4])
    y = f.var("y", "float32", [5, 4])
    i = f.var("i", "float32", [2])
    with pytest.raises(myelin.ShapeError, match=r"f/Transpose.*perm \[0, 0\]"):
        f.transpose(x, [0, 0])
    with pytest.raises(myelin.ShapeError, match=r"f/Reshape.*\[3, 4\].*\[5, -1\]"):
        f.reshape(x, [5, -1])
    with pytest.raises(myelin.ShapeError, match=r"\[3, 4\] \(12 elements\) to \[5, 2\]"):
        f.reshape(x, [5, 2])
    with pytest.raises(myelin.ShapeError, match=r"f/Concat.*\[3, 4\], \[5, 4\]"):
        f.concat([x, y], axis=1)
    with pytest.raises(myelin.ShapeError, match=r"f/Split.*\[3, 4\].*3 equal parts"):
        f.split(x, 3, 1)
    with pytest.raises(myelin.ShapeError, match=r"f/Slice.*outside shape \[3, 4\]"):
        f.slice(x, [1, 2], [2, 3])
    with pytest.raises(myelin.ShapeError, match="int32 or int64"):
        f.gather(x, i)
    with pytest.raises(myelin.ShapeError, match=r"oov shape \[3\].*\[4\]"):
        f.gather(x, f.var("j", "int32", [2]), f.var("oov", "float32", [3]))
    assert [op.type for op in flow.ops.values()] == []


def test_dtype_is_kept():
    flow, f = builder()
    for dtype in ["int8", "int64", "bool", "float16"]:
        x = f.var(f"x_{dtype}", dtype, [2, 3])
        assert f.transpose(x).dtype == dtypes.canonical(dtype)
        assert f.reshape(x, [6]).dtype == dtype
