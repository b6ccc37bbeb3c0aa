"""Learnable parameters: init kinds and their statistics, determinism per seed, orthogonality,
sharing by instances, and saving and loading through a .flow file."""

import numpy as np
import pytest

import myelin
from myelin import train


def model(kinds=(("W", [13, 7], "uniform", 1.0), ("b", [7], "zeros", 1.0))):
    """y = x W + b with parameters of the given (name, shape, init, scale)."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    params = {name: train.parameter(f, name, shape, init, scale)
              for name, shape, init, scale in kinds}
    x = f.var("x", myelin.DT_FLOAT, [2, 13])
    y = f.add(f.matmul(x, params["W"]), params["b"], name="y")
    return flow, x, y


def compiled(kinds, seed):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    total = None
    for name, shape, init, scale in kinds:
        p = train.parameter(f, name, shape, init, scale)
        s = f.sum(p)
        total = s if total is None else f.add(total, s)
    net = myelin.Compiler().compile(flow)
    train.initialize(net, seed)
    return {name.split("/", 1)[1]: array.copy() for name, array in train.learnables(net).items()}


@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_random_init_statistics(kind):
    fan_in, scale = 400, 2.0
    values = compiled([("W", [fan_in, 300], kind, scale), ("c", [300], kind, 1.0)], 7)
    w = values["W"].astype(np.float64)
    bound = scale / np.sqrt(fan_in)
    expected_std = bound / np.sqrt(3) if kind == "uniform" else bound
    assert abs(w.mean()) < 0.02 * bound
    assert abs(w.std() / expected_std - 1) < 0.02
    if kind == "uniform":
        assert np.abs(w).max() <= bound * (1 + 1e-6) and np.abs(w).max() > 0.99 * bound
    else:
        assert np.abs(w).max() > 3.5 * bound      # a real tail, not a clipped draw
    # A vector's fan-in is its length.
    assert abs(values["c"].std() * np.sqrt(300) / (1 / np.sqrt(3) if kind == "uniform" else 1)
               - 1) < 0.15


@pytest.mark.parametrize("shape", [[6, 10], [10, 6], [4, 3, 2, 2]])
def test_orthogonal_init_has_orthonormal_rows_or_columns(shape):
    w = compiled([("W", shape, "orthogonal", 1.5)], 3)["W"].astype(np.float64)
    matrix = w.reshape(shape[0], -1)
    rows, cols = matrix.shape
    gram = matrix @ matrix.T if rows <= cols else matrix.T @ matrix
    np.testing.assert_allclose(gram, 1.5 ** 2 * np.eye(min(rows, cols)), atol=1e-5)


def test_zeros_and_learnables_without_init():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    z = train.parameter(f, "z", [5], "zeros")
    plain = f.var("plain", myelin.DT_FLOAT, [4])
    plain.learnable = True
    f.add(f.sum(z), f.sum(plain), name="s")
    net = myelin.Compiler().compile(flow)
    net[z] = np.ones(5)
    net[plain] = np.ones(4)
    train.initialize(net, 0)
    assert not np.asarray(net[z]).any() and not np.asarray(net[plain]).any()


def test_init_is_deterministic_per_seed_and_name():
    kinds = [("W", [9, 5], "normal", 1.0), ("V", [5, 5], "orthogonal", 1.0)]
    first, again = compiled(kinds, 11), compiled(kinds, 11)
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    other = compiled(kinds, 12)
    assert not np.allclose(first["W"], other["W"])
    # Another parameter, added before W, does not change W's values.
    more = compiled([("A", [3, 3], "uniform", 1.0)] + kinds, 11)
    np.testing.assert_array_equal(first["W"], more["W"])
    assert not np.allclose(first["W"][:3, :3], more["A"])


def test_fan_in_and_init_attributes_survive_a_flow_file(tmp_path):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    w = train.parameter(f, "W", [4, 6], "normal", 0.5, fan_in=24)
    f.sum(w, name="s")
    flow.save(tmp_path / "learnable.flow")
    loaded = myelin.Flow.load(tmp_path / "learnable.flow")
    var = loaded.var_named("f/W")
    assert var.learnable and train.Init.of(var) == train.Init("normal", 0.5, 24)
    nets = [myelin.Compiler().compile(g) for g in (flow, loaded)]
    for net in nets:
        train.initialize(net, 4)
    np.testing.assert_array_equal(np.asarray(nets[0]["f/W"]), np.asarray(nets[1]["f/W"]))
    std = np.asarray(nets[0]["f/W"]).std()
    assert 0.25 / np.sqrt(24) < std < 4 * 0.5 / np.sqrt(24)


def test_learnables_are_shared_by_all_instances():
    flow, x, y = model()
    net = myelin.Compiler().compile(flow)
    train.initialize(net, 1)
    cell = net.cell("f")
    first, second = cell.instance(), cell.instance()
    xv = np.random.default_rng(0).standard_normal((2, 13)).astype(np.float32)
    for data in (first, second):
        data[x] = xv
    np.asarray(net["f/W"])[...] *= 2        # one change, seen by both instances
    first.compute()
    second.compute()
    expected = xv.astype(np.float64) @ np.asarray(net["f/W"]) + np.asarray(net["f/b"])
    for data in (first, second):
        np.testing.assert_allclose(np.asarray(data[y]), expected, rtol=1e-5, atol=1e-6)


def test_save_and_load_round_trip_through_a_flow_file(tmp_path):
    kinds = (("W", [13, 7], "orthogonal", 1.0), ("b", [7], "uniform", 1.0))
    flow, x, y = model(kinds)
    net = myelin.Compiler().compile(flow)
    train.initialize(net, 5)
    xv = np.random.default_rng(1).standard_normal((2, 13)).astype(np.float32)
    data = net.cell("f").instance()
    data[x] = xv
    data.compute()
    expected = np.asarray(data[y]).copy()
    values = {name: array.copy() for name, array in train.learnables(net).items()}

    assert sorted(train.save_parameters(net, flow)) == ["f/W", "f/b"]
    flow.save(tmp_path / "model.flow")
    saved = myelin.Flow.load(tmp_path / "model.flow")
    for name, value in values.items():
        var = saved.var_named(name)
        assert var.constant and not var.learnable
        np.testing.assert_array_equal(var.data, value)
    frozen = myelin.Compiler().compile(saved)
    assert train.learnables(frozen) == {}
    again = frozen.cell("f").instance()
    again[x] = xv
    again.compute()
    np.testing.assert_array_equal(np.asarray(again[y]), expected)

    fresh_flow = model(kinds)[0]
    fresh = myelin.Compiler().compile(fresh_flow)
    train.load_parameters(fresh, saved)
    for name, value in values.items():
        np.testing.assert_array_equal(np.asarray(fresh[name]), value)
    train.load_parameters(fresh, {name: 2 * value for name, value in values.items()})
    np.testing.assert_array_equal(np.asarray(fresh["f/b"]), 2 * values["f/b"])


def test_bad_parameters_and_values_raise():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    with pytest.raises(myelin.FlowError, match="unknown init kind 'xavier'"):
        train.parameter(f, "W", [3, 3], "xavier")
    with pytest.raises(myelin.FlowError, match="rank 2 or more"):
        train.parameter(f, "v", [3], "orthogonal")
    with pytest.raises(myelin.FlowError, match="positive sizes"):
        train.parameter(f, "W", [3, -1])
    with pytest.raises(myelin.FlowError, match="float type"):
        train.parameter(f, "W", [3], dtype=myelin.DT_INT32)
    with pytest.raises(myelin.FlowError, match="finite"):
        train.parameter(f, "W", [3], scale=float("nan"))
    assert not flow.vars

    flow, x, y = model()
    net = myelin.Compiler().compile(flow)
    with pytest.raises(myelin.InputError, match="seed"):
        train.initialize(net, -1)
    with pytest.raises(myelin.InputError, match="no values for learnable parameters f/b"):
        train.load_parameters(net, {"f/W": np.zeros((13, 7))})
    with pytest.raises(myelin.InputError, match="not learnable parameters of the network: f/x"):
        train.load_parameters(net, {"f/W": np.zeros((13, 7)), "f/b": np.zeros(7),
                                    "f/x": np.zeros((2, 13))})
    with pytest.raises(myelin.InputError, match="shape"):
        train.load_parameters(net, {"f/W": np.zeros((7, 13)), "f/b": np.zeros(7)})
