"""Einsum converter against ONNX Runtime: matmuls, batch matmuls with broadcast ellipses,
inner and outer products, transposes, traces and diagonals, reductions, three operands and
integer operands."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import myelin.onnx
from myelin.importers.onnx.converters.einsum import parse

_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
          np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32}

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij, bjk -> bik", [(5, 2, 3), (5, 3, 4)]),
    ("i,i", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->ji", [(3, 4)]),
    ("ij->i", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("...ii ->...i", [(3, 5, 5)]),
    ("ijk->", [(2, 3, 4)]),
    ("->", [()]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,ij->", [(3, 4), (3, 4)]),
    ("...ij,...jk->...ik", [(1, 3, 4), (5, 4, 2)]),
    ("...ij,jk", [(2, 3, 3, 4), (4, 6)]),
    ("abc,cd->abd", [(2, 3, 4), (4, 5)]),
    ("iij,jk->ik", [(3, 3, 4), (4, 2)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ab,cd->", [(2, 3), (4, 5)]),
    ("ij,kj->ikj", [(2, 3), (4, 3)]),
    ("ji", [(3, 4)]),
    ("ba,cb", [(3, 4), (5, 3)]),
]


def _model(equation, arrays, opset=12):
    names = [f"x{i}" for i in range(len(arrays))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, _TYPES[a.dtype], a.shape)
                      for n, a in zip(names, arrays)],
        [helper.make_tensor_value_info("y", _TYPES[arrays[0].dtype], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model, dict(zip(names, arrays))


def _check(equation, arrays, rtol=1e-5):
    model, feeds = _model(equation, arrays)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)[0]
    got = myelin.onnx.load(model).run(feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-5)


@pytest.mark.parametrize("equation,shapes", CASES)
def test_einsum_float(equation, shapes):
    rng = np.random.default_rng(len(equation))
    _check(equation, [rng.standard_normal(s).astype(np.float32) for s in shapes])


@pytest.mark.parametrize("equation,shapes", [CASES[0], CASES[2], CASES[6], CASES[13],
                                             CASES[17]])
def test_einsum_int64_and_float64(equation, shapes):
    rng = np.random.default_rng(1)
    _check(equation, [rng.integers(-4, 5, s).astype(np.int64) for s in shapes])
    _check(equation, [rng.standard_normal(s) for s in shapes], rtol=1e-10)


def test_parse():
    assert parse("ij,jk", [2, 2]) == ([["i", "j"], ["j", "k"]], ["i", "k"])
    assert parse("...ii->...i", [4]) == ([["0", "1", "i", "i"]], ["0", "1", "i"])
    assert parse("...j,j...", [3, 2])[0] == [["0", "1", "j"], ["j", "1"]]
    with pytest.raises(ValueError):
        parse("ij,jk", [2])
    with pytest.raises(ValueError):
        parse("ijk", [2])
    with pytest.raises(ValueError):
        parse("ij->ik", [2, 2][:1])
