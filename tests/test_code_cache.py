"""The compile cache: code compiled once and loaded again, bound to each network's own
globals, packed weights, profile counters and worker pool; keyed so that any change in flow,
options or CPU features misses; corrupt and foreign entries ignored and rebuilt."""

import logging
import os

import numpy as np
import pytest

import myelin
from jitcheck import relative_error
from myelin import cachefiles
from myelin.codegen.llvm.codecache import CodeCache, size_limit


def mlp_flow(w1):
    """y = relu(x W1) W2 + b: W1 constant (packed at compile time), W2 and b learnable; the
    first product is large enough to be split over threads."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [256, 256])
    w1 = f.array("W1", w1)
    w2 = f.var("W2", myelin.DT_FLOAT, [256, 64])
    b = f.var("b", myelin.DT_FLOAT, [64])
    for var in (w2, b):
        var.learnable = True
    f.add(f.matmul(f.relu(f.matmul(x, w1)), w2), b, name="y")
    return flow


def compile_mlp(w1, cache, **options):
    compiler = myelin.Compiler(cache=cache, threads=2, **options)
    return compiler.compile(mlp_flow(w1)), compiler.timings


def check(net, w1, rng):
    """Set random learnable weights and inputs; compare y with the float64 result."""
    w2 = rng.standard_normal((256, 64)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    net["f/W2"], net["f/b"] = w2, b
    data = net.cell("f").instance()
    x = rng.standard_normal((256, 256)).astype(np.float32)
    data["f/x"] = x
    data.compute()
    expected = np.maximum(x.astype(np.float64) @ w1, 0) @ w2 + b
    assert relative_error(np.asarray(data["f/y"]), expected) < 1e-5
    return data


def entries(directory):
    return sorted(name for name in os.listdir(directory) if name.endswith(".code"))


@pytest.fixture
def w1():
    return np.random.default_rng().standard_normal((256, 256)).astype(np.float32)


def test_second_compile_loads_the_code_and_binds_its_own_memory(tmp_path, w1):
    rng = np.random.default_rng()
    cold, timings = compile_mlp(w1, tmp_path)
    assert "llvm" in timings and "cache" not in timings
    assert len(entries(tmp_path)) == 1
    warm, timings = compile_mlp(w1, tmp_path)
    assert "cache" in timings and "llvm" not in timings and "emit" not in timings
    # Both networks compute correctly side by side, each with its own learnable weights.
    first, second = check(cold, w1, rng), check(warm, w1, rng)
    assert not np.allclose(np.asarray(first["f/y"]), np.asarray(second["f/y"]))
    check(cold, w1, rng)
    assert len(entries(tmp_path)) == 1


def test_any_change_of_content_or_options_misses(tmp_path, w1):
    rng = np.random.default_rng()
    compile_mlp(w1, tmp_path)
    other = w1.copy()
    other[3, 5] += 1                        # other constant data: other packed weights
    net, timings = compile_mlp(other, tmp_path)
    assert "llvm" in timings
    check(net, other, rng)
    for options in [dict(opt_level=1), dict(reuse_memory=False), dict(threads=1),
                    dict(profile=True), dict(features="sse")]:
        options = {"threads": 2, **options}
        compiler = myelin.Compiler(cache=tmp_path, **options)
        check(compiler.compile(mlp_flow(w1)), w1, rng)
        assert "llvm" in compiler.timings, options
    assert len(entries(tmp_path)) == 7


def test_an_entry_for_other_cpu_features_is_not_used(tmp_path, w1, caplog):
    rng = np.random.default_rng()
    compile_mlp(w1, tmp_path, features="sse")
    (sse_entry,) = entries(tmp_path)
    # The same network for this CPU's features has another key ...
    compile_mlp(w1, tmp_path / "host")
    (host_entry,) = entries(tmp_path / "host")
    assert host_entry != sse_entry
    # ... and an SSE entry put in its place is recognized as foreign, ignored and replaced.
    os.replace(tmp_path / sse_entry, tmp_path / "host" / host_entry)
    with caplog.at_level(logging.WARNING, logger="myelin.cache"):
        net, timings = compile_mlp(w1, tmp_path / "host")
    assert "written for another key" in caplog.text
    assert "llvm" in timings
    check(net, w1, rng)
    _, timings = compile_mlp(w1, tmp_path / "host")
    assert "cache" in timings                  # the rebuilt entry is sound


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty"])
def test_a_damaged_entry_is_ignored_and_rebuilt(tmp_path, w1, caplog, damage):
    rng = np.random.default_rng()
    compile_mlp(w1, tmp_path)
    path = tmp_path / entries(tmp_path)[0]
    content = bytearray(path.read_bytes())
    if damage == "flip":
        content[-100] ^= 0x40                 # inside the payload
    elif damage == "truncate":
        content = content[:len(content) // 2]
    elif damage == "garbage":
        content = bytearray(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    else:
        content = bytearray()
    path.write_bytes(bytes(content))
    with caplog.at_level(logging.WARNING, logger="myelin.cache"):
        net, timings = compile_mlp(w1, tmp_path)
    assert "ignoring unreadable compile cache entry" in caplog.text
    assert "llvm" in timings
    check(net, w1, rng)
    _, timings = compile_mlp(w1, tmp_path)
    assert "cache" in timings


def test_profile_counters_are_bound_per_network(tmp_path, w1):
    rng = np.random.default_rng()
    first, _ = compile_mlp(w1, tmp_path, profile=True)
    second, timings = compile_mlp(w1, tmp_path, profile=True)
    assert "cache" in timings
    for _ in range(3):
        check(second, w1, rng).compute()
    assert first.cell("f").profile().calls == 0
    assert second.cell("f").profile().calls == 6


def test_disabled_cache_writes_nothing(tmp_path, monkeypatch, w1):
    monkeypatch.setenv("MYELIN_CACHE_DIR", str(tmp_path))
    _, timings = compile_mlp(w1, False)
    assert not (tmp_path / "code").exists()
    monkeypatch.setenv("MYELIN_CACHE", "off")
    compile_mlp(w1, None)
    assert not (tmp_path / "code").exists()
    monkeypatch.delenv("MYELIN_CACHE")
    compile_mlp(w1, None)                       # the default: $MYELIN_CACHE_DIR/code
    assert len(entries(tmp_path / "code")) == 1


def test_dumps_compile_afresh(tmp_path, w1):
    compile_mlp(w1, tmp_path)
    net, timings = compile_mlp(w1, tmp_path, dump=True)
    assert "llvm" in timings and "define" in net.dumps["llvm"]


def test_entries_prune_and_clear(tmp_path, w1):
    for scale in (1, 2, 3):
        compile_mlp(w1 * scale, tmp_path)
    cache = CodeCache(tmp_path)
    listed = cache.entries()
    assert len(listed) == 3 and all(info.fields["cpu"] for info in listed)
    sizes = [info.size for info in listed]
    latest = listed[0].used + 60
    os.utime(listed[-1].path, (latest, latest))  # used last: kept by a prune
    cache = CodeCache(tmp_path, limit=sizes[-1] + 1)
    cache.prune()
    assert [info.key for info in cache.entries()] == [listed[-1].key]
    assert cache.clear() == (1, sizes[-1])
    assert cache.entries() == []


def test_size_limit_and_directories(monkeypatch, tmp_path):
    assert size_limit("500M") == 500 << 20 and size_limit("2g") == 2 << 30
    assert size_limit("12345") == 12345
    assert size_limit("lots") == size_limit("")
    monkeypatch.setenv("MYELIN_CACHE_DIR", str(tmp_path / "m"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cachefiles.cache_dir("code") == str(tmp_path / "m" / "code")
    monkeypatch.delenv("MYELIN_CACHE_DIR")
    assert cachefiles.cache_dir("tuning") == str(tmp_path / "x" / "myelin" / "tuning")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert cachefiles.cache_dir("code") == str(tmp_path / "h" / ".cache" / "myelin" / "code")
    assert len(cachefiles.source_fingerprint()) == 64
