"""Losses: values against float64 NumPy, closed-form adjoints against NumPy and against central
differences of the compiled loss, bad shapes and labels."""

import numpy as np
import pytest

import myelin
from myelin import train


def cross_entropy_cell(batch, classes, dtype=myelin.DT_FLOAT):
    flow = myelin.Flow()
    b = myelin.Builder(flow, "loss")
    logits = b.var("logits", dtype, [batch, classes])
    logits.ref = True
    labels = b.var("labels", myelin.DT_INT32, [batch])
    loss, d_logits = train.softmax_cross_entropy(b, logits, labels)
    assert (loss.name, d_logits.name) == ("loss/loss", "loss/d_logits")
    return myelin.Compiler().compile(flow).cell("loss").instance(), logits, labels


def mse_cell(shape, dtype=myelin.DT_FLOAT):
    flow = myelin.Flow()
    b = myelin.Builder(flow, "mse")
    predictions = b.var("y", dtype, shape)
    targets = b.var("target", dtype, shape)
    loss, d_y = train.mean_squared_error(b, predictions, targets, name="error")
    assert (loss.name, d_y.name) == ("mse/error", "mse/d_y")
    return myelin.Compiler().compile(flow).cell("mse").instance(), predictions, targets


def numpy_cross_entropy(logits, labels):
    x = logits.astype(np.float64)
    shifted = x - x.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(shifted).sum(axis=1))
    batch = len(labels)
    loss = np.mean(log_z - shifted[np.arange(batch), labels])
    softmax = np.exp(shifted - log_z[:, None])
    onehot = np.eye(x.shape[1])[labels]
    return loss, (softmax - onehot) / batch


def relative_error(actual, expected):
    expected = np.asarray(expected, np.float64)
    return np.linalg.norm(np.asarray(actual, np.float64) - expected) / np.linalg.norm(expected)


@pytest.mark.parametrize("batch, classes", [(1, 3), (7, 33)])
def test_cross_entropy_matches_numpy_and_is_stable(batch, classes):
    data, logits, labels = cross_entropy_cell(batch, classes)
    rng = np.random.default_rng(batch)
    values = (rng.standard_normal((batch, classes)) * 5).astype(np.float32)
    values[0] += 1000.0                  # exp would overflow without the shift
    targets = rng.integers(0, classes, batch).astype(np.int32)
    data.bind(logits, values)
    data[labels] = targets
    data.compute()
    loss, d_logits = numpy_cross_entropy(values, targets)
    assert np.isfinite(data["loss/loss"])
    assert abs(data["loss/loss"] - loss) <= 1e-5 * abs(loss)
    assert relative_error(data["loss/d_logits"], d_logits) < 1e-5
    # The logits are read in place: a change to the bound array is what the next call sees.
    values[...] = 0
    data.compute()
    assert abs(data["loss/loss"] - np.log(classes)) < 1e-5


def test_mean_squared_error_matches_numpy():
    data, predictions, targets = mse_cell([5, 13])
    rng = np.random.default_rng(3)
    y, t = (rng.standard_normal((2, 5, 13)) * 3).astype(np.float32)
    data[predictions], data[targets] = y, t
    data.compute()
    difference = y.astype(np.float64) - t
    assert abs(data["mse/error"] - np.mean(difference ** 2)) < 1e-5 * np.mean(difference ** 2)
    assert relative_error(data["mse/d_y"], 2 * difference / difference.size) < 1e-6


def central_differences(data, x, loss, h=1e-5):
    """d loss / d x of the compiled cell, by central differences on each element of x."""
    values = np.asarray(data[x])
    gradient = np.zeros(values.shape)
    for index in np.ndindex(values.shape):
        saved = values[index]
        values[index] = saved + h
        data.compute()
        up = data[loss]
        values[index] = saved - h
        data.compute()
        gradient[index] = (up - data[loss]) / (2 * h)
        values[index] = saved
    return gradient


def test_adjoints_match_central_differences():
    """In float64, so the differences are accurate to ~1e-10."""
    rng = np.random.default_rng(5)
    data, logits, labels = cross_entropy_cell(3, 5, myelin.DT_DOUBLE)
    data.bind(logits, rng.standard_normal((3, 5)) * 2)
    data[labels] = [4, 0, 2]
    data.compute()
    adjoint = np.asarray(data["loss/d_logits"]).copy()
    assert relative_error(adjoint, central_differences(data, logits, "loss/loss")) < 1e-7

    data, predictions, targets = mse_cell([2, 3], myelin.DT_DOUBLE)
    data[predictions], data[targets] = rng.standard_normal((2, 2, 3))
    data.compute()
    adjoint = np.asarray(data["mse/d_y"]).copy()
    assert relative_error(adjoint, central_differences(data, predictions, "mse/error")) < 1e-7


def test_bad_shapes_raise_and_leave_the_flow_as_it_was():
    flow = myelin.Flow()
    b = myelin.Builder(flow, "loss")
    logits = b.var("logits", myelin.DT_FLOAT, [4, 3])
    labels = b.var("labels", myelin.DT_INT32, [4])
    cases = [
        (lambda: train.softmax_cross_entropy(b, b.var("v", myelin.DT_FLOAT, [4]), labels),
         "must be \\[batch, classes\\]"),
        (lambda: train.softmax_cross_entropy(b, logits, b.var("l3", myelin.DT_INT32, [3])),
         "labels loss/l3 must be integers of shape \\[4\\]"),
        (lambda: train.softmax_cross_entropy(b, logits, b.var("fl", myelin.DT_FLOAT, [4])),
         "must be integers"),
        (lambda: train.softmax_cross_entropy(b, labels, labels), "float tensor"),
        (lambda: train.mean_squared_error(b, logits, b.var("t", myelin.DT_FLOAT, [3, 4])),
         "must be float32\\[4x3\\] like the predictions"),
        (lambda: train.mean_squared_error(b, logits, b.var("d", myelin.DT_DOUBLE, [4, 3])),
         "not float64\\[4x3\\]"),
    ]
    for build, message in cases:
        ops = len(flow.ops)
        with pytest.raises(myelin.ShapeError, match=message):
            build()
        assert len(flow.ops) == ops


def test_labels_out_of_range_raise_at_run_time():
    data, logits, labels = cross_entropy_cell(2, 4)
    data.bind(logits, np.zeros((2, 4), np.float32))
    data[labels] = [1, 4]
    with pytest.raises(myelin.InputError, match="out of range"):
        data.compute()
    data[labels] = [1, -1]            # counts from the end: class 3
    data.compute()
    assert abs(data["loss/loss"] - np.log(4)) < 1e-6
    assert data["loss/d_logits"][1, 3] == pytest.approx((0.25 - 1) / 2)
