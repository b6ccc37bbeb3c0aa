"""The compiler driver: a flow in, a :class:`~myelin.runtime.Network` of native cells out.

``Compiler().compile(flow)`` infers inputs and outputs, optimizes a copy of the flow with the
pass pipeline (:mod:`myelin.optimize`), orders every function's ops, picks a kernel for each
op, plans each cell's instance memory (those through :mod:`myelin.plan.planner`, with the CPU
kernels), places the globals, emits one LLVM function per cell,
calling a function per distinct kernel (:mod:`myelin.codegen.llvm.kernelfunc`), and compiles
the cells' module and the kernels' modules for the host CPU, on several threads, unless the
compile cache (:mod:`myelin.codegen.llvm.codecache`) has their code already: a network
compiled before is loaded and bound to this network's globals, and a kernel compiled before
(for any network) is taken from the cache. ``Compiler().emit(flow, triple)`` compiles for
another LLVM target, to assembly or an object file. ``Compiler(backend="cuda")`` compiles for
an NVIDIA GPU instead (:mod:`myelin.cuda`).
"""

import contextlib
import functools
import inspect
import itertools
import json
import logging
import math
import os
import time

import llvmlite.ir as ir
import numpy as np

from myelin import limits, optimize
from myelin.codegen.llvm import (codecache, elementwise, elf, engine, irutil, kernelfunc,
                                 kernels, tuning)
from myelin.codegen.llvm.threads import default_threads
from myelin.codegen.llvm import target as targets
from myelin.codegen.llvm.cell import emit_cell, profile_counters
from myelin.codegen.llvm.externals import Externals, rebind
from myelin.codegen.llvm.kernelcache import KernelCache
from myelin.codegen.llvm.kernels.constants import pass_constants
from myelin.errors import CompileError, FlowError, InputError
from myelin.flow import dtypes, fileformat
from myelin.memory import aligned_zeros
from myelin.optimize import weight_storage
from myelin.plan.cell import CONSTANT
from myelin.plan.planner import Planner
from myelin.progress import Reporter, callback as progress_callback
from myelin.runtime.network import Cell, Network
from myelin.runtime.serialize import Image

log = logging.getLogger("myelin.cache")

_module_ids = itertools.count()
_CACHE_OFF = ("0", "off", "no", "false")
KERNEL_OPT_LEVEL = 3     # LLVM's optimization level for kernel functions
CELL_OPT_LEVEL = 1       # and for the cell functions, which only call them
_CELLS = "cells"         # the name of the module of the cell functions in a compilation
BACKENDS = ("cpu", "cuda")


def _reported(method):
    """``method`` of a Compiler inside its progress reporter's ``with``, which clears what
    it showed when the method returns or raises (the outermost of nested ones)."""
    @functools.wraps(method)
    def reported(self, *args, **kwargs):
        reporter = self.progress if isinstance(self.progress, Reporter) else \
            contextlib.nullcontext()
        with reporter:
            return method(self, *args, **kwargs)
    return reported


class Compiler:
    """Compiles flows for the host CPU.

    ``features`` restricts the CPU features used (a preset such as "sse", "avx", "avx2",
    "noavx512", or "+feat,-feat" items; default: all of the host's, or $MYELIN_CPU_FEATURES).
    ``opt_level`` (0 to 3, default 3) chooses the graph passes (see :mod:`myelin.optimize`);
    ``disable_passes`` names passes to skip, ``dump_flow`` prints the flow after each pass and
    ``debug`` verifies it after each pass.
    ``reuse_memory`` lets locals share instance space when their live ranges do not overlap.
    ``dump`` keeps the optimized LLVM IR and assembly (``net.dumps``).
    ``threads`` is how many threads a large kernel may split its work over (default: the
    cores this process may use, or $MYELIN_THREADS); 1 keeps every cell on its caller's thread.
    As many threads compile the kernels.
    ``profile`` compiles a profiler into every cell: cycle counts per step, summed over all
    calls of all instances, read with ``cell.profile()`` (see :mod:`myelin.runtime.profile`);
    off by default, when the cells have no profiling code at all.
    ``tune`` chooses kernel options (tile sizes) by timing them on each large step's shapes
    at compile time (see :mod:`myelin.codegen.llvm.tuning`); off by default, when every step
    uses its kernel's default. ``tuning_cache`` is the directory where the choices are kept
    for later compiles (default: $MYELIN_CACHE_DIR/tuning, else $XDG_CACHE_HOME/myelin/tuning,
    else ~/.cache/myelin/tuning); False keeps none and measures every time.
    ``cache`` keeps compiled code on disk and loads it when the same network is compiled again
    with the same options for the same CPU (see :mod:`myelin.codegen.llvm.codecache`): None
    (the default) uses $MYELIN_CACHE_DIR/code, else $XDG_CACHE_HOME/myelin/code, else
    ~/.cache/myelin/code, unless $MYELIN_CACHE is "off"; a directory or a CodeCache uses that;
    False keeps nothing. ``timings`` has a "cache" phase instead of "emit" and "llvm" when the
    code came from the cache ("llvm" includes reading the kernels found there).
    ``loops`` maps function names to (condition, [(output, input), ...]), variable names:
    the cell of such a function loops, running its steps again while the condition (a
    one-element output) is true, each output first copied over its input (a loop whose body
    is one cell; :mod:`myelin.control` makes them).
    ``progress`` is called as compiling goes, ``progress(phase, done, total)``: with done = 0
    as each phase starts ("optimize", "plan", "tune", "cache", "emit", "llvm"), after each
    step emitted with the steps done of the total, and with "done" at the end. By default
    (None) a compile that runs for more than a second shows its phase: a tqdm bar where tqdm
    is installed and stderr is a terminal or this runs in a notebook, else INFO lines on the
    ``myelin.progress`` logger (see :mod:`myelin.progress`); False shows nothing.
    ``select(step, target)`` picks each step's kernel (default: the CPU kernel library's
    :func:`~myelin.codegen.llvm.kernels.select`); a planner for another back end passes its
    own, whose ``backend`` attribute names that back end in errors
    (:mod:`myelin.codegen.cuda.planner`).
    ``weights`` ("bfloat16" or "float16"; default None, float32) stores the constant weights
    of float32 matrix products in that type, each rounded to nearest once, and computes the
    products from them with float32 sums: half the bytes to read where a product reads each
    weight once (batch 1; see :mod:`myelin.optimize.weight_storage`).
    ``max_tensor_bytes`` bounds each tensor planned and each cell's instance block (bytes, or
    a size such as "8G"; default $MYELIN_MAX_TENSOR_BYTES, else 4 GiB): a flow asking for more
    raises LimitError at compile time, before anything is allocated (see :mod:`myelin.limits`).
    ``backend`` is "cpu" (the host, through LLVM) or "cuda" (the GPU of ``driver``, default
    this machine's: :func:`myelin.cuda.compile`, with this compiler's ``opt_level``,
    ``reuse_memory`` and ``disable_passes``; options only the CPU back end has raise
    CompileError with it).
    """

    def __init__(self, features=None, opt_level=optimize.DEFAULT_LEVEL, reuse_memory=True,
                 alignment=64, dump=False, disable_passes=(), dump_flow=False, debug=None,
                 threads=None, profile=False, tune=False, tuning_cache=None, cache=None,
                 loops=None, progress=None, select=None, max_tensor_bytes=None, backend="cpu",
                 driver=None, weights=None):
        if backend not in BACKENDS:
            raise CompileError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
        cpu_only = {"features": features is not None, "alignment": alignment != 64,
                    "dump": bool(dump), "dump_flow": bool(dump_flow), "debug": debug is not None,
                    "threads": threads is not None, "profile": bool(profile),
                    "tune": bool(tune), "tuning_cache": tuning_cache is not None,
                    "cache": cache is not None, "loops": bool(loops),
                    "select": select is not None, "max_tensor_bytes": max_tensor_bytes is not None,
                    "weights": weights is not None}
        if backend == "cuda" and any(cpu_only.values()):
            raise CompileError("options of the CPU back end given to backend='cuda': "
                               + ", ".join(name for name, given in cpu_only.items() if given))
        if backend == "cpu" and driver is not None:
            raise CompileError("a driver is for backend='cuda'")
        if weights is not None and weights not in weight_storage.STORAGE_TYPES:
            raise CompileError(f"weights must be one of "
                               f"{', '.join(weight_storage.STORAGE_TYPES)} or None, "
                               f"not {weights!r}")
        self.backend = backend
        self.driver = driver
        self.weights = weights
        self.target = targets.host(features)
        self.max_tensor_bytes = limits.as_bytes(max_tensor_bytes)
        self.select = select or kernels.select
        self.threads = default_threads() if threads is None else int(threads)
        if self.threads < 1:
            raise CompileError(f"threads must be at least 1, not {threads}")
        self.opt_level = opt_level
        self.reuse_memory = reuse_memory
        self.alignment = alignment
        self.dump = dump
        self.disable_passes = tuple(disable_passes)
        self.dump_flow = dump_flow
        self.debug = debug
        self.profile = bool(profile)
        self.tune = bool(tune)
        self.tuning_cache = tuning_cache
        self.loops = dict(loops or {})
        if cache is None:
            off = os.environ.get("MYELIN_CACHE", "").strip().lower() in _CACHE_OFF
            cache = False if off else codecache.CodeCache()
        elif cache is not False and not isinstance(cache, codecache.CodeCache):
            cache = codecache.CodeCache(cache)
        self.cache = cache or None
        self.progress = progress_callback(progress)
        self.timings = {}
        self.report = None

    @_reported
    def compile(self, flow):
        """Compile every function of ``flow`` into a cell; returns a Network.

        ``flow`` itself is left as built (only its IN/OUT flags are inferred); the network's
        ``flow`` is the optimized copy, and ``compiler.report`` lists the passes run. The
        network keeps its object code and symbol table (``network.image``), so it pickles
        and saves (:mod:`myelin.runtime.serialize`).
        """
        if self.backend == "cuda":
            from myelin.runtime.cuda.network import compile as compile_for_gpu
            return compile_for_gpu(flow, self.driver, self.opt_level, self.reuse_memory,
                                   self.disable_passes)
        self.timings = {}
        flow, planned, globals_ = self.prepare(flow, self.target)
        if self.tune:
            self.progress("tune", 0, 0)
            start = time.perf_counter()
            tuner = tuning.Tuner(self.target, self.threads, self.alignment, self.tuning_cache)
            for cell in planned:
                tuner.tune(cell.steps)
            self.timings["tune"] = time.perf_counter() - start

        if self.cache:
            self.progress("cache", 0, 0)
        start = time.perf_counter()
        arrays = self._place_globals(globals_, planned)
        symbols, counters = self._symbols(planned)
        fields = self._cache_fields(flow, planned) if self.cache else None
        loaded = self._load_cached(fields, globals_, counters) if fields and not self.dump \
            else None
        self.timings["cache" if loaded else "emit"] = time.perf_counter() - start
        code, packed, image = loaded or self._generate(planned, symbols, counters, fields,
                                                       globals_)

        cells = []
        for cell in planned:
            symbol = symbols[cell.name]
            cells.append(Cell(cell.name, cell.tensors, cell.steps, code.address(symbol),
                              *cell.sizes, self.alignment, counters[symbol]))
        network = Network(cells, arrays, code, self.target, flow, packed)
        network.dumps = code.dumps
        network.image = Image(image[0], image[1], symbols, self.threads)
        self.progress("done", 0, 0)
        return network

    @_reported
    def emit(self, flow, triple, cpu="generic", features="", object_file=False):
        """Compile ``flow`` for another LLVM target (such as "aarch64-unknown-linux-gnu")
        without running it: returns the assembly text, or the bytes of an object file.

        Each function of the flow becomes ``i32 cell_<name>_<n>(ptr instance)``; the globals,
        packed weights and worker pool the code uses are undefined symbols, ``myelin.ext.``
        and a digest of what each addresses (see :mod:`myelin.codegen.llvm.externals`)."""
        self.timings = {}
        target = targets.cross(triple, cpu, features)
        flow, planned, globals_ = self.prepare(flow, target)
        start = time.perf_counter()
        self._place_globals(globals_, planned)
        module, _, functions = self._emit_module(planned, *self._symbols(planned), target)
        self.timings["emit"] = time.perf_counter() - start
        start = time.perf_counter()
        code = engine.emit_assembly([str(module)] + list(functions.texts.values()), target,
                                    object_file=object_file)
        self.timings["llvm"] = time.perf_counter() - start
        self.progress("done", 0, 0)
        return code

    @_reported
    def prepare(self, flow, target):
        """Optimize a copy of ``flow`` and plan its functions for ``target``: returns (the
        optimized flow, a :class:`~myelin.plan.planner.PlannedCell` per function, its globals
        by name), as :class:`~myelin.plan.planner.Planner` does with this compiler's options
        and its CPU kernels."""
        planner = Planner(self.select, elementwise.supported, self.opt_level,
                          self.reuse_memory, self.alignment, self.disable_passes,
                          self.dump_flow, self.debug, self.loops, self.progress,
                          channel_block=kernels.channel_block, weights=self.weights)
        try:
            with limits.scope(self.max_tensor_bytes):
                return planner.prepare(flow, target)
        finally:
            self.timings.update(planner.timings)
            self.report = planner.report

    def _symbols(self, planned):
        """The function symbol of each cell by name, and its profile counters by symbol
        (None without the profiler)."""
        symbols, counters = {}, {}
        for cell in planned:
            symbol = "cell_" + "".join(c if c.isalnum() else "_" for c in cell.name)
            symbols[cell.name] = f"{symbol}_{len(symbols)}"
            counters[symbols[cell.name]] = profile_counters(cell.steps) if self.profile else None
        return symbols, counters

    def _emit_module(self, planned, symbols, counters, target, cache=None, on_text=None):
        """An LLVM module with the function of every planned cell, its externals and the
        kernel functions it calls (:class:`~myelin.codegen.llvm.kernelfunc.KernelFunctions`,
        looked up by signature in ``cache``, a KernelCache for ``target``, if given, and
        each new module text passed to ``on_text``)."""
        module = ir.Module(name=f"myelin{next(_module_ids)}")
        irutil.set_target(module, target)
        externals = Externals()
        functions = kernelfunc.KernelFunctions(target, cache, on_text)
        total = _steps_with_code(planned)
        done = itertools.count(1)
        self.progress("emit", 0, total)
        pass_constants([step for cell in planned for step in cell.steps])
        for cell in planned:
            symbol = symbols[cell.name]
            emit_cell(module, symbol, cell.steps, target, self.alignment, functions,
                      self.threads, externals, counters[symbol],
                      lambda: self.progress("emit", next(done), total), cell.repeat)
        self.progress("llvm", 0, 0)
        return module, externals, functions

    # Code generation and the compile cache.
    def _generate(self, planned, symbols, counters, fields, globals_):
        """Emit and compile the cells' code (stored in the cache under ``fields`` unless None;
        ``globals_`` maps each global's name to its placed TensorSpec); returns (code, arrays
        made at compile time, (object files, symbol table)) (see :class:`Image`)."""
        start = time.perf_counter()
        # (a dump shows the code of every kernel: none is taken from the cache)
        cache = None if self.dump else self._kernels()
        compilation = engine.Compilation(self.target, self.dump, self.threads)
        early = {}          # the functions found in the cache by symbol as they are emitted

        def compile_ahead(symbol, text):
            entry = cache and cache.load(symbol)
            if entry is not None:
                early[symbol] = entry
            else:
                compilation.add(symbol, text, KERNEL_OPT_LEVEL)

        module, externals, functions = self._emit_module(planned, symbols, counters,
                                                         self.target, cache, compile_ahead)
        self.timings["emit"] += time.perf_counter() - start

        start = time.perf_counter()
        objects = dict(functions.found)
        for symbol, entry in early.items():
            # (its code may use only the symbols this network's kernels were made with)
            if {row[0] for row in entry.symbols} <= externals.addresses.keys():
                objects[symbol] = entry.object
            else:
                compilation.add(symbol, functions.texts[symbol], KERNEL_OPT_LEVEL)
        compilation.add(_CELLS, str(module), CELL_OPT_LEVEL)
        table = externals.table(globals_, counters, self.threads)

        def keep(symbol, object_bytes):       # (a kernel function, as soon as it is compiled)
            if symbol == _CELLS:
                return
            used = _used(table, object_bytes)
            cache.store(symbol, object_bytes, used)
            if symbol in functions.emitted:
                signature, fails = functions.emitted[symbol]
                cache.remember(signature, symbol, fails, object_bytes, used)

        compiled, dumps = compilation.results(
            [_CELLS] + [name for name in compilation.modules if name != _CELLS],
            keep if self.cache and cache else None)
        cells = compiled.pop(_CELLS)
        objects.update(compiled)
        if self.cache:
            for symbol, (signature, fails) in functions.emitted.items():
                if symbol not in compiled:          # (found in the cache by its symbol)
                    cache.remember(signature, symbol, fails, objects[symbol],
                                   _used(table, objects[symbol]))
            if fields:
                self.cache.store(fields, cells, externals.arrays, table,
                                 {"cells": list(symbols), "steps": _steps_with_code(planned)})
        loaded = [cells] + list(objects.values())
        code = engine.load_objects(loaded, self.target, externals.addresses, dumps)
        self.timings["llvm"] = time.perf_counter() - start
        return code, externals.arrays, (loaded, table)

    def _kernels(self):
        """The compile cache's kernel functions for this compile (a
        :class:`~myelin.codegen.llvm.kernelcache.KernelCache`), or None without a cache."""
        cached = self.cache and self.cache.kernels
        return cached and KernelCache(cached, self.target, KERNEL_OPT_LEVEL, self.threads,
                                      self.alignment)

    def _cache_fields(self, flow, planned):
        """The fields of the compile cache's key for ``flow`` planned as ``planned``; None when
        the flow cannot be stored (it has no content digest)."""
        try:
            digest = fileformat.digest(flow)
        except FlowError:
            return None
        steps = [[step.name, step.kernel.kernel_name(step), step.variant, step.choice]
                 for cell in planned for step in cell.steps]
        fields = {**codecache.environment(), "flow": digest, "steps": steps,
                  "batch_size": flow.batch_size,        # (the size of -1 dimensions)
                  "options": {"opt_level": self.opt_level, "reuse_memory": self.reuse_memory,
                              "alignment": self.alignment, "threads": self.threads,
                              "profile": self.profile, "loops": self.loops,
                              "weights": self.weights},
                  "triple": self.target.triple, "cpu": self.target.cpu,
                  "features": self.target.features}
        return json.loads(json.dumps(fields, default=str))

    def _load_cached(self, fields, globals_, counters):
        """(code, arrays made at compile time, (object files, symbol table)) from the cache
        entry for ``fields``, or None
        (with a warning if the entry does not fit this network: its symbols do not bind to
        targets of the sizes recorded, or a cell's function is missing)."""
        entry = self.cache.load(fields)
        if entry is None:
            return None
        kernels, wanted, seen = [], [entry.object], set()
        while wanted:         # the kernels the cells call, and the helpers those call
            for symbol in sorted(elf.undefined_symbols(wanted.pop()) - seen):
                if symbol.startswith(kernelfunc.PREFIX):
                    seen.add(symbol)
                    kernel = self._kernels() and self._kernels().load(symbol)
                    if not kernel:
                        log.info("compile cache entry %s calls kernel %s, whose entry is "
                                 "gone; compiling afresh", entry.path, symbol)
                        return None
                    kernels.append(kernel)
                    wanted.append(kernel.object)
        try:
            addresses = rebind(entry.symbols, globals_, entry.arrays, counters, self.threads)
            for kernel in kernels:      # (their symbols are the network's: no arrays of theirs)
                addresses.update(rebind(kernel.symbols, globals_, entry.arrays, counters,
                                        self.threads))
            code = engine.load_objects([entry.object] + [k.object for k in kernels],
                                       self.target, addresses)
            for symbol in counters:           # the function of every cell
                code.address(symbol)
        except (KeyError, CompileError) as error:
            log.warning("ignoring compile cache entry %s: %s; compiling afresh", entry.path,
                        error)
            return None
        table = {}      # (the kernels' rows are the network's: each symbol once)
        for row in [*entry.symbols, *(row for kernel in kernels for row in kernel.symbols)]:
            table.setdefault(row[0], (row[0], list(row[1]), row[2]))
        return code, entry.arrays, ([entry.object] + [k.object for k in kernels],
                                    list(table.values()))

    def _place_globals(self, globals_, planned):
        """Give each global of the ``planned`` cells memory (aligned, a constant's holding its
        values) and its address; returns {name: (spec, array)}. A constant that no step reads
        as it runs (its kernels packed it at compile time, as a product's weights) stays where
        its values lie, uncopied: BERT-base's weights were in memory once more for nothing."""
        read = _read_at_run_time(planned)
        arrays = {}
        for name, spec in globals_.items():
            dtype = dtypes.to_numpy(spec.dtype)
            if spec.kind == CONSTANT:
                data = spec.var.data
                if data.size != math.prod(spec.shape):
                    raise FlowError(f"constant {name} has {data.size} elements, its shape "
                                    f"{list(spec.shape)} needs {math.prod(spec.shape)}")
                if id(spec) not in read:
                    array = np.ascontiguousarray(data.reshape(spec.shape), dtype).view()
                    array.flags.writeable = False
                    spec.address = array.ctypes.data
                    arrays[name] = (spec, array)
                    continue
            memory_block = aligned_zeros(max(spec.size, 1), self.alignment)
            array = memory_block[:spec.size].view(dtype).reshape(spec.shape)
            if spec.kind == CONSTANT:
                array[...] = data.reshape(spec.shape)
                array.flags.writeable = False    # (the code may hold its values)
            spec.address = memory_block.ctypes.data
            arrays[name] = (spec, array)
        return arrays


def checked_options(options):
    """Compiler ``options`` that a front end keeps to compile later, checked at once so that a
    mistake shows where it is made: InputError names an unknown option (and the known ones),
    and the compiler raises its own error for a value it refuses. Returns ``options``."""
    known = list(inspect.signature(Compiler).parameters)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise InputError(f"unknown compiler options {unknown}; the compiler's options are "
                         f"{', '.join(known)}")
    Compiler(**options)
    return options


def _read_at_run_time(planned):
    """The ids of the tensors (roots) that some step of the ``planned`` cells reads or writes
    as it runs: all of a step's but the inputs its kernel packs at compile time."""
    read = set()
    for cell in planned:
        for step in cell.steps:
            packed = step.kernel.packed_inputs(step)
            read.update(id(t.root()) for i, t in enumerate(step.inputs) if i not in packed)
            read.update(id(t.root()) for t in step.outputs)
    return read


def _used(table, object_bytes):
    """The rows of the symbol ``table`` whose symbols the object file uses."""
    used = elf.undefined_symbols(object_bytes)
    return [row for row in table if row[0] in used]


def _steps_with_code(planned):
    return sum(not step.noop for cell in planned for step in cell.steps)
