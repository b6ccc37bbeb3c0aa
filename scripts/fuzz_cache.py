"""Fuzz the compile cache: real entries mutated, then compiled from, in worker processes
(``scripts/fuzz_caches.py`` does the same for the CUDA module and tuning caches, with the
mutations of this script).

    python scripts/fuzz_cache.py                       # 1,200 cases, 2 workers
    python scripts/fuzz_cache.py --cases 300 --seed 5  # another sample
    python scripts/fuzz_cache.py --verbose             # print each defect as it is found

The corpus is real entries: a few small networks (an MLP whose products are split over two
threads and whose first weights are packed at compile time, a CNN compiled with the profiler,
a flow of two functions, fused element-wise math) compiled once into an empty cache, and the
right outputs of each, computed without a cache. A case damages one entry and compiles its
network again from the cache, in a worker process (a crash is counted, and a case that does
not end in time is a hang: the worker is killed), then computes it on fixed inputs.

Mutations come in two models (:mod:`myelin.codegen.llvm.codecache` says what each stands
for). "raw": what anyone without the cache's key can do: flip bits, overwrite byte runs,
truncate or extend the file, set the preamble's length, format and magic fields (huge,
negative as unsigned, off by one), edit the header's JSON (symbols, sizes, shapes, types,
huge and negative numbers) and leave the signature, zero it (an unsigned entry) or sign the
edit with another key (a planted entry), put another network's entry in its place, or put a
link, a FIFO, a directory, an empty or group-writable file, or (as root) a file of another
user there. Every raw case must be a miss. "signed": header edits signed with the cache's own
key, as a writer's bug would make them; they must be a miss, or a hit that computes right.

Outcomes: ``hit`` (the entry was used), ``miss`` (it was rejected with a warning, the code
compiled afresh and the entry replaced: the next compile is a hit). Defects: ``accepted``
(a raw change was used), ``wrong`` (outputs differ from the right ones), ``silent`` (a miss
without a warning), ``kept`` (the bad entry was not replaced), ``error`` (an exception),
``crash``, ``hang``.
"""

import argparse
import collections
import copy
import hashlib
import hmac
import json
import logging
import multiprocessing
import os
import random
import re
import shutil
import struct
import sys
import tempfile
import threading
import time

import numpy as np

from myelin import cachefiles
from myelin.codegen.llvm import codecache, externals

DEFECTS = ("accepted", "wrong", "silent", "kept", "error", "crash", "hang")
OUTCOMES = ("hit", "miss") + DEFECTS
_PREAMBLE = cachefiles.PREAMBLE           # magic, format, header length, HMAC
_SIGNED = cachefiles.SIGNED
FRAME = codecache.MAGIC + struct.pack("<I", codecache.FORMAT)   # a code entry's first 12 bytes
HUGE = (2**31, 2**32 + 1, 2**63 - 1, 2**64 + 5, 10**30, -1, -2**63, 10**400)


# The corpus.
def _mlp(myelin, rng):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [128, 256])
    w1 = f.array("W1", rng.standard_normal((256, 256)).astype(np.float32))
    w2 = f.var("W2", myelin.DT_FLOAT, [256, 32])
    b = f.var("b", myelin.DT_FLOAT, [32])
    w2.learnable = b.learnable = True
    f.add(f.matmul(f.relu(f.matmul(x, w1)), w2), b, name="y")
    return flow


def _cnn(myelin, rng):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "cnn")
    x = f.var("x", myelin.DT_FLOAT, [1, 3, 16, 16])
    w = f.array("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    y = f.op("Conv", [x, w], attrs={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})
    y = f.op("MaxPool", [f.relu(y)], attrs={"kernel_shape": [2, 2], "strides": [2, 2]})
    y = f.reshape(f.op("GlobalAveragePool", [y]), [1, 8])
    f.matmul(y, f.array("fc", rng.standard_normal((8, 4)).astype(np.float32)), name="logits")
    return flow


def _two(myelin, rng):
    flow = myelin.Flow()
    for name in ("first", "second"):
        f = myelin.Builder(flow, name)
        x = f.var("x", myelin.DT_FLOAT, [8, 16])
        w = f.array("w", rng.standard_normal((16, 16)).astype(np.float32))
        f.softmax(f.matmul(x, w), name="y")
    return flow


def _math(myelin, rng):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "m")
    x = f.var("x", myelin.DT_FLOAT, [1000])
    s = f.var("s", myelin.DT_FLOAT, [1000])
    s.learnable = True
    f.op("Tanh", [f.mul(f.op("Exp", [f.mul(x, s)]), f.op("Sigmoid", [x]))], name="y")
    return flow


NETWORKS = {"mlp": (_mlp, {"threads": 2}), "cnn": (_cnn, {"threads": 1, "profile": True}),
            "two": (_two, {"threads": 1}), "math": (_math, {"threads": 1})}


def compile_network(name, cache):
    """(network, compiler timings) of corpus network ``name`` compiled with ``cache``."""
    import myelin

    build, options = NETWORKS[name]
    compiler = myelin.Compiler(cache=cache, **options)
    flow = build(myelin, np.random.default_rng(sum(map(ord, name))))
    return compiler.compile(flow), compiler.timings


def outputs(network):
    """Every output of every cell of ``network``, computed on fixed inputs and learnable
    values: {cell/name: array}."""
    rng = np.random.default_rng(7)
    for name in network.globals():
        tensor = network.tensor(name)
        if np.asarray(tensor).flags.writeable:
            network[name] = rng.standard_normal(tensor.shape()).astype(np.float32)
    found = {}
    for cell in network.cells:
        data = cell.instance()
        for name in cell.inputs:
            data[name] = rng.standard_normal(cell.spec(name).shape).astype(np.float32)
        data.compute()
        for name in cell.outputs:
            found[f"{cell.name}/{name}"] = np.array(data[name])
    return found


def make_corpus(directory):
    """Compile every network into the cache ``directory``; returns {name: (entry file name,
    right outputs)}, the outputs from a compile without a cache."""
    corpus = {}
    for name in NETWORKS:
        before = set(os.listdir(directory)) if os.path.isdir(directory) else set()
        compile_network(name, directory)
        (entry,) = [item for item in set(os.listdir(directory)) - before
                    if item.endswith(".code")]
        corpus[name] = (entry, outputs(compile_network(name, False)[0]))
    return corpus


# Mutations.
def split(data):
    """(header as JSON, payload) of an entry of any cache (the frame of
    :func:`myelin.cachefiles.write_signed`)."""
    length = _PREAMBLE.unpack_from(data)[2]
    start = _PREAMBLE.size + length
    return json.loads(data[_PREAMBLE.size:start]), data[start + -start % 64:]


def join(text, payload, secret=None, frame=FRAME):
    """An entry of header ``text`` (JSON bytes) and ``payload``, laid out as the writer lays
    it out, with ``frame`` (the first 12 bytes of a sound entry: magic number and format) and
    signed with ``secret`` (None: the signature left zero)."""
    end = _PREAMBLE.size + len(text)
    body = text + bytes(-end % 64) + payload
    signed = frame + struct.pack("<Q", len(text))
    mac = bytes(32) if secret is None else hmac.new(secret, signed + body,
                                                      hashlib.sha256).digest()
    return signed + mac + body


def header_edit(header, rng):
    """A copy of ``header`` with one field changed, and a description of the change."""
    header = copy.deepcopy(header)
    symbols, arrays = header["symbols"], header["arrays"]
    choice = rng.randrange(12)
    if choice == 0 and symbols:
        item = rng.choice(symbols)
        item[0] = rng.choice(["myelin.ext.99", "myelin.ext.0", "memcpy", "", 7, None,
                              externals.symbol(["global", "nothing"]), symbols[-1][0],
                              item[0][:-1], item[0].upper()])
        return header, f"symbol name -> {item[0]!r}"
    if choice == 1 and symbols:
        item = rng.choice(symbols)
        item[1] = rng.choice([["global", "nothing"], ["global", rng.choice(
            [s[1][1] for s in symbols if s[1][0] == "global"] or ["x"])], ["array", 5],
            ["array", -1], ["pool", 1], ["pool", 10**6], ["counters", "cell_x_0"],
            ["module", 0], ["global"], "global", ["array", "0"], ["pool", True],
            ["array", 2**63]])
        return header, f"symbol key -> {item[1]!r}"
    if choice == 2 and symbols:
        item = rng.choice(symbols)
        item[2] = rng.choice([0, 1, item[2] + 1, item[2] - 1, -item[2] - 1, 2**64, "8", 1.5,
                              *HUGE])
        return header, f"symbol size -> {item[2]!r}"
    if choice == 3 and symbols:
        what = rng.choice(["drop", "duplicate", "swap", "add"])
        if what == "drop":
            symbols.pop(rng.randrange(len(symbols)))
        elif what == "duplicate":
            symbols.append(copy.deepcopy(rng.choice(symbols)))
        elif what == "swap" and len(symbols) > 1:
            a, b = rng.sample(symbols, 2)
            a[1], b[1] = b[1], a[1]
        else:
            symbols.append([externals.symbol(["pool", 2]), ["pool", 2], 0])
        return header, f"symbols: {what}"
    if choice == 4:
        header["object"] = rng.choice([header["object"] + d for d in (-1, 1, -64, 64)]
                                      + [0, "12", 1.0, None, *HUGE])
        return header, f"object size -> {header['object']!r}"
    if choice == 5 and arrays:
        spec = rng.choice(arrays)
        spec[0] = rng.choice(["<i4", "<f8", "|u1", "|O", "<U4", "|V8", "|S1", ">f4", "f4",
                              "", 4, "<M8[s]", "bfloat16"])
        return header, f"array dtype -> {spec[0]!r}"
    if choice == 6 and arrays:
        spec = rng.choice(arrays)
        shape = spec[1]
        spec[1] = rng.choice([shape[::-1], shape + [1], shape[:-1], [-d for d in shape],
                              [d + 1 for d in shape], [2**40] * 3, [0], "4", [1.5],
                              [True], [[1]], [10**400], list(range(70))])
        return header, f"array shape -> {str(spec[1])[:60]}"
    if choice == 7 and arrays:
        what = rng.choice(["drop", "add", "swap"])
        if what == "drop":
            arrays.pop()
        elif what == "add":
            arrays.append(["<f4", [16]])
        else:
            arrays.reverse()
        return header, f"arrays: {what}"
    if choice == 8:
        field = rng.choice(sorted(header["fields"]))
        header["fields"][field] = rng.choice([None, 0, "x", [], {"a": 1}])
        return header, f"key field {field} changed"
    if choice == 9:
        key = rng.choice(sorted(header))
        value = rng.choice([None, 0, -1, "", [], {}, [[[]]], 1e308, float("nan"), *HUGE])
        if rng.random() < 0.3:
            del header[key]
            return header, f"header field {key} removed"
        header[key] = value
        return header, f"header field {key} -> {str(value)[:30]}"
    if choice == 10:
        header["description"] = rng.choice([{"cells": [1]}, {"steps": -1}, {"x": 1}, [],
                                            {"cells": "f"}, {"steps": 2**70}])
        return header, f"description -> {header['description']!r}"
    header["extra"] = rng.choice([1, "x", [[[[[]]]]], None])
    return header, "header field added"


def raw_mutation(data, rng, others, edit=header_edit):
    """(bytes, description) of a mutation of entry ``data`` (of any cache) that needs no key;
    ``edit(header, rng)`` changes a copy of its header."""
    data = bytearray(data)
    choice = rng.randrange(10)
    if choice == 0:
        flips = rng.randint(1, 8)
        for _ in range(flips):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data), f"{flips} bits flipped"
    if choice == 1:
        start = rng.randrange(len(data))
        size = min(rng.randint(1, 64), len(data) - start)
        fill = rng.choice([b"\0", b"\xff", None])
        data[start:start + size] = rng.randbytes(size) if fill is None else fill * size
        return bytes(data), f"{size} bytes at {start} overwritten"
    if choice == 2:
        end = rng.choice([0, 1, 8, 19, 20, 51, 52, 60, 100, rng.randrange(len(data)),
                          len(data) - 1, len(data) - 64])
        return bytes(data[:end]), f"truncated to {end} bytes"
    if choice == 3:
        size = rng.choice([1, 63, 64, 4096])
        tail = bytes(size) if rng.random() < 0.5 else rng.randbytes(size)
        return bytes(data) + tail, f"extended by {size} bytes"
    if choice == 4:
        value = rng.choice([0, 1, len(data), len(data) * 2, 2**63, 2**64 - 1, 2**64 - 20,
                            _PREAMBLE.unpack_from(data)[2] + rng.choice([-1, 1, 64])])
        struct.pack_into("<Q", data, 12, value)
        return bytes(data), f"header length -> {value}"
    if choice == 5:
        what = rng.choice(["format", "magic"])
        if what == "format":
            struct.pack_into("<I", data, 8, rng.choice([0, 1, 3, 2**32 - 1]))
        else:
            data[0:8] = rng.choice([b"MYELINC\1", bytes(8), b"\x7fELF\2\1\1\0"])
        return bytes(data), f"{what} changed"
    header, payload = split(bytes(data))
    edited, what = edit(header, rng)
    frame = bytes(data[:12])
    if choice == 6:          # the signature kept (the old checksum covered only the payload)
        edited = bytearray(join(json.dumps(edited).encode(), payload, None, frame))
        edited[_SIGNED:_PREAMBLE.size] = data[_SIGNED:_PREAMBLE.size]
        return bytes(edited), f"header edited, signature kept: {what}"
    if choice == 7:
        if payload and rng.random() < 0.3:
            edited, what = header, "payload edited"
            payload = bytearray(payload)
            payload[rng.randrange(len(payload))] ^= 0x10
            payload = bytes(payload)
        return join(json.dumps(edited).encode(), payload, rng.randbytes(32), frame), \
            f"planted (signed with another key): {what}"
    if choice == 8:
        return join(json.dumps(edited).encode(), payload, None, frame), f"unsigned: {what}"
    return rng.choice(others), "another entry of the cache"


SPECIAL = ("symlink", "fifo", "directory", "empty", "group-writable", "other owner")


def make_cases(corpus, secret, count, seed):
    """``count`` cases: (index, network, bytes or special, model, description)."""
    rng = random.Random(seed)
    names = sorted(corpus)
    entries = {name: corpus[name][2] for name in names}
    cases = []
    for index in range(count):
        name = names[index % len(names)]
        data = entries[name]
        others = [entries[other] for other in names if other != name]
        roll = rng.random()
        mutated = data
        if roll < 0.03:
            special = SPECIAL[index // len(names) % len(SPECIAL)]
            if special == "other owner" and os.geteuid() != 0:
                special = "group-writable"
            cases.append((index, name, special, "raw", f"special: {special}"))
        elif roll < 0.70:
            while mutated == data:              # (a change that changes nothing: again)
                mutated, what = raw_mutation(data, rng, others)
            cases.append((index, name, mutated, "raw", what))
        else:
            header, rest = split(data)
            while mutated == data:
                edited, what = header_edit(header, rng)
                mutated = join(json.dumps(edited).encode(), rest, secret)
            cases.append((index, name, mutated, "signed", what))
    return cases


# Running a case.
class _Warnings(logging.Handler):
    """The warnings myelin.cache logs."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []
        logging.getLogger("myelin.cache").addHandler(self)

    def emit(self, record):
        self.messages.append(record.getMessage())


def run_case(directory, corpus, case, warnings):
    """(outcome, detail) of ``case`` run in this process with the cache ``directory``, whose
    secret is the corpus's; ``corpus`` maps a network to (entry file name, right outputs)."""
    index, name, data, model, _ = case
    path = os.path.join(directory, corpus[name][0])
    place(path, data)
    warnings.messages.clear()
    try:
        network, timings = compile_network(name, directory)
        found = outputs(network)
    except Exception as error:  # noqa: BLE001: any exception is the defect counted
        return "error", f"{type(error).__name__}: {error}"
    hit = "cache" in timings
    expected = corpus[name][1]
    if found.keys() != expected.keys() or not all(np.array_equal(found[key], expected[key],
                                                                 equal_nan=True)
                                                  for key in expected):
        return "wrong", "outputs differ" + (" (entry used)" if hit else "")
    if hit:
        return ("accepted", "a raw change was used") if model == "raw" else ("hit", "")
    if not warnings.messages:
        return "silent", "rebuilt without a warning"
    if data != "directory":
        _, timings = compile_network(name, directory)
        if "cache" not in timings:
            return "kept", "the next compile did not use a rebuilt entry"
    return "miss", warnings.messages[0]


def place(path, data):
    """Put ``data`` (bytes, or the name of a special file) at ``path``; ``path + ".valid"``
    holds the sound entry."""
    if os.path.isdir(path) and not os.path.islink(path):
        os.rmdir(path)
    elif os.path.lexists(path):
        os.remove(path)
    if data == "symlink":
        os.symlink(path + ".valid", path)
    elif data == "fifo":
        os.mkfifo(path, 0o600)
    elif data == "directory":
        os.mkdir(path, 0o700)
    else:
        if not isinstance(data, bytes):
            with open(path + ".valid", "rb") as file:
                sound = file.read()
        with open(path, "wb") as file:
            file.write(data if isinstance(data, bytes) else b"" if data == "empty" else sound)
        os.chmod(path, 0o660 if data == "group-writable" else 0o600)
        if data == "other owner":
            os.chown(path, 65534, 65534)


def _serve(connection, directory, corpus_directory, corpus, fingerprint):
    """A worker: its cache ``directory`` made to hold the corpus's secret, then cases until
    told to stop (None). It keys entries with the corpus's source ``fingerprint``, so that
    sources edited while the fuzz runs do not change the keys."""
    from myelin import cachefiles

    cachefiles._fingerprint = fingerprint
    shutil.copy2(os.path.join(corpus_directory, ".key"), directory)
    shutil.copytree(os.path.join(corpus_directory, "kernels"), os.path.join(directory, "kernels"))
    for entry, _ in corpus.values():       # the sound entries, for links and copies
        shutil.copy2(os.path.join(corpus_directory, entry),
                     os.path.join(directory, entry + ".valid"))
    for name, (entry, _) in corpus.items():  # the same keys here (the same sources)?
        shutil.copy2(os.path.join(corpus_directory, entry), directory)
        if "cache" not in compile_network(name, directory)[1]:
            connection.send(f"the worker does not find the entry of {name}")
            return
    warnings = _Warnings()
    connection.send("ready")
    while (case := connection.recv()) is not None:
        connection.send(run_case(directory, corpus, case, warnings))


class Worker:
    """A worker process, the pipe to it and its cache directory (removed when it ends)."""

    def __init__(self, corpus_directory, corpus):
        from myelin import cachefiles

        context = multiprocessing.get_context("spawn")
        self.connection, child = context.Pipe()
        self.directory = tempfile.mkdtemp(prefix="fuzz-cache-")
        self.process = context.Process(target=_serve, daemon=True,
                                       args=(child, self.directory, corpus_directory, corpus,
                                             cachefiles.source_fingerprint()))
        self.process.start()
        child.close()
        answer = self.connection.recv() if self.connection.poll(300) else "no answer"
        if answer != "ready":
            self._end(kill=True)
            raise RuntimeError(f"a fuzz worker did not start: {answer}")

    def run(self, case, timeout):
        """(outcome, detail) of ``case``; after a crash or a hang the worker is gone."""
        try:
            self.connection.send(case)
            if self.connection.poll(timeout):
                return self.connection.recv()
            hung = True
        except (EOFError, OSError):          # the worker is gone
            hung = False
        exit_code = self._end(kill=hung)
        if hung:
            return "hang", f"no answer in {timeout} s"
        return "crash", f"the worker died (exit code {exit_code})"

    def stop(self):
        try:
            self.connection.send(None)
        except OSError:
            pass
        self._end(kill=False)

    def _end(self, kill):
        """Wait for the process (killed if ``kill``, or if it does not end in 30 s), remove
        its directory; returns its exit code."""
        if not kill:
            self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        shutil.rmtree(self.directory, ignore_errors=True)
        return self.process.exitcode


def campaign(cases, corpus_directory, corpus, workers, timeout, verbose):
    """Run ``cases`` in ``workers`` processes; returns {(model, outcome): count}, {(model,
    reason of a miss): count} and the defects [(case, outcome, detail)]."""
    pending = collections.deque(cases)
    counts, reasons, defects = collections.Counter(), collections.Counter(), []
    lock = threading.Lock()

    def work():
        worker = None
        while True:
            with lock:
                if not pending:
                    break
                case = pending.popleft()
            worker = worker or Worker(corpus_directory, corpus)
            outcome, detail = worker.run(case, timeout)
            if outcome in ("crash", "hang"):
                worker = None
            with lock:
                counts[case[3], outcome] += 1
                if outcome == "miss":
                    reasons[case[3], reason(detail)] += 1
                if outcome in DEFECTS:
                    defects.append((case, outcome, detail))
                    if verbose:
                        print(f"case {case[0]} ({case[1]}, {case[3]}: {case[4]}): {outcome}: "
                              f"{detail}", flush=True)
                done = sum(counts.values())
                if done % 100 == 0:
                    print(f"  {done} cases, {len(defects)} defects", flush=True)
        if worker is not None:
            worker.stop()

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return counts, reasons, defects


def reason(message):
    """What rejected an entry, from the warning that says so: its first clause, symbol names
    and numbers left out."""
    text = message.split(".code: ", 1)[-1].split("; compiling afresh")[0].strip("\"")
    text = re.sub(re.escape(externals.PREFIX) + r"[0-9a-f]+", externals.PREFIX + "X", text)
    return re.sub(r"[0-9]+", "N", re.split(r"[,(:]", text)[0]).strip()


def report(counts, reasons, seconds, name="compile", outcomes=OUTCOMES):
    """The table of ``outcomes`` and of the reasons of misses, raw and signed cases apart, of
    the cache ``name``."""
    lines = [f"{sum(counts.values())} mutated {name} cache entries in {seconds:.0f} s",
             f"  {'outcome':10} {'raw':>6} {'signed':>6}"]
    for outcome in outcomes:
        lines.append(f"  {outcome:10} {counts['raw', outcome]:6} {counts['signed', outcome]:6}")
    lines.append(f"  {'rejected because':58} {'raw':>6} {'signed':>6}")
    for text in sorted({text for _, text in reasons},
                       key=lambda text: -reasons["raw", text] - reasons["signed", text]):
        lines.append(f"  {text[:58]:58} {reasons['raw', text]:6} {reasons['signed', text]:6}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fuzz-cache-corpus-") as corpus_directory:
        corpus = make_corpus(corpus_directory)
        with open(os.path.join(corpus_directory, ".key"), "rb") as file:
            secret = file.read()
        entries = {name: (entry, expected, open(os.path.join(corpus_directory, entry),
                                                "rb").read())
                   for name, (entry, expected) in corpus.items()}
        cases = make_cases(entries, secret, args.cases, args.seed)
        counts, reasons, defects = campaign(cases, corpus_directory, corpus, args.workers,
                                   args.timeout, args.verbose)
    print(report(counts, reasons, time.perf_counter() - start))
    for case, outcome, detail in defects[:20]:
        print(f"  defect: case {case[0]} ({case[1]}, {case[3]}: {case[4]}): {outcome}: "
              f"{detail}")
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
