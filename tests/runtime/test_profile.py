"""The profiler compiled into cells with Compiler(profile=True): counts, shares, rates."""

import threading
import time

import numpy as np
import pytest

import myelin
from jitcheck import guide_flow
from myelin.runtime.profile import Profile, ProfileRow, cycles_per_second


def numpy_guide(xv, W, b):
    z = np.maximum(xv.astype(np.float64) @ W.data + b.data, 0)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def profiled_guide(rng, **options):
    flow, x, y, W, b = guide_flow(rng)
    net = myelin.Compiler(profile=True, threads=1, **options).compile(flow)
    return net, net.cell("f"), x, y, W, b


def test_every_step_counts_every_call_and_shares_add_up():
    rng = np.random.default_rng()
    _, cell, x, y, W, b = profiled_guide(rng)
    data = cell.instance()
    calls = 37
    for _ in range(calls):
        value = rng.random((1, 64)).astype(np.float32)
        data[x] = value
        data.compute()
        # Profiling leaves the results as they were.
        np.testing.assert_allclose(np.asarray(data[y]), numpy_guide(value, W, b),
                                   rtol=1e-5, atol=1e-7)
    profile = cell.profile()
    assert isinstance(profile, Profile) and profile.cell == "f" and profile.calls == calls
    # One row per step with code, in order, each counted on every call.
    coded = [i for i, step in enumerate(cell.steps) if not step.noop]
    assert [row.index for row in profile.steps] == coded and len(coded) >= 2
    for row in profile.steps:
        step = cell.steps[row.index]
        assert (row.kind, row.step, row.type) == ("step", step.name, step.type)
        assert row.kernel.startswith(step.kernel.kernel_name(step))
        assert row.calls == calls and row.cycles > 0
        assert row.us_per_call == pytest.approx(row.seconds / calls * 1e6)
        assert row.seconds == pytest.approx(row.cycles / profile.rate)
    # The steps lie inside the calls; the overhead is the rest.
    step_cycles = sum(row.cycles for row in profile.steps)
    assert step_cycles <= profile.call_cycles
    assert profile.overhead.cycles == profile.call_cycles - step_cycles
    assert profile.total.cycles == profile.call_cycles
    assert profile.overhead.calls == profile.total.calls == calls
    # Shares of the total: the step rows and the overhead add up to 100.
    shares = sum(row.percent for row in profile.steps) + profile.overhead.percent
    assert shares == pytest.approx(100.0)
    assert profile.steps[-1].cumulative + profile.overhead.percent == pytest.approx(100.0)
    cumulative = [row.cumulative for row in profile.steps]
    assert cumulative == sorted(cumulative)
    assert profile.total.percent == 100.0
    # The matrix product counts its operations: 2 * 64 * 256 multiply-adds and more.
    matmul = next(row for row in profile.steps if "MatMul" in row.kernel)
    assert matmul.flops >= 2 * 64 * 256 and matmul.gflops > 0
    assert matmul.gflops == pytest.approx(matmul.flops * calls / matmul.seconds / 1e9)
    assert profile.total.gflops > 0 and profile.overhead.gflops == 0


def test_rows_as_data_and_the_table():
    rng = np.random.default_rng()
    _, cell, x, y, W, b = profiled_guide(rng)
    data = cell.instance()
    data[x] = rng.random((1, 64))
    for _ in range(5):
        data.compute()
    profile = cell.profile()
    rows = profile.rows()
    assert all(isinstance(row, ProfileRow) for row in rows)
    assert [row.kind for row in rows] == ["step"] * len(profile.steps) + ["overhead", "total"]
    dicts = profile.as_dicts()
    assert dicts[0]["step"] == rows[0].step and dicts[-1]["kernel"] == "TOTAL"
    assert set(dicts[0]) >= {"step", "type", "kernel", "calls", "us_per_call", "percent",
                             "cumulative", "gflops"}
    text = str(profile)
    lines = text.splitlines()
    assert lines[0].startswith("Profile of cell f: 5 calls")
    assert "percent" in lines[2] and "GFLOP/s" in lines[2] and "kernel" in lines[2]
    for row in profile.steps:
        line = next(line for line in lines if f"| {row.step} ({row.type})" in line)
        assert row.kernel in line and f"{row.percent:6.2f}%" in line
        assert f"{row.us_per_call:10.3f} us" in line
    assert any(line.endswith("| entry & exit") for line in lines)
    total = next(line for line in lines if "TOTAL" in line)
    assert total.startswith("| 100.00% | 100.00% |")
    assert "<Profile of cell f: 5 calls" in repr(profile)


def test_reset_profile_zeroes_the_counters():
    rng = np.random.default_rng()
    _, cell, x, _, _, _ = profiled_guide(rng)
    data = cell.instance()
    data[x] = rng.random((1, 64))
    for _ in range(3):
        data.compute()
    assert cell.profile().calls == 3
    cell.reset_profile()
    empty = cell.profile()
    assert empty.calls == 0 and empty.call_cycles == 0
    assert all(row.calls == 0 and row.cycles == 0 and row.percent == 0 for row in empty.rows())
    assert "0 calls" in str(empty)
    data.compute()
    again = cell.profile()
    assert again.calls == 1 and all(row.calls == 1 for row in again.steps)


def test_profile_of_an_unprofiled_cell_is_an_input_error():
    flow, x, y, W, b = guide_flow(np.random.default_rng())
    cell = myelin.Compiler(threads=1).compile(flow).cell("f")
    assert not cell.profiling
    with pytest.raises(myelin.InputError, match=r"Compiler\(profile=True\)"):
        cell.profile()
    with pytest.raises(myelin.InputError, match=r"Compiler\(profile=True\)"):
        cell.reset_profile()


def test_instances_on_threads_count_every_call():
    rng = np.random.default_rng()
    _, cell, x, y, W, b = profiled_guide(rng)
    assert cell.profiling
    inputs = [rng.random((1, 64)).astype(np.float32) for _ in range(2)]
    per_thread = 400
    errors = []

    def work(k):
        try:
            data = cell.instance()
            data[x] = inputs[k]
            for _ in range(per_thread):
                data.compute()
            np.testing.assert_allclose(np.asarray(data[y]), numpy_guide(inputs[k], W, b),
                                       rtol=1e-5, atol=1e-7)
        except Exception as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    profile = cell.profile()
    assert profile.calls == 2 * per_thread
    assert all(row.calls == 2 * per_thread for row in profile.steps)
    assert sum(row.cycles for row in profile.steps) <= profile.call_cycles


def test_profiling_code_only_when_asked():
    flow, *_ = guide_flow(np.random.default_rng())
    plain = myelin.Compiler(dump=True, threads=1).compile(flow)
    assert "readcyclecounter" not in plain.dumps["llvm"]
    assert "atomicrmw" not in plain.dumps["llvm"]
    profiled = myelin.Compiler(dump=True, threads=1, profile=True).compile(flow)
    assert "@llvm.readcyclecounter()" in profiled.dumps["llvm"]
    assert "atomicrmw add" in profiled.dumps["llvm"]


def test_a_call_that_fails_on_bad_input_is_still_counted():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    table = f.var("table", "float32", [4, 3])
    indices = f.var("indices", "int32", [2])
    rows = f.gather(table, indices)
    f.tanh(rows, name="y")
    cell = myelin.Compiler(profile=True, threads=1).compile(flow).cell("f")
    data = cell.instance()
    data[table] = np.ones((4, 3), np.float32)
    data[indices] = np.array([0, 7], np.int32)
    with pytest.raises(myelin.InputError, match="Gather"):
        data.compute()
    profile = cell.profile()
    assert profile.calls == 1
    # The gather stopped the call, so no step after it ran to its end.
    gather = next(row for row in profile.steps if row.type == "Gather")
    assert all(row.calls == 0 for row in profile.steps if row.index >= gather.index)
    data[indices] = np.array([0, 3], np.int32)
    data.compute()
    profile = cell.profile()
    assert profile.calls == 2 and gather.index is not None
    assert all(row.calls == 1 for row in profile.steps if row.index >= gather.index)
    assert sum(row.cycles for row in profile.steps) <= profile.call_cycles


def test_cycles_become_seconds_at_the_measured_rate():
    """The calibrated rate is cached, and the time the cell measured lies within the wall
    time of the calls (most of it, for a cell that works much longer than a call costs)."""
    rate = cycles_per_second()
    assert 1e7 < rate < 1e11 and cycles_per_second() == rate
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    a = f.var("a", "float32", [64, 256])
    f.matmul(a, f.array("W", rng.random((256, 256)).astype(np.float32)), name="y")
    cell = myelin.Compiler(profile=True, threads=1).compile(flow).cell("f")
    data = cell.instance()
    data[a] = rng.random((64, 256))
    data.compute()
    cell.reset_profile()
    start = time.perf_counter()
    for _ in range(20):
        data.compute()
    wall = time.perf_counter() - start
    measured = cell.profile().total.seconds
    assert 0.25 * wall < measured <= wall * 1.01
