"""The CUDA module cache: memory and disk hits, keys, $MYELIN_CACHE=off; signed entries:
damaged, unsigned, planted and foreign entries and special files recompiled (with the cases of
``scripts/fuzz_caches.py``), directories others can write not used."""

import json
import logging
import os
import sys

import pytest

import emulator
import myelin
from myelin.codegen.cuda import module, planner
from myelin.codegen.cuda.modulecache import ModuleCache
from myelin.codegen.cuda.target import CudaTarget

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "scripts"))
import fuzz_cache  # noqa: E402
import fuzz_caches  # noqa: E402


@pytest.fixture
def kernels():
    """The kernels of a small flow (and NVRTC, or the test skips)."""
    emulator.require_nvrtc()
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    f.tanh(f.exp(f.var("x", "float32", [8])))
    return planner.plan(flow).kernels()


def entries(directory):
    return sorted(directory.glob("*.cubin"))


def test_memory_and_disk_hits(kernels, tmp_path):
    target = CudaTarget("sm_80")
    cache = ModuleCache(tmp_path)
    first = module.build(kernels, target, cache)
    assert first.origin == "nvrtc"
    key = cache.key(cache.fields(first.source, "sm_80"))
    assert entries(tmp_path) == [tmp_path / f"{key}.cubin"]
    again = module.build(kernels, target, cache)
    assert again.origin == "memory" and again.binary is first.binary
    fresh = ModuleCache(tmp_path)
    loaded = module.build(kernels, target, fresh)
    assert loaded.origin == "disk" and loaded.binary == first.binary
    assert module.build(kernels, target, fresh).origin == "memory"


def test_key_changes_with_arch_options_and_source(kernels, tmp_path):
    source = module.module_source(kernels)
    variants = [(source, "sm_80", ()), (source, "sm_90", ()), (source, "sm_80", ("-lineinfo",)),
                (source + "\n", "sm_80", ())]
    keys = {ModuleCache.key(ModuleCache.fields(*variant)) for variant in variants}
    assert len(keys) == len(variants)
    cache = ModuleCache(tmp_path)
    for variant in variants:
        cache.compile(*variant)
        assert cache.origin == "nvrtc"
    assert [path.stem for path in entries(tmp_path)] == sorted(keys)


def _flip_bit(data, rng):
    position = int(rng.integers(len(data) * 8))
    data[position // 8] ^= 1 << (position % 8)
    return data


def _huge_header_length(data, rng):
    """The header length (after the 8-byte magic and 4-byte format) gets a high bit."""
    data[8 + 4 + int(rng.integers(4, 8))] |= 0x40
    return data


def _resigned(key, edit=None):
    """A change of the entry's header (``edit``, None: none), signed with ``key`` (None:
    unsigned)."""
    def damage(data, rng):
        header, payload = fuzz_cache.split(bytes(data))
        if edit:
            edit(header)
        return fuzz_cache.join(json.dumps(header).encode(), payload, key, bytes(data[:12]))
    return damage


DAMAGE = {
    "bit flip": _flip_bit,
    "huge header length": _huge_header_length,
    "truncation": lambda data, rng: data[:int(rng.integers(len(data)))],
    "garbage": lambda data, rng: bytearray(rng.bytes(int(rng.integers(1, 2 * len(data))))),
    "unsigned": _resigned(None),
    "planted": _resigned(os.urandom(32), lambda header: header.update(log="planted")),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE) + ["other key", "previous format"])
def test_damaged_entry_is_recompiled(damage, kernels, tmp_path, rng, caplog):
    """A damaged entry (a random bit flipped, a header length too large to read, a random
    length kept, random bytes), one not signed or signed with another key (planted), one
    written for another key or in the previous format is ignored with a warning, compiled
    again and rewritten."""
    source = module.module_source(kernels)
    cache = ModuleCache(tmp_path)
    binary = cache.compile(source, "sm_80")
    (path,) = entries(tmp_path)
    if damage == "other key":
        cache.compile(source, "sm_90")
        other = next(p for p in entries(tmp_path) if p != path)
        path.write_bytes(other.read_bytes())
    elif damage == "previous format":
        path.write_bytes(fuzz_caches.previous_cuda_entry(source, "sm_80", binary))
    else:
        path.write_bytes(bytes(DAMAGE[damage](bytearray(path.read_bytes()), rng)))
    fresh = ModuleCache(tmp_path)
    with caplog.at_level(logging.WARNING, logger="myelin.cache"):
        assert fresh.compile(source, "sm_80") == binary
    assert fresh.origin == "nvrtc"
    assert f"ignoring CUDA module cache entry {path}" in caplog.text
    repaired = ModuleCache(tmp_path)
    assert repaired.compile(source, "sm_80") == binary and repaired.origin == "disk"


@pytest.mark.parametrize("setting", ["off", ""])
def test_myelin_cache_off_keeps_modules_in_memory(setting, kernels, tmp_path, monkeypatch):
    monkeypatch.setenv("MYELIN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MYELIN_CACHE", setting)
    monkeypatch.setattr(module, "_default_cache", None)
    cache = module.default_cache()
    assert module.default_cache() is cache
    target = CudaTarget("sm_80")
    assert module.build(kernels, target).origin == "nvrtc"
    assert module.build(kernels, target).origin == "memory"
    written = entries(tmp_path / "cuda") if (tmp_path / "cuda").exists() else []
    assert len(written) == (0 if setting == "off" else 1)


@pytest.mark.parametrize("special", ["symlink", "fifo", "directory", "empty", "group-writable",
                                     "other owner"])
def test_a_file_others_could_write_is_not_read(special, kernels, tmp_path, caplog):
    """A link (to a sound entry), a FIFO, a directory, an empty file, a file others can write
    or (as root) one of another user in an entry's place: a miss, never a hang or an
    error."""
    if special == "other owner" and os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    source = module.module_source(kernels)
    binary = ModuleCache(tmp_path).compile(source, "sm_80")
    (path,) = entries(tmp_path)
    os.replace(path, f"{path}.valid")
    fuzz_cache.place(str(path), special)
    fresh = ModuleCache(tmp_path)
    with caplog.at_level(logging.WARNING, logger="myelin.cache"):
        assert fresh.compile(source, "sm_80") == binary
    assert fresh.origin == "nvrtc"
    assert f"ignoring CUDA module cache entry {path}" in caplog.text


@pytest.mark.parametrize("problem", ["group-writable", "another owner"])
def test_a_directory_others_can_write_is_not_used(problem, kernels, tmp_path, caplog,
                                                  monkeypatch):
    source = module.module_source(kernels)
    binary = ModuleCache(tmp_path).compile(source, "sm_80")
    before = sorted(os.listdir(tmp_path))
    if problem == "group-writable":
        os.chmod(tmp_path, 0o770)
    else:
        monkeypatch.setattr(os, "geteuid", lambda: os.stat(tmp_path).st_uid + 1)
    with caplog.at_level(logging.WARNING, logger="myelin.cache"):
        for _ in range(2):
            fresh = ModuleCache(tmp_path)
            assert fresh.compile(source, "sm_80") == binary
            assert fresh.origin == "nvrtc"            # the entry there is not read ...
    assert sorted(os.listdir(tmp_path)) == before     # ... and nothing is written
    (warning,) = caplog.messages                      # said once
    assert warning.startswith(f"not using the cache {tmp_path}: it is ")


def test_mutated_entries_are_misses_never_errors():
    """30 cases of the fuzz script: damaged, unsigned, planted, foreign and special files, and
    header edits signed with the cache's key: no exception, hang or silent miss; a raw change
    never used, a signed edit a miss or the right binary."""
    emulator.require_nvrtc()
    counts, _, defects = fuzz_caches.campaign(fuzz_caches.CudaSubject(), 30, seed=3)
    assert defects == []
    assert counts["raw", "miss"] > 10 and counts["raw", "hit"] == 0
