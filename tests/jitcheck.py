"""Test helpers: compile a flow, poison every tensor, run, and compare with the interpreter."""

import numpy as np

import myelin
from myelin import reference

from myelin.codegen.llvm import target as _target

# Feature presets the back-end suites run under: the host's features, AVX-512 off, AVX2 off
# and SSE only. Presets that give the same features on this CPU (AVX-512 off on a CPU without
# it) are run once.
PRESETS = list({_target.host(p).features: p for p in ["sse", "avx", "noavx512", "host"]}.values())


def poison(data):
    """Fill every instance tensor with garbage (NaN for floats) so unwritten elements show."""
    for spec in data.cell.tensors:
        view = data.tensor(spec.name).numpy()
        if view.dtype.kind == "f":
            view[...] = np.nan
        elif view.dtype.kind == "b":
            view[...] = True
        else:
            view[...] = np.iinfo(view.dtype).max // 3


def registry_domains(inputs):
    """{op type: its registry ``domain``} of the element-wise ops of ``inputs`` inputs that
    have one: where tests draw their inputs."""
    found = {}
    for op_type in myelin.ops.types():
        opdef = myelin.ops.lookup(op_type)
        if (opdef.domain is not None and opdef.inputs == (inputs, inputs)
                and opdef.kind in (myelin.ops.Kind.ELEMWISE, myelin.ops.Kind.BROADCAST)):
            found[op_type] = opdef.domain
    return found


def random_array(rng, dtype, shape, low=-3.0, high=3.0):
    """Fresh random values of ``dtype`` (never all zeros)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = max(int(low), np.iinfo(dtype).min)
        hi = min(int(high), np.iinfo(dtype).max)
        return rng.integers(lo, hi + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def relative_error(actual, expected, floor=0.0):
    """``‖actual − expected‖ / max(‖expected‖, floor)`` in float64 (absolute when both are
    zero)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"shape {actual.shape} != expected {expected.shape}")
    both_nan = np.isnan(actual) & np.isnan(expected)
    same_inf = np.isinf(expected) & (actual == expected)
    mask = ~(both_nan | same_inf)
    diff = np.linalg.norm(actual[mask] - expected[mask])
    norm = max(np.linalg.norm(expected[mask]), floor)
    return diff / norm if norm > 0 else diff


def computed(net, flow, inputs_by_func):
    """Run each function of the compiled ``net`` on its inputs (its tensors poisoned first):
    (function name, inputs, output, computed value, the reference's value) per output."""
    for func_name, inputs in inputs_by_func.items():
        data = net.cell(func_name).instance()
        poison(data)
        for var, value in inputs.items():
            data[var] = value
        data.compute()
        for name, want in reference.run(flow, func_name, inputs).items():
            got = np.asarray(data[name]) if np.ndim(want) else data[name]
            yield func_name, inputs, name, got, want


def run_and_compare(flow, inputs_by_func, tolerance, features="host", exact=False, floor=0.0,
                    **options):
    """Compile ``flow``, run each function with its inputs, compare outputs with the reference.

    ``inputs_by_func`` maps a function name to {variable: array}; ``options`` go to the
    Compiler. An output's error is relative to its norm or ``floor``, whichever is larger (a
    floor for outputs of a few elements whose terms may cancel). Raises AssertionError with
    the function, output and error on a mismatch. Returns the compiled network.
    """
    net = myelin.Compiler(features=features, **options).compile(flow)
    for func_name, _, name, got, want in computed(net, flow, inputs_by_func):
        if exact:
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want),
                                          err_msg=f"{func_name}: {name}")
            continue
        error = relative_error(got, want, floor)
        assert error <= tolerance, (f"{func_name}: output {name} relative error {error:.3g} "
                                    f"> {tolerance:g} [{features}]\n got {got}\n want {want}")
    return net


def guide_flow(rng):
    """The Myelin guide's example, y = softmax(relu(x W + b)); returns (flow, x, y, W, b)."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    W = f.array("W", rng.random((64, 256)).astype(np.float32))
    b = f.array("b", rng.random(256).astype(np.float32))
    x = f.var("x", myelin.DT_FLOAT, [1, 64])
    y = f.softmax(f.relu(f.add(f.matmul(x, W), b)), name="y")
    return flow, x, y, W, b


def lstm_flow(steps, weights):
    """An LSTM cell of plain ops (matmuls, split, sigmoid, tanh) run by a ``while_loop`` over
    a sequence xs[steps, 1, inputs], from zero states, giving the final h and c (function
    "rnn"); ``weights`` are W[inputs, 4 hidden], U[hidden, 4 hidden], b[4 hidden], gates in
    the order i, f, g, o."""
    inputs, hidden = weights["W"].shape[0], weights["U"].shape[0]
    flow = myelin.Flow()
    f = myelin.Builder(flow, "rnn")
    xs = f.param("xs", "float32", [steps, 1, inputs])
    w, u, bias = (f.array(name, weights[name]) for name in ("W", "U", "b"))

    def body(b, t, h, c):
        x = b.reshape(b.gather(xs, b.reshape(t, [1])), [1, inputs])
        gates = b.add(b.add(b.matmul(x, w), b.matmul(h, u)), bias)
        i, fg, g, o = b.split(gates, 4, axis=1)
        c_next = b.add(b.mul(b.sigmoid(fg), c), b.mul(b.sigmoid(i), b.tanh(g)))
        return b.add(t, 1), b.mul(b.sigmoid(o), b.tanh(c_next)), c_next

    zeros = np.zeros((1, hidden), np.float32)
    _, h, c = f.while_loop(lambda b, t, h, c: b.less(t, steps), body,
                           [f.const(0, "int32"), f.const(zeros), f.const(zeros)])
    f.ret(h, c)
    return flow


def numpy_lstm(xs, weights):
    """The final h and c of :func:`lstm_flow`'s LSTM, in float64."""
    w, u, bias = (weights[k].astype(np.float64) for k in ("W", "U", "b"))
    h = c = np.zeros((1, u.shape[0]))
    for x in xs.astype(np.float64):
        i, f, g, o = np.split(x @ w + h @ u + bias, 4, axis=1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
    return h, c


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))
