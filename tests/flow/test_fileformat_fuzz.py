"""Fuzz tests of the .flow reader.

Mutated and random files may only raise FlowFormatError, each within a bounded time and with
memory bounded by the file's size; a file that does load saves back to a fixed point.
"""

import random
import struct
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from myelin.errors import FlowFormatError
from myelin.flow import fileformat
from myelin.flow.graph import Flow, VarFlags

VERSIONS = [3, 4, 5, 6]
# No single small input may take longer to reject or load: a parse that believes a corrupt
# count takes minutes; a sound one milliseconds, 0.7 s once in a busy test run.
SLOW_PARSE_S = 5.0

FUZZ_SETTINGS = settings(derandomize=True, max_examples=400, deadline=None, database=None,
                         suppress_health_check=[HealthCheck.too_slow])


def sample_file(version):
    """A small valid file using every section and field of ``version``."""
    flow = Flow()
    flow.flags = 1
    w = flow.var("w", data=np.array([[1, 2], [3, 4]], dtype=np.float32))
    w.learnable = True
    w.attrs["init"] = "n"
    flow.add_alias(w, "W")
    x = flow.var("x", "float32", [-1, 2])
    x.ref = True
    y = flow.var("y:0", "float32", [-1, 2])
    k = flow.var("k", data=np.array([7], dtype=np.int8))
    f = flow.func("f")
    f.training = True
    flow.op("y", "MatMul", f, [x, w], [y], {"t": 1})
    flow.op("z", "Add", f, [y, k], [flow.var("z:0", "", [])])
    flow.cnx("c", [x, y]).flags = 2
    if version >= 4:
        blob = flow.blob("b", "t")
        blob.attrs["n"] = 2
        blob.data = b"ab"
    return flow.to_bytes(version)


SAMPLES = {version: sample_file(version) for version in VERSIONS}


def check(data):
    """Load ``data``: True if it loads (and saves back to a fixed point), False if rejected."""
    start = time.perf_counter()
    try:
        flow = Flow.from_bytes(data)
    except FlowFormatError as error:
        assert error.offset is not None and 0 <= error.offset <= len(data)
        loaded = False
    else:
        version = struct.unpack_from("<i", data, 4)[0]
        saved = flow.to_bytes(version)
        assert Flow.from_bytes(saved).to_bytes(version) == saved
        loaded = True
    assert time.perf_counter() - start < SLOW_PARSE_S, data
    return loaded


def test_samples_load_and_round_trip():
    for version, data in SAMPLES.items():
        assert check(data)
        assert Flow.from_bytes(data).to_bytes(version) == data


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_is_rejected(version):
    data = SAMPLES[version]
    for end in range(len(data)):
        assert not check(data[:end])


@pytest.mark.parametrize("version", VERSIONS)
def test_every_bit_flip(version):
    data = SAMPLES[version]
    bits = range(8) if version == 6 else [random.Random(version).randrange(8)]
    loaded = 0
    for position in range(len(data)):
        for bit in bits:
            mutant = bytearray(data)
            mutant[position] ^= 1 << bit
            loaded += check(bytes(mutant))
    assert loaded > 0  # flips inside data and flag bits still load


@pytest.mark.parametrize("version", VERSIONS)
def test_every_byte_replacement(version):
    data = SAMPLES[version]
    for position in range(len(data)):
        for value in (0x00, 0x01, 0x26, 0xFF):  # 0x26 is "&"
            mutant = bytearray(data)
            mutant[position] = value
            check(bytes(mutant))


@pytest.mark.parametrize("version", VERSIONS)
def test_huge_length_fields_everywhere(version):
    """Every 4 or 8 bytes overwritten with a large or negative count or length."""
    data = SAMPLES[version]
    fields = [struct.pack("<i", n) for n in (2**31 - 1, -2**31, -1, 0x00FFFFFF, 1 << 20)]
    fields += [struct.pack("<Q", n) for n in (2**64 - 1, 2**63, 2**32 + 1)]
    for position in range(len(data)):
        for field in fields:
            if position + len(field) <= len(data):
                check(data[:position] + field + data[position + len(field):])


def test_seeded_random_mutations():
    rng = random.Random(20240601)
    samples = list(SAMPLES.values())
    outcomes = [0, 0]
    for _ in range(3000):
        mutant = bytearray(rng.choice(samples))
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(len(mutant) + 1)
            kind = rng.randrange(6)
            if kind == 0 and position < len(mutant):
                mutant[position] ^= 1 << rng.randrange(8)
            elif kind == 1 and position < len(mutant):
                mutant[position] = rng.randrange(256)
            elif kind == 2:
                mutant[position:position] = rng.randbytes(rng.randint(1, 8))
            elif kind == 3:
                del mutant[position:position + rng.randint(1, 8)]
            elif kind == 4:
                end = min(len(mutant), position + rng.randint(1, 16))
                mutant[position:position] = mutant[position:end]
            else:
                mutant[position:position + 4] = struct.pack("<i", rng.choice(
                    [2**31 - 1, -1, 0, 1, 2, 255, 1 << 16]))
        outcomes[check(bytes(mutant))] += 1
    assert outcomes[0] > 0 and outcomes[1] > 0


@FUZZ_SETTINGS
@given(version=st.sampled_from(VERSIONS), body=st.binary(max_size=120))
def test_random_bodies_after_a_valid_header(version, body):
    check(struct.pack("<2i", 0x776F6C66, version) + body)


@FUZZ_SETTINGS
@given(version=st.sampled_from(VERSIONS),
       edits=st.lists(st.tuples(st.integers(0, 600), st.binary(min_size=0, max_size=6),
                                st.integers(0, 6)), min_size=1, max_size=5))
def test_hypothesis_splices(version, edits):
    """Replace ``length`` bytes at a position by other bytes, a few times over."""
    mutant = SAMPLES[version]
    for position, replacement, length in edits:
        position %= len(mutant) + 1
        mutant = mutant[:position] + replacement + mutant[position + length:]
    check(mutant)


def test_loaded_mutants_keep_structure():
    """Flipping bits inside constant data or flags still loads the same structure."""
    data = SAMPLES[6]
    base = Flow.from_bytes(data)
    constant = np.array([[1, 2], [3, 4]], dtype=np.float32).tobytes()
    position = data.index(constant)
    mutant = bytearray(data)
    mutant[position + 3] ^= 0x40
    flow = Flow.from_bytes(bytes(mutant))
    assert list(flow.vars) == list(base.vars) and flow.vars["w"].data[0, 0] != 1
    assert flow.to_bytes() == bytes(mutant)
    var_flags = struct.pack("<I", int(VarFlags.LEARNABLE)) + struct.pack("<i", 1) + b"w"
    position = data.index(var_flags)
    mutant = bytearray(data)
    mutant[position + 3] = 0x80  # an unknown flag bit
    assert int(Flow.from_bytes(bytes(mutant)).vars["w"].flags) == (1 << 31) | VarFlags.LEARNABLE
    assert Flow.from_bytes(bytes(mutant)).to_bytes() == bytes(mutant)


def header(version=6):
    return struct.pack("<3i", 0x776F6C66, version, 0)


ADVERSARIAL = {
    "variable count": header() + struct.pack("<i", 2**31 - 1) + bytes(10),
    "operation count": header() + struct.pack("<2i", 0, 2**31 - 1) + bytes(10),
    "blob count": header() + struct.pack("<5i", 0, 0, 0, 0, 2**31 - 1) + bytes(10),
    "name length": header() + struct.pack("<3i", 1, 0, 2**31 - 1) + bytes(40),
    "alias count": header() + struct.pack("<4i", 1, 0, 1, 2**31 - 1) + b"v" + bytes(40),
    "rank": header() + struct.pack("<5i", 1, 0, 0, 0, 2**31 - 1) + bytes(40),
    "data size": header() + struct.pack("<6i", 1, 0, 0, 0, 0, 0) + struct.pack("<Q", 2**64 - 1)
    + bytes(40),
    "huge dims": header() + struct.pack("<5i", 1, 0, 0, 7, 4) + b"float32"
    + struct.pack("<4i", 2**31 - 1, 2**31 - 1, 2**31 - 1, 2**31 - 1)
    + struct.pack("<iQ", 0, 8) + bytes(8) + bytes(16),
}


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
def test_adversarial_lengths_fail_fast_in_bounded_memory(case):
    data = ADVERSARIAL[case]
    tracemalloc.start()
    try:
        start = time.perf_counter()
        with pytest.raises(FlowFormatError):
            Flow.from_bytes(data)
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 0.1
    assert peak < 64 * 1024 + 10 * len(data), peak


def test_memory_of_a_large_valid_file_is_proportional():
    flow = Flow()
    flow.var("big", data=np.ones((512, 512), dtype=np.float32))  # 1 MiB
    flow.blob("blob").data = bytes(1 << 20)
    data = flow.to_bytes()
    tracemalloc.start()
    try:
        loaded = Flow.from_bytes(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert loaded.vars["big"].data.sum() == 512 * 512
    assert peak < 3 * len(data) + 256 * 1024, peak


def test_many_small_objects_load_in_linear_time():
    """Thousands of variables and ops: the reader does no per-item scans of its own."""
    def make(n):
        flow = Flow()
        func = flow.func("f")
        previous = flow.var("v0", "float32", [1])
        for i in range(1, n):
            var = flow.var(f"v{i}", "float32", [1])
            flow.op(f"op{i}", "Identity", func, [previous], [var])
            previous = var
        return flow.to_bytes()

    def best_time(data):
        timings = []
        for _ in range(3):
            start = time.perf_counter()
            Flow.from_bytes(data)
            timings.append(time.perf_counter() - start)
        return min(timings)

    small, large = make(300), make(2400)
    assert best_time(large) < 16 * best_time(small) + 0.1  # 8x the objects: not 64x the time
    assert fileformat.to_bytes(Flow.from_bytes(large)) == large
