"""The compiler driver: a flow in, a :class:`~myelin.runtime.Network` of native cells out.

``Compiler().compile(flow)`` infers inputs and outputs, optimizes a copy of the flow with the
pass pipeline (:mod:`myelin.optimize`), orders every function's ops, picks a kernel for each
op, plans each cell's instance memory, places the globals, emits one LLVM function per cell and
compiles them all in one module for the host CPU.
"""

import itertools
import time

import llvmlite.ir as ir

from myelin import optimize
from myelin.codegen.llvm import elementwise, engine, kernels, tuning
from myelin.codegen.llvm.threads import default_threads
from myelin.codegen.llvm import target as targets
from myelin.codegen.llvm.cell import emit_cell, profile_counters
from myelin.errors import CompileError, FlowError, UnsupportedOpError
from myelin.flow import dtypes
from myelin.ops import registry
from myelin.plan import memory
from myelin.plan.cell import CONSTANT, INPUT, LEARNABLE, LOCAL, OUTPUT, Step, TensorSpec
from myelin.runtime.memory import aligned_zeros
from myelin.runtime.network import Cell, Network

_module_ids = itertools.count()


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
    ``profile`` compiles a profiler into every cell: cycle counts per step, summed over all
    calls of all instances, read with ``cell.profile()`` (see :mod:`myelin.runtime.profile`);
    off by default, when the cells have no profiling code at all.
    ``tune`` chooses kernel options (tile sizes) by timing them on each large step's shapes
    at compile time (see :mod:`myelin.codegen.llvm.tuning`); off by default, when every step
    uses its kernel's default. ``tuning_cache`` is the directory where the choices are kept
    for later compiles (default: $MYELIN_CACHE_DIR/tuning, else $XDG_CACHE_HOME/myelin/tuning,
    else ~/.cache/myelin/tuning); False keeps none and measures every time.
    """

    def __init__(self, features=None, opt_level=optimize.DEFAULT_LEVEL, reuse_memory=True,
                 alignment=64, dump=False, disable_passes=(), dump_flow=False, debug=None,
                 threads=None, profile=False, tune=False, tuning_cache=None):
        self.target = targets.host(features)
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
        self.timings = {}
        self.report = None

    def compile(self, flow):
        """Compile every function of ``flow`` into a cell; returns a Network.

        ``flow`` itself is left as built (only its IN/OUT flags are inferred); the network's
        ``flow`` is the optimized copy, and ``compiler.report`` lists the passes run.
        """
        start = time.perf_counter()
        flow.infer_inputs_and_outputs()
        flow.verify()
        flow = flow.copy()
        self.report = optimize.optimize(flow, self.opt_level, self.disable_passes,
                                        self.dump_flow, self.debug,
                                        fusable=elementwise.supported)
        flow.verify()
        self.timings["optimize"] = time.perf_counter() - start

        start = time.perf_counter()
        globals_ = {}
        planned = [self._plan_function(flow, func, globals_) for func in flow.funcs.values()]
        self._check_supported(planned)
        self.timings["plan"] = time.perf_counter() - start

        if self.tune:
            start = time.perf_counter()
            tuner = tuning.Tuner(self.target, self.threads, self.alignment, self.tuning_cache)
            for _, steps, _, _ in planned:
                tuner.tune(steps)
            self.timings["tune"] = time.perf_counter() - start

        start = time.perf_counter()
        arrays = self._place_globals(globals_)
        module = ir.Module(name=f"myelin{next(_module_ids)}")
        packed = []       # arrays kernels make at compile time (packed weights)
        symbols, counters = {}, {}
        for name, steps, tensors, _ in planned:
            symbol = "cell_" + "".join(c if c.isalnum() else "_" for c in name)
            symbol = f"{symbol}_{len(symbols)}"
            symbols[name] = symbol
            counters[name] = profile_counters(steps) if self.profile else None
            emit_cell(module, symbol, steps, self.target, self.alignment, self.threads, packed,
                      counters[name])
        self.timings["emit"] = time.perf_counter() - start

        start = time.perf_counter()
        code = engine.compile_module(module, self.target, dump=self.dump)
        self.timings["llvm"] = time.perf_counter() - start

        cells = []
        for name, steps, tensors, (size, unshared) in planned:
            cells.append(Cell(name, tensors, steps, code.address(symbols[name]), size, unshared,
                              self.alignment, counters[name]))
        network = Network(cells, arrays, code, self.target, flow, packed)
        network.dumps = code.dumps
        return network

    # Planning.
    def _plan_function(self, flow, func, globals_):
        tensors, specs = [], {}

        def spec_of(var):
            if var.is_global:
                spec = globals_.get(var.name)
                if spec is None:
                    spec = self._make_spec(var, CONSTANT if var.constant else LEARNABLE)
                    globals_[var.name] = spec
                if spec not in tensors:
                    tensors.append(spec)
                return spec
            spec = specs.get(var.name)
            if spec is None:
                kind = INPUT if var.is_input else OUTPUT if var.is_output else LOCAL
                spec = self._make_spec(var, kind)
                specs[var.name] = spec
                tensors.append(spec)
            return spec

        steps = []
        for op in flow.order(func):
            step = Step(op.name, op.type, [spec_of(v) for v in op.inputs],
                        [spec_of(v) for v in op.outputs], op.attrs, op=op)
            step.kernel = kernels.select(step, self.target)
            if step.kernel is not None:
                step.variant = step.kernel.variant(step, self.target)
                if step.kernel.view(step) and self._may_view(step):
                    step.outputs[0].view_of = step.inputs[0]
            steps.append(step)
        sizes = None
        if all(step.kernel is not None for step in steps):
            sizes = memory.plan(steps, tensors, self.reuse_memory)
        return func.name, steps, tensors, sizes

    @staticmethod
    def _may_view(step):
        source, out = step.inputs[0], step.outputs[0]
        if (source.root().is_global or source.root().ref) and out.kind in (OUTPUT, INPUT):
            return False       # an output of its own, not the caller's or a global's bytes
        return out.kind != INPUT

    def _make_spec(self, var, kind):
        if not var.dtype:
            raise CompileError(f"variable {var.name} has no data type")
        dtypes.canonical(var.dtype)
        shape = tuple(max(d, 1) for d in var.shape)  # a dynamic dimension counts as 1
        ref = kind == INPUT and var.ref
        spec = TensorSpec(var.name, dtypes.canonical(var.dtype), shape, kind,
                          aliases=list(var.aliases), is_output=var.is_output,
                          alignment=8 if ref else self.alignment, ref=ref)
        spec.var = var
        return spec

    @staticmethod
    def _check_supported(planned):
        missing = []
        for _, steps, _, _ in planned:
            for step in steps:
                if step.kernel is None:
                    known = registry.find(step.type) is not None
                    why = "no CPU kernel supports" if known else "unknown op type"
                    shapes = ", ".join(t.type_string() for t in step.inputs)
                    missing.append(f"{step.name} ({step.type}: {why} inputs {shapes})")
        if missing:
            raise UnsupportedOpError(f"{len(missing)} ops cannot be compiled: "
                                     + "; ".join(missing), ops=missing)

    def _place_globals(self, globals_):
        arrays = {}
        for name, spec in globals_.items():
            memory_block = aligned_zeros(max(spec.size, 1), self.alignment)
            array = memory_block[:spec.size].view(dtypes.to_numpy(spec.dtype)).reshape(spec.shape)
            if spec.kind == CONSTANT:
                data = spec.var.data
                if data.size != array.size:
                    raise FlowError(f"constant {name} has {data.size} elements, its shape "
                                    f"{list(spec.shape)} needs {array.size}")
                array[...] = data.reshape(spec.shape)
            spec.address = memory_block.ctypes.data
            arrays[name] = (spec, array)
        return arrays
