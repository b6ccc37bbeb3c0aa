"""MatMul built with the Builder and run by the reference interpreter, checked against sums of
products computed with np.einsum on random inputs."""

import numpy as np
import pytest

import myelin
from myelin import reference

# (shape of a, shape of b) as stored, before any transpose.
CASES = [((3, 7), (7, 5)), ((1, 33), (33, 1)), ((1, 64), (64, 256)), ((2, 3, 4), (4, 5)),
         ((2, 1, 3, 4), (3, 4, 2)), ((5, 1, 7), (1, 7, 3)), ((1, 1), (1, 1))]


def stored(shape, transpose):
    return shape[:-2] + (shape[-1], shape[-2]) if transpose else shape


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("shapes", CASES, ids=str)
def test_matmul(shapes, transpose_a, transpose_b, dtype):
    rng = np.random.default_rng()
    a_shape, b_shape = stored(shapes[0], transpose_a), stored(shapes[1], transpose_b)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    a, b = f.var("a", dtype, a_shape), f.var("b", dtype, b_shape)
    y = f.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    batch = np.broadcast_shapes(shapes[0][:-2], shapes[1][:-2])
    assert y.shape == batch + (shapes[0][-2], shapes[1][-1])
    assert y.producer.attrs.get_bool("transpose_a") == transpose_a
    a_value = rng.uniform(-1, 1, a_shape).astype(dtype)
    b_value = rng.uniform(-1, 1, b_shape).astype(dtype)
    result = reference.run(flow, "f", {a: a_value, b: b_value})[y.name]
    expected = np.einsum("...ik,...kj->...ij",
                         np.swapaxes(a_value, -1, -2) if transpose_a else a_value,
                         np.swapaxes(b_value, -1, -2) if transpose_b else b_value,
                         dtype=np.float64)
    np.testing.assert_allclose(result, expected, rtol=1e-12, atol=1e-13)


def test_integer_matmul():
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    a, b = f.var("a", "int32", [3, 4]), f.var("b", "int32", [4, 2])
    y = f.matmul(a, b)
    a_value, b_value = rng.integers(-9, 9, (3, 4), np.int32), rng.integers(-9, 9, (4, 2), np.int32)
    result = reference.run(flow, "f", {a: a_value, b: b_value})[y.name]
    assert result.dtype == np.int32
    expected = [[sum(int(a_value[i, k]) * int(b_value[k, j]) for k in range(4)) for j in range(2)]
                for i in range(3)]
    np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("a_shape,b_shape,message", [
    ((3, 4), (5, 2), r"inner dimensions 4 and 5 of shapes \[3, 4\] and \[5, 2\]"),
    ((4,), (4, 2), r"rank 2 or more, got shapes \[4\] and \[4, 2\]"),
    ((2, 3, 4), (3, 4, 5), r"batch dimensions of shapes \[2, 3, 4\] and \[3, 4, 5\]")])
def test_matmul_shape_errors(a_shape, b_shape, message):
    f = myelin.Builder(myelin.Flow(), "f")
    a, b = f.var("a", "float32", a_shape), f.var("b", "float32", b_shape)
    with pytest.raises(myelin.ShapeError, match="f/MatMul.*" + message):
        f.matmul(a, b)


def test_matmul_types_must_match():
    f = myelin.Builder(myelin.Flow(), "f")
    a, b = f.var("a", "float32", [2, 2]), f.var("b", "float64", [2, 2])
    with pytest.raises(myelin.ShapeError, match=r"float32\[2x2\] and float64\[2x2\]"):
        f.matmul(a, b)
