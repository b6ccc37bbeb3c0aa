"""The compile cache: code compiled once and loaded again, bound to each network's own
globals, packed weights, profile counters and worker pool; keyed so that any change in flow,
options or CPU features misses; corrupt, foreign and planted entries ignored and rebuilt, in
a worker process where a mistake could crash (with the cases of ``scripts/fuzz_cache.py``);
directories others can write not used; entries written durably."""

import io
import json
import logging
import os
import stat
import struct
import sys

import numpy as np
import pytest

import myelin
from jitcheck import relative_error
from myelin import cachefiles
from myelin.cli import main as cli_main
from myelin.codegen.llvm import codecache, kernelfunc
from myelin.codegen.llvm.codecache import CodeCache, size_limit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "scripts"))
import fuzz_cache  # noqa: E402


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


def count_emitted(monkeypatch):
    """The names of the steps whose kernels are emitted from now on (a list that grows)."""
    emitted, emit = [], kernelfunc._emit
    monkeypatch.setattr(kernelfunc, "_emit",
                        lambda step, *args: emitted.append(step.name) or emit(step, *args))
    return emitted


def test_a_network_of_known_kernels_emits_none_of_them(tmp_path, w1, monkeypatch):
    """Other weights miss the network's entry, but each kernel is found by its signature:
    none is emitted, and the network computes with its own weights."""
    rng = np.random.default_rng()
    compile_mlp(w1, tmp_path)
    emitted = count_emitted(monkeypatch)
    other = rng.standard_normal(w1.shape).astype(np.float32)
    net, timings = compile_mlp(other, tmp_path)
    assert "emit" in timings and "cache" not in timings and emitted == []
    check(net, other, rng)
    myelin.Compiler(cache=tmp_path, threads=1).compile(mlp_flow(other))
    assert emitted                            # (threads shape the code: new signatures)


def test_a_kernel_whose_helper_is_gone_is_emitted_again(tmp_path, w1, monkeypatch):
    rng = np.random.default_rng()
    compile_mlp(w1, tmp_path)
    infos = CodeCache(tmp_path / "kernels").entries()
    helpers = {name for info in infos for name in info.description.get("helpers", [])}
    assert helpers                            # (the products' tile functions)
    for info in infos:
        if info.description["kernel"] in helpers and "helpers" not in info.description:
            os.remove(info.path)
    emitted = count_emitted(monkeypatch)
    other = rng.standard_normal(w1.shape).astype(np.float32)
    net, _ = compile_mlp(other, tmp_path)
    assert emitted
    check(net, other, rng)


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
    compile_mlp(w1, tmp_path)
    (host_entry,) = set(entries(tmp_path)) - {sse_entry}
    # ... and an SSE entry put in its place is recognized as foreign, ignored and replaced.
    os.replace(tmp_path / sse_entry, tmp_path / host_entry)
    with caplog.at_level(logging.WARNING, logger="myelin.cache"):
        net, timings = compile_mlp(w1, tmp_path)
    assert "written for another key" in caplog.text
    assert "llvm" in timings
    check(net, w1, rng)
    _, timings = compile_mlp(w1, tmp_path)
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
    assert "ignoring compile cache entry" in caplog.text
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
    kernels = cache.kernels.entries()        # the kernels' entries, shared by the three
    assert kernels and all(info.description["kernel"] for info in kernels)
    assert cache.clear() == (1 + len(kernels), sizes[-1] + sum(info.size for info in kernels))
    assert cache.entries() == [] and cache.kernels.entries() == []


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


# Damaged, planted and inconsistent entries, compiled from in a worker process.
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(cache directory, {network: (entry file, right outputs, entry bytes)}, its secret) of
    the fuzz script's networks."""
    directory = str(tmp_path_factory.mktemp("corpus"))
    made = fuzz_cache.make_corpus(directory)
    entries = {}
    for name, (entry, expected) in made.items():
        with open(os.path.join(directory, entry), "rb") as file:
            entries[name] = (entry, expected, file.read())
    with open(os.path.join(directory, cachefiles.SECRET), "rb") as file:
        return directory, entries, file.read()


@pytest.fixture(scope="module")
def worker(corpus):
    directory, entries, _ = corpus
    process = fuzz_cache.Worker(directory, {name: entries[name][:2] for name in entries})
    yield lambda name, data, model="raw": process.run((0, name, data, model, ""), 120)
    process.stop()


def resigned(data, secret, edit):
    """Entry ``data`` with ``edit(header)`` applied to its header, signed with ``secret``."""
    header, rest = fuzz_cache.split(data)
    edit(header)
    return fuzz_cache.join(json.dumps(header).encode(), rest, secret)


def test_mutated_entries_are_misses_never_crashes(corpus, worker):
    """30 cases of the fuzz script: every change without the key is a miss; every signed
    header edit a miss or a hit that computes right."""
    _, entries, secret = corpus
    for case in fuzz_cache.make_cases(entries, secret, 30, seed=11):
        outcome, detail = worker(case[1], case[2], case[3])
        assert outcome in ("hit", "miss"), (case[1:], outcome, detail)
        assert case[3] == "signed" or outcome == "miss", (case[1:], outcome, detail)


def test_an_edited_symbol_is_a_miss_not_a_crash(corpus, worker):
    # Reported: the checksum covered only the payload, and a symbol renamed in the header
    # made every later compile of the model crash.
    _, entries, secret = corpus
    data = entries["mlp"][2]

    def rename(header):
        header["symbols"][0][0] = "myelin.ext.99"

    kept = bytearray(resigned(data, secret, rename))
    kept[20:52] = data[20:52]                            # the old signature
    outcome, detail = worker("mlp", bytes(kept))
    assert outcome == "miss" and "signature does not match" in detail
    # Signed with the cache's own key, as a writer's bug would leave it: the name is not the
    # one its target gives; with the symbol left out of the table, the code's symbol is bound
    # by nothing, which LLVM's loader would end the process for.
    outcome, detail = worker("mlp", resigned(data, secret, rename), "signed")
    assert outcome == "miss" and "bad symbol name" in detail
    def drop_global(header):     # (the cells' code addresses the globals; kernels do not)
        header["symbols"] = [item for item in header["symbols"] if item[1][0] != "global"]

    outcome, detail = worker("mlp", resigned(data, secret, drop_global), "signed")
    assert outcome == "miss" and "which nothing binds" in detail

    def resize(header):          # a target of another size than the network's
        header["symbols"][0][2] += 4

    outcome, detail = worker("mlp", resigned(data, secret, resize), "signed")
    assert outcome == "miss" and "bytes here" in detail


def test_swapped_targets_of_the_same_size_are_a_miss(corpus, worker):
    # Reported: a signed entry whose symbols for two targets of the same size were swapped
    # computed wrong outputs (nothing in the entry told them apart). Each symbol's name now
    # says what it addresses.
    _, entries, secret = corpus

    def swap(header):            # the two functions' packed weights, both 16x16 float32
        first, second = [item for item in header["symbols"] if item[1][0] == "array"]
        assert first[2] == second[2] >= 16 * 16 * 4        # (in whole panels of the target)
        first[1], second[1] = second[1], first[1]

    outcome, detail = worker("two", resigned(entries["two"][2], secret, swap), "signed")
    assert outcome == "miss" and "bad symbol name" in detail, detail


def test_corrupt_lengths_are_misses(corpus, worker):
    # Reported: corrupt length fields raised OverflowError instead of a rebuild.
    _, entries, secret = corpus
    data = bytearray(entries["cnn"][2])
    for length in (2**64 - 1, 2**63, len(data)):
        struct.pack_into("<Q", data, 12, length)
        outcome, detail = worker("cnn", bytes(data))
        assert outcome == "miss" and "header length" in detail, detail

    def huge(header):
        header["arrays"][0][1] = [2**62, 2**62]
        header["object"] = 10**400

    outcome, detail = worker("cnn", resigned(entries["cnn"][2], secret, huge), "signed")
    assert outcome == "miss" and "bad object size" in detail


def test_a_planted_entry_is_rejected(corpus, worker):
    # Reported: an entry planted with a recomputed checksum was executed. Who lacks the
    # cache's key cannot sign one that is accepted.
    _, entries, _ = corpus
    outcome, detail = worker("two", resigned(entries["two"][2], os.urandom(32),
                                             lambda header: None))
    assert outcome == "miss" and "signature does not match" in detail
    outcome, detail = worker("two", entries["math"][2])      # another network's entry
    assert outcome == "miss" and "written for another key" in detail
    for special in ("symlink", "fifo", "group-writable"):
        outcome, detail = worker("two", special)
        assert outcome == "miss", (special, detail)


def test_cache_list_shows_a_malformed_entry_on_one_line(tmp_path, capsys):
    # Reported: `myelin cache list` printed a traceback for a malformed entry.
    for name in ("mlp", "cnn"):
        fuzz_cache.compile_network(name, tmp_path)
    signed, damaged = sorted(entry for entry in os.listdir(tmp_path) if entry.endswith(".code"))
    secret = (tmp_path / cachefiles.SECRET).read_bytes()

    def scramble(header):        # what `cache list` shows, of the wrong types
        header["fields"]["triple"] = 5
        header["description"] = {"cells": "f", "steps": {}}

    (tmp_path / signed).write_bytes(resigned((tmp_path / signed).read_bytes(), secret,
                                             scramble))
    (tmp_path / damaged).write_bytes(b"MYELINC\0" + bytes(100))
    out = io.StringIO()
    assert cli_main(["cache", "list", "--dir", str(tmp_path)], out=out) == 0
    assert "Traceback" not in capsys.readouterr().err
    lines = out.getvalue().splitlines()
    assert len(lines) == 5 and "kernels" in lines[1]      # (their count, then the networks)
    assert any(line.startswith(f"  {signed[:12]}") and
               line.endswith("(not used: its header has a bad key)") for line in lines)
    assert any(line.startswith(f"  {damaged[:12]}") and
               line.endswith("(not used: its format is 0, this myelin reads 3)")
               for line in lines)


@pytest.mark.parametrize("problem", ["group-writable", "another owner"])
def test_a_directory_others_can_write_is_not_used(tmp_path, w1, caplog, monkeypatch, problem):
    rng = np.random.default_rng()
    compile_mlp(w1, tmp_path)
    if problem == "group-writable":
        os.chmod(tmp_path, 0o770)
    else:
        monkeypatch.setattr(os, "geteuid", lambda: os.stat(tmp_path).st_uid + 1)
    with caplog.at_level(logging.WARNING, logger="myelin.cache"):
        for _ in range(2):
            net, timings = compile_mlp(w1, tmp_path)
            assert "llvm" in timings                     # the entry there is not read ...
            check(net, w1, rng)
    assert len(entries(tmp_path)) == 1                   # ... and nothing is written
    (warning,) = caplog.messages                         # said once
    assert warning.startswith(f"not using the cache {tmp_path}: it is ") and (
        "writable by group or others (mode 0770)" if problem == "group-writable"
        else "owned by user") in warning


def test_a_key_others_can_read_is_replaced(tmp_path, w1, caplog):
    rng = np.random.default_rng()
    compile_mlp(w1, tmp_path)
    key = tmp_path / cachefiles.SECRET
    os.chmod(key, 0o644)
    old = key.read_bytes()
    with caplog.at_level(logging.WARNING, logger="myelin.cache"):
        net, timings = compile_mlp(w1, tmp_path)
    assert "llvm" in timings and "signature does not match" in caplog.text
    assert "replacing the key of the cache" in caplog.text
    assert key.read_bytes() != old and os.stat(key).st_mode & 0o777 == 0o600
    check(net, w1, rng)
    assert "cache" in compile_mlp(w1, tmp_path)[1]      # signed with the new key


def test_entries_are_written_atomically_and_only_the_key_durably(tmp_path, monkeypatch):
    synced = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda handle: synced.append(os.fstat(handle)) or
                        fsync(handle))
    assert cachefiles.write_atomic(str(tmp_path / "d"), "entry", [b"ab", b"cd"])
    assert (tmp_path / "d" / "entry").read_bytes() == b"abcd"
    assert os.stat(tmp_path / "d").st_mode & 0o777 == 0o700
    assert synced == []                                 # an entry is not flushed
    assert os.listdir(tmp_path / "d") == ["entry"]      # no temporary file left
    # The key (made by the first signed write): its data, then the directory with its name.
    assert cachefiles.write_signed(str(tmp_path / "e"), "signed", b"MYELINTT", 1, b"{}")
    assert [stat.S_ISREG(status.st_mode) for status in synced] == [True, False]
    assert synced[1].st_ino == os.stat(tmp_path / "e").st_ino


def test_a_damaged_entry_is_a_miss_compiled_again(tmp_path, w1, caplog):
    """What a power loss can leave of an entry that was never flushed (its name, with its
    data cut short or zeros) is rejected by its signature: a miss, compiled and replaced."""
    compile_mlp(w1, tmp_path)
    (entry,) = entries(tmp_path)
    size = os.path.getsize(tmp_path / entry)
    (tmp_path / entry).write_bytes(bytes(size // 2))
    with caplog.at_level(logging.WARNING, logger="myelin.cache"):
        net, timings = compile_mlp(w1, tmp_path)
    assert "llvm" in timings and "ignoring compile cache entry" in caplog.text
    assert "is not an entry of this cache" in caplog.text       # (its magic number is zeros)
    check(net, w1, np.random.default_rng())
    assert "cache" in compile_mlp(w1, tmp_path)[1]      # replaced by a whole entry


def test_stale_temporary_files_are_pruned(tmp_path, w1, monkeypatch):
    # Writers killed before renaming their temporary file leave it: a prune removes those
    # older than STALE_SECONDS, not younger ones, which a writer may still be writing.
    compile_mlp(w1, tmp_path)
    (entry,) = entries(tmp_path)
    stale, fresh, key = (tmp_path / f".{entry}.a1b2c3.tmp", tmp_path / f".{entry}.d4e5f6.tmp",
                         tmp_path / f"{cachefiles.SECRET}.g7h8i9.tmp")
    for path in (stale, fresh, key):
        path.write_bytes(b"half an entry")
    old = os.stat(fresh).st_mtime - cachefiles.STALE_SECONDS - 5
    for path in (stale, key):
        os.utime(path, (old, old))
    (tmp_path / "other.tmp").write_bytes(b"")            # not a temporary file of a writer
    os.utime(tmp_path / "other.tmp", (old, old))
    CodeCache(tmp_path).prune()
    assert sorted(os.listdir(tmp_path)) == sorted([cachefiles.SECRET, entry, fresh.name,
                                                   "other.tmp", codecache.KERNELS])
    # The first write of a process into a directory removes them too (every cache's).
    os.utime(fresh, (old, old))
    monkeypatch.setattr(cachefiles, "_swept", set())     # (as in a new process)
    assert cachefiles.write_atomic(str(tmp_path), "entry", [b"x"])
    assert not fresh.exists() and (tmp_path / "entry").exists()


@pytest.mark.parametrize("symbol, found", [("memcpy", True), ("myelin_no_such_symbol", False)])
def test_code_calling_the_c_library_is_kept(tmp_path, caplog, symbol, found):
    """LLVM turns copy loops into calls of memcpy: an entry using a C library function the
    process has loads; one using a symbol nothing has is a miss."""
    import llvmlite.ir as ir

    from myelin.codegen.llvm import engine, irutil, target

    module = ir.Module("calls")
    callee = ir.Function(module, ir.FunctionType(irutil.PTR, [irutil.PTR] * 2 + [irutil.I64]),
                         symbol)
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [irutil.PTR] * 2), "copy")
    b = ir.IRBuilder(function.append_basic_block())
    b.call(callee, [*function.args, irutil.i64(64)])
    b.ret_void()
    code, _ = engine.compile_object(module, target.host())
    cache = CodeCache(str(tmp_path))
    fields = {"triple": "t", "cpu": "c", "features": "f", "symbol": symbol}
    cache.store(fields, code, [], [])
    assert (cache.load(fields) is not None) == found
    assert ("which nothing binds" in caplog.text) != found
