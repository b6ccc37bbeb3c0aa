"""Kernel choice by measurement: time the options a kernel offers for a step, keep the fastest.

Where a step's kernel offers several options (:meth:`Kernel.choices`: tile sizes, panel
groups) and the step does enough work to matter, :class:`Tuner` compiles the step alone once
per option, as a cell of its own for the compiler's target, threads and alignment, runs each
on random inputs (constant inputs keep their data: packing depends on it) and sets
``step.choice`` to the fastest. The options are timed in interleaved rounds, best of several,
so a change in the machine's speed hits them all alike; compiling stops at a time budget per
step, and steps with the same key are measured once.

Answers are cached on disk, one small file per key, ``<the key's SHA-256>.tune`` in
``cache_dir("tuning")`` of :mod:`myelin.cachefiles`: the signed frame every cache uses
(:func:`myelin.cachefiles.write_signed`) around a JSON header of the key, the choice and the
times measured. The key holds everything that changes the answer: the kernel, its variant and
its options, the op's type, attributes, shapes and dtypes, which inputs are constant,
threads, alignment, target triple, CPU name and features, and myelin's version. An answer is
used only if the directory is trusted, the file is private to this user, no larger than
``MAX_ENTRY``, of this format and signed with the directory's secret, and its header has
exactly the writer's fields, describes this key and names an option the kernel offers;
failing any check is a miss: a warning, the step is measured again and the entry replaced.
"""

import ctypes
import dataclasses
import hashlib
import json
import logging
import math
import os
import time

import llvmlite.ir as ir
import numpy as np

from myelin import cachefiles
from myelin.codegen.llvm import engine, kernelfunc
from myelin.codegen.llvm.cell import emit_cell
from myelin.codegen.llvm.externals import Externals
from myelin.errors import MyelinError
from myelin.flow import dtypes
from myelin.memory import aligned_zeros
from myelin.plan import memory
from myelin.plan.cell import CONSTANT, INPUT, OUTPUT, TensorSpec
from myelin.version import __version__

log = logging.getLogger("myelin.tuning")

MIN_FLOPS = 1 << 19      # smaller steps keep the default option
STEP_BUDGET = 2.0        # seconds of compiling options per step (the default is always timed)
ROUNDS = 5               # timed rounds over all options; each option keeps its best
SAMPLE_SECONDS = 2e-3    # the least time of one timed sample (several calls when fast)
MARGIN = 0.95            # another option replaces the default only when this much faster

FORMAT = 2
MAGIC = b"MYELINTU"
SUFFIX = ".tune"
MAX_ENTRY = 1 << 20      # bytes; a larger file is not read
_HEADER = {"key", "choice", "seconds"}

_CELL_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)


class Tuner:
    """Sets ``step.choice`` of large steps with several kernel options to the fastest one.

    ``cache`` is the directory of cached answers (None: ``cache_dir("tuning")`` of
    :mod:`myelin.cachefiles`; False: no cache, always measure). ``budget`` is the seconds of
    compiling spent per step key.
    """

    def __init__(self, target, threads=1, alignment=64, cache=None, budget=STEP_BUDGET,
                 min_flops=MIN_FLOPS):
        self.target = target
        self.threads = threads
        self.alignment = alignment
        if cache is None:
            cache = cachefiles.cache_dir("tuning")
        self.cache = os.fspath(cache) if cache is not False else None
        self.budget = budget
        self.min_flops = min_flops
        self.chosen = {}    # key digest -> option, for the steps tuned by this tuner

    def tune(self, steps):
        """Choose the option of every step worth tuning among ``steps``."""
        for step in steps:
            if step.kernel is None or step.noop or step.kernel.flops(step) < self.min_flops:
                continue
            options = step.kernel.choices(step, self.target)
            if len(options) >= 2:
                step.choice = dict(self.choose(step, options))

    def choose(self, step, options):
        """The fastest of ``options`` for ``step``: from this tuner's answers, the cache or a
        new measurement (then cached)."""
        key = self.key(step, options)
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        option = self.chosen.get(digest)
        if option is None:
            option = self._load(digest, key, options)
        if option is None:
            seconds = measure(step, options, self.target, self.threads, self.alignment,
                              self.budget)
            option = fastest(options, seconds)
            log.info("tuned %s (%s %s, %s): %s -> %s", step.name, step.type,
                     step.kernel.kernel_name(step), _shapes(step),
                     ", ".join(f"{_text(o)} {_ms(s)}" for o, s in zip(options, seconds)),
                     _text(option))
            self._store(digest, {"key": key, "choice": option,
                                 "seconds": [[o, s] for o, s in zip(options, seconds)]})
        self.chosen[digest] = option
        return option

    def key(self, step, options):
        """Everything that changes which option is fastest, as plain JSON values."""
        kernel, target = step.kernel, self.target
        key = {
            "kernel": [type(kernel).__name__, kernel.kernel_name(step),
                       kernel.variant(step, target)],
            "options": options,
            "op": step.type,
            "attrs": {name: str(value) for name, value in sorted(step.attrs.items())},
            "inputs": [[t.dtype, list(t.shape), t.constant_data() is not None]
                       for t in step.inputs],
            "outputs": [[t.dtype, list(t.shape)] for t in step.outputs],
            "threads": self.threads,
            "alignment": self.alignment,
            "triple": target.triple,
            "cpu": target.cpu,
            "features": target.features,
            "myelin": __version__,
        }
        return json.loads(json.dumps(key))

    def _path(self, digest):
        return os.path.join(self.cache, digest + SUFFIX)

    def _load(self, digest, key, options):
        """The cached option for ``key``, or None if there is no sound entry (see the module):
        a missing entry silently, a bad one with a warning."""
        if not self.cache or not cachefiles.trusted(self.cache):
            return None
        path = self._path(digest)
        try:
            text, _ = cachefiles.read_signed(self.cache, path, MAGIC, FORMAT, MAX_ENTRY)
            entry = json.loads(text)
            if not isinstance(entry, dict) or entry.keys() != _HEADER:
                raise ValueError("its header does not have the fields of an entry")
            if entry["key"] != key:
                raise ValueError("it was written for another key")
            if entry["choice"] not in options:
                raise ValueError(f"it names an option the kernel does not offer: "
                                 f"{entry['choice']}")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError, MemoryError) as error:
            log.warning("ignoring tuning cache entry %s: %s; measuring afresh", path, error)
            return None
        log.debug("cached choice for %s: %s", path, _text(entry["choice"]))
        return options[options.index(entry["choice"])]

    def _store(self, digest, entry):
        if self.cache:
            text = json.dumps(entry, indent=1, sort_keys=True)
            cachefiles.write_signed(self.cache, digest + SUFFIX, MAGIC, FORMAT, text.encode())


def fastest(options, seconds):
    """The option with the least time; the default (first) unless another beats it by
    ``MARGIN``. Options without a time (not measured) do not count."""
    best = options[0]
    limit = seconds[0] * MARGIN if seconds[0] is not None else math.inf
    for option, time_ in zip(options[1:], seconds[1:]):
        if time_ is not None and time_ < limit:
            best, limit = option, time_
    return best


def measure(step, options, target, threads=1, alignment=64, budget=STEP_BUDGET):
    """Seconds per run of ``step`` compiled alone with each of ``options`` (None for an option
    not measured: past the budget or not compiled). The first option is always measured."""
    deadline = time.perf_counter() + budget
    cell = _StepCell(step, alignment)
    functions = []
    for option in options:
        if functions and time.perf_counter() > deadline:
            functions.append(None)
            continue
        try:
            functions.append(cell.compile(option, target, threads))
        except MyelinError as error:
            if not functions:
                raise
            log.warning("step %s: option %s does not compile: %s", step.name, _text(option),
                        error)
            functions.append(None)
    return cell.time(functions)


class _StepCell:
    """One step alone in a cell: copies of its tensors (constants keep their data, other
    inputs are random), its instance memory, and the step compiled with a given option."""

    def __init__(self, step, alignment):
        self.step = step
        self.alignment = alignment
        self.keep = []     # compiled code and arrays the code reads
        rng = np.random.default_rng(0)
        copies = {}
        for tensor in step.inputs + step.outputs:
            if id(tensor) not in copies:
                copies[id(tensor)] = self._copy(tensor, tensor in step.outputs)
        self.inputs = [copies[id(t)] for t in step.inputs]
        self.outputs = [copies[id(t)] for t in step.outputs]
        tensors = list(copies.values())
        probe = dataclasses.replace(step, inputs=self.inputs, outputs=self.outputs)
        size, _ = memory.plan([probe], tensors, reuse=False)
        self.memory = aligned_zeros(max(size, 1), alignment)
        for tensor in tensors:
            if tensor.kind == INPUT:
                view = np.ndarray(tensor.shape, dtypes.to_numpy(tensor.dtype), self.memory,
                                  tensor.offset)
                view[...] = _random(rng, view.dtype, view.shape)

    def _copy(self, tensor, is_output):
        """A tensor of the cell like ``tensor``: an output, a constant holding the same data
        at an address of its own, or an input."""
        data = None if is_output else tensor.constant_data()
        kind = OUTPUT if is_output else INPUT if data is None else CONSTANT
        spec = TensorSpec(tensor.name, tensor.dtype, tuple(tensor.shape), kind,
                          alignment=self.alignment)
        spec.var = tensor.root().var
        if data is not None:
            array = np.asarray(data).reshape(spec.shape).astype(dtypes.to_numpy(spec.dtype))
            block = aligned_zeros(max(array.nbytes, 1), self.alignment)
            block.view(array.dtype)[...] = array.ravel()
            spec.address = block.ctypes.data
            self.keep.append(block)
        return spec

    def compile(self, option, target, threads):
        """The native function of the step compiled with ``option``."""
        step = dataclasses.replace(self.step, inputs=self.inputs, outputs=self.outputs,
                                   choice=dict(option))
        module = ir.Module(name=f"tune_{step.name}")
        externals, functions = Externals(), kernelfunc.KernelFunctions(target)
        emit_cell(module, "tune", [step], target, self.alignment, functions, threads,
                  externals)
        texts = [str(module)] + list(functions.texts.values())
        objects, _ = engine.compile_objects(texts, target, [3] * len(texts))
        code = engine.load_objects(objects, target, externals.addresses)
        self.keep += [externals, code]
        return _CELL_FUNCTION(code.address("tune"))

    def time(self, functions):
        """Best seconds per call of each function (None stays None), timed in rounds."""
        address = self.memory.ctypes.data
        best = [None if f is None else math.inf for f in functions]
        for i, function in enumerate(functions):
            if function is not None:
                function(address)     # warm up: first touch of memory, caches
                best[i] = self._sample(function, address, 1)
        calls = max(1, int(SAMPLE_SECONDS / min(b for b in best if b is not None)))
        for _ in range(ROUNDS):
            for i, function in enumerate(functions):
                if function is not None:
                    best[i] = min(best[i], self._sample(function, address, calls))
        return best

    def _sample(self, function, address, calls):
        start = time.perf_counter()
        for _ in range(calls):
            status = function(address)
        elapsed = (time.perf_counter() - start) / calls
        if status:
            raise MyelinError(f"step {self.step.name} failed on random inputs while tuning")
        return elapsed


def _random(rng, dtype, shape):
    if dtype.kind == "f":
        return rng.standard_normal(shape)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, 4, shape)


def _text(option):
    return "{" + ",".join(f"{k}={v}" for k, v in option.items()) + "}"


def _ms(seconds):
    return "skipped" if seconds is None else f"{seconds * 1e3:.3f} ms"


def _shapes(step):
    return " ".join(t.type_string() for t in step.inputs)
