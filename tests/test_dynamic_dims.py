"""Dynamic (-1) dimensions of a flow: compiled at the flow's ``batch_size``, never guessed;
named and other dimensions that are not sizes refused where the variable is made.

A -1 once became 1 without a word; now a flow with one and no batch size is a ShapeError that
says how to give it, and the batch size is part of the compile cache's key (a network compiled
for one batch size is not reused for another).
"""

import numpy as np
import pytest

import myelin
from myelin.cli import main
from myelin.errors import ShapeError

WEIGHTS = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)


def _flow(batch_size=None):
    """y = softmax(reshape(relu(x W), [-1, 4, 2])) with x: float32[-1, 16]."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [-1, 16])
    f.softmax(f.reshape(f.relu(f.matmul(x, f.const(WEIGHTS))), [-1, 4, 2]), name="y")
    flow.batch_size = batch_size
    return flow


def _expected(x):
    h = np.maximum(x.astype(np.float64) @ WEIGHTS, 0).reshape(-1, 4, 2)
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_a_dynamic_dimension_without_a_batch_size_is_an_error():
    with pytest.raises(ShapeError, match=r"f/x has a dynamic dimension \(-1\) in its shape "
                                         r"\[-1, 16\].*flow.batch_size = N"):
        myelin.Compiler().compile(_flow())
    for wrong in (-2, 1.5, True, "4"):
        with pytest.raises(ShapeError, match="flow.batch_size is"):
            myelin.Compiler().compile(_flow(wrong))


def test_every_batch_size_computes_its_own_network(tmp_path):
    rng = np.random.default_rng(1)
    for batch in (1, 5, 33, 0, 5):          # (one cache: each size compiled for itself)
        net = myelin.Compiler(cache=tmp_path).compile(_flow(batch))
        data = net.cell("f").instance()
        x = rng.standard_normal((batch, 16)).astype(np.float32)
        data["f/x"] = x
        data.compute()
        y = np.asarray(data["f/y"])
        assert y.shape == (batch, 4, 2)
        np.testing.assert_allclose(y, _expected(x), rtol=1e-5, atol=1e-6)


def test_the_command_takes_the_batch_size_of_a_flow_file(tmp_path, capsys):
    path = str(tmp_path / "dynamic.flow")
    _flow().save(path)
    assert main(["run", path, "--random"], None) == 1
    error = capsys.readouterr().err.splitlines()
    assert "dynamic dimension (-1)" in error[0]
    assert error[1] == "  hint: give the size of a .flow file's -1 dimensions with --batch-size N"
    assert main(["run", path, "--random", "--batch-size", "3", "--output-dir",
                 str(tmp_path)], None) == 0
    assert np.load(tmp_path / "f_y.npy").shape == (3, 4, 2)


@pytest.mark.parametrize("shape, message", [
    (["batch", 16], r"dimension 'batch' of shape \['batch', 16\] is not a size: myelin "
                    r"compiles concrete sizes \(named dimensions are not implemented\); give "
                    r"its size, or -1 and flow.batch_size = N"),
    ([2.5, 16], r"dimension 2.5 of shape \[2.5, 16\] is not a size \(an int >= 0, or -1"),
    ([-2, 16], "dimension -2 of shape"),
    ([None, 16], "dimension None of shape"),
])
def test_a_dimension_that_is_not_a_size_is_a_shape_error(shape, message):
    f = myelin.Builder(myelin.Flow(), "f")
    with pytest.raises(ShapeError, match=message):
        f.var("x", "float32", shape)
