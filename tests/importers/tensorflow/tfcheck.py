"""Helpers of the TensorFlow import tests: compile an imported function and run it, compare
with TensorFlow's results, and trace functions into concrete functions."""

import numpy as np

import myelin


def run(flow, func, inputs, outputs, feeds):
    """Compile ``flow`` and compute function ``func`` once: ``inputs`` and ``outputs`` map
    names to flow variables (an ImportedGraph's), ``feeds`` input names to arrays. Returns the
    outputs by name (copies)."""
    cell = myelin.Compiler().compile(flow).cell(func)
    data = cell.instance()
    for name, value in feeds.items():
        data[inputs[name].name] = value
    data.compute()
    return {name: np.array(data[var.name]) for name, var in outputs.items()}


def run_imported(imported, feeds):
    """:func:`run` for an ImportedGraph."""
    return run(imported.flow, imported.func, imported.inputs, imported.outputs, feeds)


def assert_close(actual, expected, rtol=1e-5):
    """``‖actual − expected‖ / ‖expected‖ <= rtol`` (exact for integers and bools)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if expected.dtype.kind in "iub":
        np.testing.assert_array_equal(actual, expected)
        return
    error = np.linalg.norm((actual - expected).astype(np.float64))
    scale = max(np.linalg.norm(expected.astype(np.float64)), 1e-30)
    assert error / scale <= rtol, f"relative error {error / scale:.3g} > {rtol}"


def trace(tf, fn, *arrays):
    """The concrete function of ``fn`` for inputs of the shapes and types of ``arrays``
    (placeholders named x0, x1, ...)."""
    specs = [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype), name=f"x{i}")
             for i, a in enumerate(arrays)]
    return tf.function(fn).get_concrete_function(*specs)
