"""Optimizers: SGD (plain, momentum, Nesterov, L2) and Adam over 25 steps on fixed synthetic
gradients, against a float64 NumPy version of PyTorch's formulas and against torch.optim
itself; clipping against torch.nn.utils.clip_grad_norm_; schedules against PyTorch's; one
fused kernel per parameter; gradients read from gradient instances; bad inputs."""

import numpy as np
import pytest
import torch

import myelin
from myelin import train

SHAPES = {"f/W": (13, 7), "f/b": (33,), "f/s": ()}   # not multiples of a vector; a scalar
STEPS = 25


def model():
    """A flow whose function f reads learnable parameters of SHAPES."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    total = None
    for name, shape in SHAPES.items():
        p = train.parameter(f, name.split("/")[1], shape, "normal")
        total = f.sum(p) if total is None else f.add(total, f.sum(p))
    return flow


def compiled(optimizer, **options):
    flow = model()
    optimizer.build(flow)
    net = myelin.Compiler(**options).compile(flow)
    train.initialize(net, 2)
    optimizer.attach(net)
    return net


def gradient_sequence(seed=0):
    """Per step, a gradient for each parameter; their norms grow from ~0.2 to ~6."""
    rng = np.random.default_rng(seed)
    return [{name: np.array(rng.standard_normal(shape) * (0.02 + 0.02 * k), np.float32)
             for name, shape in SHAPES.items()} for k in range(STEPS)]


def numpy_steps(params, gradients, kind, lr, max_norm=None, momentum=0.0, weight_decay=0.0,
                nesterov=False, beta1=0.9, beta2=0.999, eps=1e-8):
    """PyTorch's SGD and Adam (and clip_grad_norm_) in float64; yields the parameters after
    each step."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    state = {k: [np.zeros_like(v), np.zeros_like(v)] for k, v in p.items()}
    for step, grads in enumerate(gradients):
        g = {k: v.astype(np.float64) for k, v in grads.items()}
        if max_norm is not None:
            norm = np.sqrt(sum(np.sum(v ** 2) for v in g.values()))
            g = {k: v * min(1.0, max_norm / (norm + 1e-6)) for k, v in g.items()}
        rate, t = lr(step), step + 1
        for k in p:
            d = g[k] + weight_decay * p[k]
            first, second = state[k]
            if kind == "sgd":
                if momentum:
                    first[...] = momentum * first + d
                    d = d + momentum * first if nesterov else first
                p[k] = p[k] - rate * d
            else:
                first[...] = beta1 * first + (1 - beta1) * d
                second[...] = beta2 * second + (1 - beta2) * d * d
                denominator = np.sqrt(second) / np.sqrt(1 - beta2 ** t) + eps
                p[k] = p[k] - rate / (1 - beta1 ** t) * first / denominator
        yield p


def parameters(net):
    """Copies of the parameters' values (float32 arrays, a scalar one too)."""
    return {name: np.array(net.tensor(name)) for name in SHAPES}


def relative_error(actual, expected):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return np.linalg.norm(actual - expected) / np.linalg.norm(expected)


CONFIGS = {
    "sgd": ("sgd", dict(lr=0.1)),
    "sgd momentum": ("sgd", dict(lr=0.05, momentum=0.9)),
    "sgd momentum L2 step decay": ("sgd", dict(lr=train.StepDecay(0.05, 5, 0.5),
                                               momentum=0.8, weight_decay=0.01)),
    "sgd nesterov clipped": ("sgd", dict(lr=0.05, momentum=0.9, nesterov=True, max_norm=1.0)),
    "adam": ("adam", dict(lr=0.01)),
    "adam L2 cosine": ("adam", dict(lr=train.Cosine(0.02, STEPS, 0.001), beta1=0.8,
                                    beta2=0.99, weight_decay=0.05)),
    "adam clipped": ("adam", dict(lr=0.01, eps=1e-6, max_norm=1.0)),
}


def torch_optimizer(kind, options, tensors):
    lr = options["lr"]
    base = lr.lr if callable(lr) else lr
    keys = {"momentum", "weight_decay", "nesterov"} if kind == "sgd" else {"weight_decay", "eps"}
    kwargs = {k: v for k, v in options.items() if k in keys}
    if kind == "sgd":
        optimizer = torch.optim.SGD(tensors, lr=base, **kwargs)
    else:
        betas = (options.get("beta1", 0.9), options.get("beta2", 0.999))
        optimizer = torch.optim.Adam(tensors, lr=base, betas=betas, **kwargs)
    if isinstance(lr, train.StepDecay):
        return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, lr.step_size, lr.gamma)
    if isinstance(lr, train.Cosine):
        return optimizer, torch.optim.lr_scheduler.CosineAnnealingLR(
            optimizer, lr.total_steps, lr.min_lr)
    return optimizer, None


@pytest.mark.parametrize("config", CONFIGS)
def test_updates_match_numpy_and_torch(config):
    kind, options = CONFIGS[config]
    optimizer = (train.SGD if kind == "sgd" else train.Adam)(**options)
    net = compiled(optimizer)
    start = parameters(net)
    gradients = gradient_sequence()

    tensors = [torch.tensor(start[name], requires_grad=True) for name in SHAPES]
    reference, scheduler = torch_optimizer(kind, options, tensors)
    max_norm = options.get("max_norm")
    numpy_options = {k: v for k, v in options.items() if k != "lr"}
    expected = numpy_steps(start, gradients, kind, optimizer.schedule, **numpy_options)

    clipped = 0
    for step, grads in enumerate(gradients):
        for tensor, name in zip(tensors, SHAPES):
            tensor.grad = torch.tensor(grads[name])
        norm = (torch.nn.utils.clip_grad_norm_(tensors, max_norm) if max_norm is not None
                else None)
        assert optimizer.step({name: g.copy() for name, g in grads.items()}) == \
            pytest.approx(reference.param_groups[0]["lr"], rel=1e-12)
        reference.step()
        if scheduler is not None:
            scheduler.step()
        if norm is not None:
            assert optimizer.grad_norm == pytest.approx(float(norm), rel=1e-5)
            clipped += float(norm) > max_norm
        values = next(expected)
        for tensor, name in zip(tensors, SHAPES):
            assert relative_error(net[name], values[name]) < 1e-5, (step, name)
            assert relative_error(net[name], tensor.detach().numpy()) < 1e-5, (step, name)
    assert optimizer.steps == STEPS
    if max_norm is not None:
        assert 0 < clipped < STEPS              # both sides of the clip were exercised


def code_steps(cell):
    return [step for step in cell.steps if not step.noop]


@pytest.mark.parametrize("kind, options, expected", [
    ("sgd", dict(lr=0.1, momentum=0.9), {"Calculate": 3, "Cast": 1}),
    # Clipping adds a Sum(Square) per gradient and a scalar step for the norm, which the
    # update of the scalar parameter f/s joins; Adam's bias corrections are two float64
    # scalar steps and two casts.
    ("adam", dict(max_norm=1.0), {"Calculate": 3 + 1 + 2 + 2, "Cast": 2}),
])
def test_one_fused_kernel_per_parameter(kind, options, expected):
    optimizer = (train.SGD if kind == "sgd" else train.Adam)(**options)
    cell = compiled(optimizer).cell("optimizer")
    steps = code_steps(cell)
    kinds = {}
    for step in steps:
        kind_name = step.kernel.kernel_name(step)
        kind_name = "Cast" if kind_name == "CastExpr" else kind_name
        kinds[kind_name] = kinds.get(kind_name, 0) + 1
    assert kinds == expected
    state = ["momentum"] if kind == "sgd" else ["m", "v"]
    for name in SHAPES:
        writers = [step for step in steps
                   if any(out.root().name == name for out in step.outputs)]
        assert len(writers) == 1 and writers[0].type == "Calculate"
        written = {out.root().name for out in writers[0].outputs}
        assert written >= {name} | {f"optimizer/{name}/{role}" for role in state}
        assert len(written) == 1 + len(state) + 2 * (name == "f/s" and "max_norm" in options)


def test_unfused_updates_match_numpy():
    """At opt level 0 every op is a step of its own, and the Assigns still fold."""
    optimizer = train.SGD(lr=0.05, momentum=0.9, weight_decay=0.1)
    net = compiled(optimizer, opt_level=0)
    assert not any(step.type == "Assign" for step in net.cell("optimizer").steps)
    start = parameters(net)
    gradients = gradient_sequence(1)[:6]
    expected = numpy_steps(start, gradients, "sgd", optimizer.schedule, momentum=0.9,
                           weight_decay=0.1)
    for grads, values in zip(gradients, expected):
        optimizer.step({name: g.copy() for name, g in grads.items()})
        for name in SHAPES:
            assert relative_error(net[name], values[name]) < 1e-5


def test_gradients_from_an_instance_accumulate_then_are_zeroed():
    """A stand-in gradient cell: gradients/f adds its inputs into gradients/f/d_<p>."""
    flow = model()
    g = myelin.Builder(flow, "gradients/f")
    for name, shape in SHAPES.items():
        base = name.split("/")[1]
        d = g.var(f"d_{base}", myelin.DT_FLOAT, shape)
        g.assign(d, g.add(d, g.var(f"in_{base}", myelin.DT_FLOAT, shape)))
    optimizer = train.SGD(lr=0.5, momentum=0.9)
    optimizer.build(flow)
    net = myelin.Compiler().compile(flow)
    train.initialize(net, 3)
    optimizer.attach(net)
    gradient = net.cell("gradients/f").instance()
    values = gradient_sequence(2)[0]
    start = parameters(net)
    for name in SHAPES:
        gradient[f"gradients/f/in_{name[2:]}"] = values[name]
    gradient.compute()
    gradient.compute()                  # accumulated: twice the value
    forward = net.cell("f").instance()
    optimizer.step([forward, gradient])
    for name in SHAPES:
        assert relative_error(net[name], start[name] - 0.5 * 2 * values[name]) < 1e-6
        assert not np.asarray(gradient.array(f"gradients/f/d_{name[2:]}")).any()
    # The momentum buffer persists: a second step with the gradient 1x adds 0.9 of the first.
    gradient.compute()
    optimizer.step(gradient)
    for name in SHAPES:
        moved = 2 * values[name] + (0.9 * 2 * values[name] + values[name])
        assert relative_error(net[name], start[name] - 0.5 * moved) < 1e-6
    optimizer.reset()                   # momentum and step count back to zero
    assert optimizer.steps == 0
    before = parameters(net)
    gradient.compute()
    optimizer.step(gradient, zero_grad=False)
    for name in SHAPES:
        assert relative_error(net[name], before[name] - 0.5 * values[name]) < 1e-6
        assert relative_error(gradient.array(f"gradients/f/d_{name[2:]}"), values[name]) == 0
    # Another gradient instance: its arrays, not the last step's.
    other = net.cell("gradients/f").instance()
    for name in SHAPES:
        other[f"gradients/f/in_{name[2:]}"] = 3 * values[name]
    other.compute()
    before = parameters(net)
    optimizer.step(other)
    for name in SHAPES:
        moved = 0.9 * values[name] + 3 * values[name]
        assert relative_error(net[name], before[name] - 0.5 * moved) < 1e-6


def test_bad_gradients_raise_input_error():
    optimizer = train.SGD(lr=0.1)
    with pytest.raises(myelin.InputError, match="not attached"):
        optimizer.step({})
    net = compiled(optimizer)
    grads = {name: np.ones(shape, np.float32) for name, shape in SHAPES.items()}
    bad = [
        (dict(grads, **{"f/W": np.ones((7, 13), np.float32)}), "shape \\[13, 7\\]"),
        (dict(grads, **{"f/b": np.ones(33)}), "binds float32 arrays, not float64"),
        (dict(grads, **{"f/W": np.ones((13, 14), np.float32)[:, :7]}), "non-contiguous"),
        ({k: v for k, v in grads.items() if k != "f/s"}, "no gradients in the mapping for f/s"),
        (dict(grads, **{"f/x": np.ones(3, np.float32)}), "updates no parameters f/x"),
        (net.cell("f").instance(), "no gradients in the gradient instances for f/W, f/b"),
    ]
    before = parameters(net)
    for gradients, message in bad:
        with pytest.raises(myelin.InputError, match=message):
            optimizer.step(gradients)
    for name in SHAPES:
        np.testing.assert_array_equal(np.asarray(net[name]), before[name])


def test_bad_optimizers_raise_flow_error():
    for make, message in [
        (lambda: train.SGD(lr=0.1, momentum=-0.5), "momentum must be a number 0 or more"),
        (lambda: train.SGD(lr=0.1, nesterov=True), "Nesterov momentum needs a momentum"),
        (lambda: train.SGD(lr=0.1, weight_decay=float("nan")), "weight_decay must be a number"),
        (lambda: train.Adam(beta2=1.0), "beta2 must be below 1"),
        (lambda: train.Adam(eps=0), "eps must be a number above 0"),
        (lambda: train.Adam(max_norm=-1.0), "max_norm must be a number above 0"),
    ]:
        with pytest.raises(myelin.FlowError, match=message):
            make()
    flow = model()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [3])
    d = train.parameter(f, "d", [3], dtype=myelin.DT_DOUBLE)
    f.add(x, f.cast(d, myelin.DT_FLOAT), name="y")
    vars_before = list(flow.vars)
    for params, message in [
        (["f/W", "f/d"], "share one float type, not float32, float64"),
        ([x], "f/x is not a learnable variable of the flow"),
        (["f/nothing"], "f/nothing is not a learnable variable"),
        ([], "no learnable parameters"),
    ]:
        with pytest.raises(myelin.FlowError, match=message):
            train.Adam().build(flow, params)
        assert list(flow.vars) == vars_before and "optimizer" not in flow.funcs
    train.Adam().build(flow, ["f/W"])
    with pytest.raises(myelin.FlowError, match="already has a function optimizer"):
        train.SGD(lr=0.1).build(flow, ["f/b"])
