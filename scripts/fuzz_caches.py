"""Fuzz the CUDA module cache and the tuning cache: real entries mutated, then read.

    python scripts/fuzz_caches.py                          # 1,000 cases of each cache
    python scripts/fuzz_caches.py --cache tuning --cases 300 --seed 5
    python scripts/fuzz_caches.py --verbose                # print each defect as it is found

The corpus: the CUDA module of a small network (element-wise math and a softmax) compiled by
NVRTC for sm_80 (NVRTC needs no GPU; without NVRTC the CUDA cache is skipped), and the tuning
cache's answer for a matrix product of two variables. Its measurement is replaced by a fixed
one (the last option is the fastest), so that a miss costs milliseconds: the cache is under
test, not the timer. Each cache also holds a second entry (the module for sm_90, another
product's answer) to put in the first one's place.

A case damages the entry with the mutations of ``scripts/fuzz_cache.py`` and asks a fresh
cache for it, in this process: reading an entry runs no code an entry could steer (the CUBIN
is handed to the driver only on a GPU), so a crash would end the script, and a case that does
not end in time is stopped by an alarm and counted as a hang. "raw" cases are what anyone
without the cache's key can do: bit flips, byte runs overwritten, truncation, extension, the
preamble's length, format and magic fields set, the header's JSON edited with the signature
kept, zeroed (unsigned) or made with another key (planted), the other entry in its place, an
entry of the previous format (not signed: as myelin wrote them before), a link, a FIFO, a
directory, an empty or group-writable file, or (as root) a file of another user; every raw
case must be a miss. "signed" cases are header edits signed with the cache's own key, as a
writer's bug would make them (fields of the key changed, removed or added, values of other
types, a choice that is not offered, a header nested too deep to parse); each must be a miss,
or a hit that gives the right binary or choice.

Outcomes, as in ``scripts/fuzz_cache.py``: ``hit`` (the entry was used, and was right),
``miss`` (rejected with a warning, compiled or measured afresh and the entry replaced: the
next read is a hit). Defects: ``accepted`` (a raw change was used), ``wrong`` (not the right
binary or choice), ``silent`` (a miss without a warning), ``kept`` (the bad entry not
replaced), ``error`` (an exception), ``hang``.
"""

import argparse
import collections
import contextlib
import copy
import json
import logging
import os
import random
import re
import signal
import struct
import sys
import tempfile
import time
import zlib
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_cache  # noqa: E402

import myelin  # noqa: E402
from myelin import cachefiles  # noqa: E402
from myelin.codegen.cuda import modulecache, nvrtc, planner  # noqa: E402
from myelin.codegen.cuda import module as cuda_module  # noqa: E402
from myelin.codegen.llvm import tuning  # noqa: E402
from myelin.errors import CompileError  # noqa: E402

DEFECTS = ("accepted", "wrong", "silent", "kept", "error", "hang")
OUTCOMES = ("hit", "miss") + DEFECTS
VALUES = (None, 0, -1, 2**64, 1.5, "", "x", [], {}, {"a": 1}, [[[]]], True)


class _Hang(Exception):
    pass


def _any(rng):
    return copy.deepcopy(rng.choice(VALUES))


def _edit_fields(header, rng, name):
    """Change, remove or add a field of the dict ``header[name]`` (or replace it)."""
    fields = header[name]
    if not isinstance(fields, dict) or rng.random() < 0.1:
        header[name] = _any(rng)
        return f"{name} -> {str(header[name])[:30]}"
    field = rng.choice(sorted(fields))
    what = rng.choice(["change", "remove", "add"])
    if what == "change":
        fields[field] = _any(rng)
        return f"{name}.{field} -> {str(fields[field])[:30]}"
    if what == "remove":
        del fields[field]
        return f"{name}.{field} removed"
    fields["extra"] = _any(rng)
    return f"{name}: a field added"


def _edit_header(header, rng, extra):
    """Remove a field of ``header``, add one (``extra`` names fields of other formats) or
    make the whole header another JSON value."""
    what = rng.choice(["remove", "add", "replace"])
    if what == "remove":
        field = rng.choice(sorted(header))
        del header[field]
        return header, f"header field {field} removed"
    if what == "add":
        field = rng.choice(extra + ["extra"])
        header[field] = _any(rng)
        return header, f"header field {field} added"
    return rng.choice([[header], "x", 5, None, []]), "header not an object"


def previous_cuda_entry(source, arch, binary):
    """The CUDA module cache's entry of ``binary`` as myelin wrote it before entries were
    signed (format 1: a CRC-32 of the payload, no signature)."""
    pieces = [binary.cubin, binary.ptx.encode(), binary.log.encode()]
    payload = b"".join(pieces)
    fields = {**modulecache.ModuleCache.fields(source, arch), "format": 1}
    header = json.dumps({"fields": fields, "sizes": [len(p) for p in pieces],
                         "crc32": zlib.crc32(payload)}).encode()
    return struct.pack("<8sIQ", modulecache.MAGIC, 1, len(header)) + header + payload


class CudaSubject:
    """The CUDA module cache's entries of a small network's module (sm_80; sm_90 the other)."""

    name = "cuda"
    arch = "sm_80"

    def __init__(self):
        flow = myelin.Flow()
        f = myelin.Builder(flow, "f")
        x = f.var("x", "float32", [4, 32])
        f.softmax(f.tanh(f.mul(f.exp(x), f.op("Sigmoid", [x]))), name="y")
        self.source = cuda_module.module_source(planner.plan(flow).kernels())
        self.right = None

    @staticmethod
    def available():
        """None if NVRTC can be loaded, else why not."""
        try:
            nvrtc.version()
        except CompileError as error:
            return str(error).splitlines()[0]
        return None

    def fill(self, directory):
        """Make the entries in ``directory``: (the entry's file name, the other's)."""
        cache = modulecache.ModuleCache(directory)
        self.right = cache.compile(self.source, self.arch)
        cache.compile(self.source, "sm_90")
        return [cache.key(cache.fields(self.source, arch)) + modulecache.SUFFIX
                for arch in (self.arch, "sm_90")]

    def ask(self, directory):
        """(hit, right) of a fresh cache asked for the module."""
        cache = modulecache.ModuleCache(directory)
        binary = cache.compile(self.source, self.arch)
        return cache.origin == "disk", binary == self.right

    def previous(self):
        return previous_cuda_entry(self.source, self.arch, self.right)

    @staticmethod
    def edit(header, rng):
        """A copy of the entry's ``header`` with one field changed, and what changed."""
        header = copy.deepcopy(header)
        choice = rng.randrange(4)
        if choice == 0:
            return header, _edit_fields(header, rng, "fields")
        if choice == 1:
            field = rng.choice(["ptx", "log"])
            header[field] = rng.choice([None, 5, [], {"a": 1}, 1.5, True])
            return header, f"{field} -> {header[field]!r}"
        return _edit_header(header, rng, ["sizes", "crc32"])


class TuningSubject:
    """The tuning cache's answers for a matrix product (another product's is the other)."""

    name = "tuning"

    def __init__(self):
        flow = myelin.Flow()
        for name, rows in (("f", 100), ("g", 64)):
            f = myelin.Builder(flow, name)
            f.matmul(f.var("a", "float32", [rows, 96]), f.var("b", "float32", [96, 130]))
        net = myelin.Compiler(cache=False, threads=1).compile(flow)
        self.target = net.target
        self.steps = [net.cell(name).steps[0] for name in ("f", "g")]
        self.options = [step.kernel.choices(step, net.target) for step in self.steps]
        assert all(len(options) >= 2 for options in self.options)

    @staticmethod
    def available():
        return None

    def _choose(self, directory, index):
        """(option chosen, whether it was measured) for step ``index``."""
        measured = []

        def measure(step, options, *args):
            measured.append(step.name)
            return [1.0] * (len(options) - 1) + [0.5]

        with mock.patch.object(tuning, "measure", measure):
            tuner = tuning.Tuner(self.target, 1, 64, cache=directory)
            return tuner.choose(self.steps[index], self.options[index]), bool(measured)

    def fill(self, directory):
        names = []
        for index, step in enumerate(self.steps):
            before = set(os.listdir(directory))
            self._choose(directory, index)
            (name,) = set(os.listdir(directory)) - before - {cachefiles.SECRET}
            names.append(name)
        return names

    def ask(self, directory):
        option, measured = self._choose(directory, 0)
        return not measured, option == self.options[0][-1]

    def previous(self):
        """The entry as myelin wrote it before entries were signed: JSON alone."""
        tuner = tuning.Tuner(self.target, 1, 64, cache=False)
        options = self.options[0]
        return json.dumps({"key": tuner.key(self.steps[0], options), "choice": options[-1],
                           "seconds": [[o, 1.0] for o in options]}, indent=1).encode()

    @staticmethod
    def edit(header, rng):
        header = copy.deepcopy(header)
        choice = rng.randrange(4)
        if choice == 0:
            return header, _edit_fields(header, rng, "key")
        if choice == 1:
            header["choice"] = rng.choice([{"vectors": 99, "rows": 1}, {}, None, [], "x", 5,
                                           {**header["choice"], "extra": 1}, [header["choice"]],
                                           {k: str(v) for k, v in header["choice"].items()}])
            return header, f"choice -> {str(header['choice'])[:40]}"
        if choice == 2:
            header["seconds"] = _any(rng)
            return header, f"seconds -> {str(header['seconds'])[:30]}"
        return _edit_header(header, rng, ["sizes"])


SUBJECTS = {"cuda": CudaSubject, "tuning": TuningSubject}


# The cases.
NESTED = b'{"fields": ' + b"[" * 200000 + b"]" * 200000 + b"}"


def make_cases(subject, data, other, secret, count, seed):
    """``count`` cases (index, bytes or special, model, description) for the entry ``data``
    of ``subject`` (``other`` the other entry, ``secret`` the cache's key)."""
    rng = random.Random(seed)
    frame = data[:12]
    header, payload = fuzz_cache.split(data)
    cases = []
    for index in range(count):
        roll = rng.random()
        mutated = data
        if roll < 0.04:
            special = fuzz_cache.SPECIAL[index % len(fuzz_cache.SPECIAL)]
            if special == "other owner" and os.geteuid() != 0:
                special = "group-writable"
            cases.append((index, special, "raw", f"special: {special}"))
        elif roll < 0.07:
            cases.append((index, subject.previous(), "raw", "unsigned: the previous format"))
        elif roll < 0.70:
            while mutated == data:
                mutated, what = fuzz_cache.raw_mutation(data, rng, [other], subject.edit)
            cases.append((index, mutated, "raw", what))
        elif roll < 0.71:
            cases.append((index, fuzz_cache.join(NESTED, payload, secret, frame), "signed",
                          "header nested 200,000 deep"))
        else:
            while mutated == data:
                edited, what = subject.edit(header, rng)
                mutated = fuzz_cache.join(json.dumps(edited).encode(), payload, secret, frame)
            cases.append((index, mutated, "signed", what))
    return cases


class _Warnings(logging.Handler):
    """The warnings the caches log."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def capture():
    """The warnings of myelin.cache and myelin.tuning while in the block."""
    handler = _Warnings()
    loggers = [logging.getLogger(name) for name in ("myelin.cache", "myelin.tuning")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def _alarm(signum, frame):
    raise _Hang()


def run_case(subject, directory, entry, case, warnings, timeout):
    """(outcome, detail) of ``case`` for the entry file ``entry`` of the cache
    ``directory``."""
    _, data, model, _ = case
    fuzz_cache.place(os.path.join(directory, entry), data)
    warnings.messages.clear()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        hit, right = subject.ask(directory)
        if not right:
            return "wrong", "not the right " + ("binary" if subject.name == "cuda" else "choice")
        if hit:
            return ("accepted", "a raw change was used") if model == "raw" else ("hit", "")
        if not warnings.messages:
            return "silent", "read afresh without a warning"
        if data != "directory" and not subject.ask(directory)[0]:
            return "kept", "the next read did not use a rewritten entry"
        return "miss", warnings.messages[0]
    except _Hang:
        return "hang", f"no answer in {timeout} s"
    except Exception as error:  # noqa: BLE001: any exception is the defect counted
        return "error", f"{type(error).__name__}: {error}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def campaign(subject, count, seed, timeout=60, verbose=False):
    """Run ``count`` cases on ``subject``'s cache; returns {(model, outcome): count},
    {(model, reason of a miss): count} and the defects [(case, outcome, detail)]."""
    counts, reasons, defects = collections.Counter(), collections.Counter(), []
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{subject.name}-") as directory, \
            capture() as warnings:
        entry, other = subject.fill(directory)
        with open(os.path.join(directory, entry), "rb") as file:
            data = file.read()
        with open(os.path.join(directory, entry + ".valid"), "wb") as file:
            file.write(data)
        with open(os.path.join(directory, other), "rb") as file:
            other_data = file.read()
        with open(os.path.join(directory, cachefiles.SECRET), "rb") as file:
            secret = file.read()
        for case in make_cases(subject, data, other_data, secret, count, seed):
            outcome, detail = run_case(subject, directory, entry, case, warnings, timeout)
            counts[case[2], outcome] += 1
            if outcome == "miss":
                reasons[case[2], reason(detail)] += 1
            if outcome in DEFECTS:
                defects.append((case, outcome, detail))
                if verbose:
                    print(f"case {case[0]} ({case[2]}: {case[3]}): {outcome}: {detail}",
                          flush=True)
    return counts, reasons, defects


def reason(message):
    """What rejected an entry, from the warning that says so: its first clause, numbers left
    out."""
    text = re.sub(r"^ignoring .*? entry \S+: ", "", message).split("; ")[0]
    return re.sub(r"[0-9]+", "N", re.split(r"[,(:]", text)[0]).strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", choices=sorted(SUBJECTS), action="append",
                        help="the cache to fuzz (repeatable; default: both)")
    parser.add_argument("--cases", type=int, default=1000, help="cases per cache")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=60, help="seconds per case")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    found = 0
    for name in args.cache or sorted(SUBJECTS):
        missing = SUBJECTS[name].available()
        if missing:
            print(f"skipping the {name} cache: {missing}")
            continue
        start = time.perf_counter()
        counts, reasons, defects = campaign(SUBJECTS[name](), args.cases, args.seed,
                                            args.timeout, args.verbose)
        print(fuzz_cache.report(counts, reasons, time.perf_counter() - start, name, OUTCOMES))
        for case, outcome, detail in defects[:20]:
            print(f"  defect: case {case[0]} ({case[2]}: {case[3]}): {outcome}: {detail}")
        found += len(defects)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
