"""Kernel choice by measurement (``Compiler(tune=True)``): results, choices and the disk cache
(signed entries; damaged, unsigned, planted and foreign ones measured again, with the cases of
``scripts/fuzz_caches.py``; directories others can write not used)."""

import json
import logging
import os
import sys

import numpy as np
import pytest

import myelin
from jitcheck import random_array, relative_error
from myelin import cachefiles, reference
from myelin.codegen.llvm import target as targets
from myelin.codegen.llvm import tuning
from myelin.codegen.llvm.kernels import matmul

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "scripts"))
import fuzz_cache  # noqa: E402
import fuzz_caches  # noqa: E402

TOLERANCE = 3e-5
TUNED = ["const/MatMul", "var/MatMul", "conv/Conv"]


def _flow():
    """A MatMul by a constant weight, a MatMul of two variables and a Conv, each above the
    tuning threshold, and a MatMul below it."""
    rng = np.random.default_rng()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "const")
    f.matmul(f.var("x", "float32", [40, 256]), f.array("w", random_array(rng, "float32",
                                                                         (256, 200))))
    f = myelin.Builder(flow, "var")
    f.matmul(f.var("a", "float32", [100, 96]), f.var("b", "float32", [96, 130]))
    f = myelin.Builder(flow, "conv")    # (12 input channels: not in blocks of 8, ConvGemm)
    f.op("Conv", [f.var("x", "float32", [1, 12, 17, 17]),
                  f.array("w", random_array(rng, "float32", (24, 12, 3, 3)))],
         name="y", attrs=dict(strides=[1, 1], pads=[1, 1, 1, 1]))
    f = myelin.Builder(flow, "small")
    f.matmul(f.var("a", "float32", [4, 8]), f.var("b", "float32", [8, 8]))
    return flow


def _compile_and_check(flow, **options):
    """Compile ``flow`` with ``options``, check every function against the float64
    reference, and return the network's steps by name."""
    net = myelin.Compiler(tune=True, **options).compile(flow)
    rng = np.random.default_rng()
    for func in flow.funcs.values():
        data = net.cell(func.name).instance()
        inputs = {var: random_array(rng, var.dtype, var.shape) for var in func.ops[0].inputs
                  if not var.constant}
        for var, value in inputs.items():
            data[var] = value
        data.compute()
        for name, want in reference.run(flow, func.name, inputs).items():
            error = relative_error(np.asarray(data[name]), want)
            assert error <= TOLERANCE, f"{func.name}: {name} relative error {error:.3g}"
    return {step.name: step for cell in net.cells for step in cell.steps}, net


@pytest.fixture
def measured(monkeypatch):
    """The names of the steps measured; measuring says the last option is the fastest."""
    names = []

    def fake(step, options, *args):
        names.append(step.name)
        return [1.0] * (len(options) - 1) + [0.5]

    monkeypatch.setattr(tuning, "measure", fake)
    return names


def _entries(directory):
    """{file name: entry} of the tuning cache ``directory``."""
    return {name: json.loads(cachefiles.read_signed(str(directory), str(directory / name),
                                                    tuning.MAGIC, tuning.FORMAT,
                                                    tuning.MAX_ENTRY)[0])
            for name in os.listdir(directory) if name.endswith(tuning.SUFFIX)}


def test_tuned_results_match_reference(tmp_path, caplog):
    flow = _flow()
    with caplog.at_level(logging.INFO, logger="myelin.tuning"):
        steps, net = _compile_and_check(flow, tuning_cache=tmp_path)
    logged = [r.getMessage() for r in caplog.records if r.name == "myelin.tuning"]
    assert sorted(m.split()[1] for m in logged) == sorted(TUNED)
    assert all(m.count(" ms") >= 2 for m in logged)   # every option's time is shown
    assert steps["small/MatMul"].choice == {}
    entries = _entries(tmp_path)
    assert len(entries) == 3
    for name in TUNED:
        step = steps[name]
        options = step.kernel.choices(step, net.target)
        assert step.choice in options
        entry = [e for e in entries.values() if e["key"]["op"] == step.type
                 and e["key"]["inputs"][1][1] == list(step.inputs[1].shape)]
        assert [e["choice"] for e in entry] == [step.choice]
        seconds = [s for _, s in entry[0]["seconds"]]
        assert seconds[0] > 0 and len(seconds) == len(options)


def test_the_fastest_option_is_chosen_and_cached(tmp_path, measured):
    flow = _flow()
    steps, net = _compile_and_check(flow, tuning_cache=tmp_path)
    assert sorted(measured) == sorted(TUNED)
    for name in TUNED:     # the last option, not the default, passes the reference check
        assert steps[name].choice == steps[name].kernel.choices(steps[name], net.target)[-1]
    measured.clear()
    again, _ = _compile_and_check(flow, tuning_cache=tmp_path)
    assert measured == []
    assert {name: again[name].choice for name in TUNED} == {
        name: steps[name].choice for name in TUNED}


def _text(option):
    return json.dumps(option, sort_keys=True)


def _framed(entry, key):
    """``entry`` as the tuning cache frames it, signed with ``key`` (None: unsigned)."""
    frame = tuning.MAGIC + tuning.FORMAT.to_bytes(4, "little")
    return fuzz_cache.join(json.dumps(entry).encode(), b"", key, frame)


def _corrupt(entry, key):
    data = bytearray(_framed(entry, key))
    data[-10] ^= 0x04
    return bytes(data)


def _previous_format(entry, key):       # unsigned JSON, as entries were written before
    return json.dumps(entry).encode()


def _planted(entry, key):               # signed with a key other than the cache's
    entry["choice"] = {"vectors": 99, "rows": 1}
    return _framed(entry, os.urandom(32))


def _foreign(entry, key):               # signed, but for another key
    entry["key"]["features"] = "+sse2"
    return _framed(entry, key)


def _withdrawn(entry, key):             # signed, naming an option not offered
    entry["choice"] = {"vectors": 99, "rows": 1}
    return _framed(entry, key)


@pytest.mark.parametrize("spoil", [_corrupt, _previous_format, _planted, _foreign, _withdrawn])
def test_unsound_cache_entries_are_measured_again(tmp_path, measured, spoil, caplog):
    flow = _flow()
    _compile_and_check(flow, tuning_cache=tmp_path)
    key = (tmp_path / cachefiles.SECRET).read_bytes()
    for name, entry in _entries(tmp_path).items():
        (tmp_path / name).write_bytes(spoil(entry, key))
    measured.clear()
    with caplog.at_level(logging.WARNING):
        steps, net = _compile_and_check(flow, tuning_cache=tmp_path)
    assert sorted(measured) == sorted(TUNED)
    assert caplog.text.count("ignoring tuning cache entry") == 3
    rewritten = _entries(tmp_path)
    assert len(rewritten) == 3
    assert sorted(map(_text, (e["choice"] for e in rewritten.values()))) == sorted(
        _text(steps[name].choice) for name in TUNED)
    assert not any(e["key"]["features"] == "+sse2" for e in rewritten.values())


@pytest.mark.parametrize("problem", ["group-writable", "another owner"])
def test_a_directory_others_can_write_is_not_used(tmp_path, measured, caplog, monkeypatch,
                                                  problem):
    flow = _flow()
    _compile_and_check(flow, tuning_cache=tmp_path)
    if problem == "group-writable":
        os.chmod(tmp_path, 0o770)
    else:
        monkeypatch.setattr(os, "geteuid", lambda: os.stat(tmp_path).st_uid + 1)
    before = sorted(os.listdir(tmp_path))
    measured.clear()
    with caplog.at_level(logging.WARNING, logger="myelin.cache"):
        _compile_and_check(flow, tuning_cache=tmp_path, cache=False)
    assert sorted(measured) == sorted(TUNED)            # the answers there are not read ...
    assert sorted(os.listdir(tmp_path)) == before       # ... and nothing is written
    (warning,) = caplog.messages                        # said once
    assert warning.startswith(f"not using the cache {tmp_path}: it is ")


def test_mutated_entries_are_misses_never_errors():
    """60 cases of the fuzz script: damaged, unsigned, planted, foreign and special files, and
    header edits signed with the cache's key: no exception, hang or silent miss; a raw change
    never used, a signed edit a miss or the right choice."""
    counts, _, defects = fuzz_caches.campaign(fuzz_caches.TuningSubject(), 60, seed=3)
    assert defects == []
    assert counts["raw", "miss"] > 30 and counts["raw", "hit"] == 0


@pytest.mark.parametrize("option,first,second", [("features", "sse", "host"),
                                                 ("threads", 1, 2)])
def test_other_targets_do_not_share_entries(tmp_path, measured, option, first, second):
    if option == "features" and targets.host(first).features == targets.host(second).features:
        pytest.skip("the presets give the same features on this CPU")
    flow = _flow()
    _compile_and_check(flow, tuning_cache=tmp_path, **{option: first})
    _compile_and_check(flow, tuning_cache=tmp_path, **{option: second})
    assert sorted(measured) == sorted(TUNED * 2)
    assert len(_entries(tmp_path)) == 6


def test_no_cache_writes_nothing(tmp_path, monkeypatch, measured):
    monkeypatch.setenv("MYELIN_CACHE_DIR", str(tmp_path))
    flow = _flow()
    _compile_and_check(flow, tuning_cache=False)
    _compile_and_check(flow, tuning_cache=False)
    assert sorted(measured) == sorted(TUNED * 2)
    assert not (tmp_path / "tuning").exists()
    _compile_and_check(flow)       # the default cache: $MYELIN_CACHE_DIR/tuning
    assert len(_entries(tmp_path / "tuning")) == 3


def test_fastest_keeps_the_default_unless_clearly_beaten():
    options = [{"rows": 6}, {"rows": 4}, {"rows": 2}]
    assert tuning.fastest(options, [1.0, 0.99, None]) == options[0]
    assert tuning.fastest(options, [1.0, 0.9, 0.8]) == options[2]
    assert tuning.fastest(options, [1.0, None, 0.5]) == options[2]


def test_measure_stops_compiling_at_the_budget():
    flow = _flow()
    net = myelin.Compiler().compile(flow)
    (step,) = net.cell("var").steps
    options = step.kernel.choices(step, net.target)
    seconds = tuning.measure(step, options, net.target, budget=0)
    assert seconds[0] > 0 and seconds[1:] == [None] * (len(options) - 1)


def test_a_product_folding_its_batch_into_rows_is_tuned_for_those_rows(tmp_path, measured):
    """x[seq, 1, d] W (a sequence-first transformer's projection) computes as one product of
    seq rows: its options are tiles for seq rows, not for the one row of each batch entry."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    f.matmul(f.var("x", "float32", [96, 1, 128]),
             f.array("w", random_array(np.random.default_rng(), "float32", (128, 160))))
    steps, net = _compile_and_check(flow, tuning_cache=tmp_path)
    step = steps["f/MatMul"]
    options = step.kernel.choices(step, net.target)
    assert options[0]["rows"] == matmul.tile_rows(net.target, 96) > 1
    assert all(option["rows"] > 1 for option in options) and step.choice == options[-1]


def test_the_first_option_of_a_narrow_product_is_its_default_tiling():
    """B of fewer columns than a vector's lanes: the default tile is one vector wide, and
    the tuner's first option (the one it keeps unless another is faster) is that tile."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    f.matmul(f.var("x", "float32", [96, 128]),
             f.array("w", random_array(np.random.default_rng(), "float32", (128, 3))))
    net = myelin.Compiler().compile(flow)
    (step,) = net.cell("f").steps
    options = step.kernel.choices(step, net.target)
    assert options[0] == {"vectors": 1, "rows": matmul.tile_rows(net.target, 96, 1)}
    assert len(options) == len({tuple(sorted(option.items())) for option in options})
