"""The JIT engine: verify, optimize and compile LLVM modules to object code, and load object
code into this process, binding the external symbols it refers to.

Every module is parsed back from text and verified before compilation (llvmlite's IR builder
checks little). Dumps of the IR before and after optimization and of the assembly are kept on
request (``dump=True`` or $MYELIN_DUMP_LLVM / $MYELIN_DUMP_ASM set).

:func:`compile_objects` compiles several modules at once, on threads: each module has an
LLVM context and a target machine of its own, which LLVM lets threads use at the same time.
llvmlite serializes every call into LLVM with one process-wide lock, so the two long calls,
the optimization pipeline and machine code generation, are made without it
(:func:`_unlocked`); ctypes releases the GIL while they run. The threads are kept from one
compile to the next (:func:`_compile_pool`).
"""

import concurrent.futures
import ctypes
import os
import sys
import threading

import llvmlite.binding as llvm
from llvmlite.binding import ffi
from llvmlite.binding.newpassmanagers import NewPassManager

from myelin.codegen.llvm import irutil
from myelin.errors import CompileError

# The machine's code generation level (0-3) for a module of glue alone (:func:`glue_only`):
# ResNet-50's and DenseNet-121's blocked convolutions' loops over their chunks of tiles,
# compiled so, took 0.4 and 1.4 s less of LLVM on one thread and ran as fast.
GLUE_MACHINE_LEVEL = 1


def parse(module_text, name="module", context=None):
    """Parse and verify LLVM IR text; raises CompileError with LLVM's message.

    Each module gets an LLVM context of its own (unless ``context`` is given), freed with it:
    in the process's global context, the types and constants of every module compiled would
    stay for good (about 2 KiB per compile at new shapes)."""
    try:
        parsed = llvm.parse_assembly(module_text, context or llvm.create_context())
        parsed.verify()
    except RuntimeError as error:
        raise CompileError(f"invalid LLVM IR in {name}: {error}") from None
    return parsed


def glue_only(parsed):
    """True if every function the parsed module defines is glue (``optnone``,
    :func:`myelin.codegen.llvm.kernels.base.mark_glue`): the module is then compiled without
    LLVM's passes and at the machine's ``GLUE_MACHINE_LEVEL``."""
    defined = [f for f in parsed.functions if not f.is_declaration]
    return bool(defined) and all(b"optnone" in b" ".join(f.attributes).split()
                                 for f in defined)


def optimize(parsed, machine, level=3):
    """Run LLVM's standard pipeline at ``level`` over a parsed module (in place).

    LLVM's loop vectorizer, interleaver and unroller are off: the kernels are vectorized
    explicitly, and those passes would only duplicate the scalar remainder loops (doubling
    compile time for no gain).

    The module pass manager is freed here: llvmlite's ``ModulePassManager`` never frees its
    native object (its ``_dispose`` resolves to ``ObjectRef``'s, which does nothing), which
    leaked the whole pipeline, about 60 KiB, per module. A pass builder is not reused: each run
    registers instrumentation callbacks in it that outlive the run.
    """
    if level <= 0:
        return
    tuning = llvm.create_pipeline_tuning_options(speed_level=level)
    tuning.loop_vectorization = False
    tuning.loop_interleaving = False
    tuning.loop_unrolling = False
    builder = llvm.create_pass_builder(machine, tuning)
    passes = builder.getModulePassManager()
    try:
        _unlocked("LLVMPY_RunNewModulePassManager")(passes, parsed, builder)
    finally:
        NewPassManager._dispose(passes)
        passes.detach()


class CompiledModule:
    """Machine code for one module, kept alive as long as this object; look up function addresses."""

    def __init__(self, engine, dumps):
        self._engine = engine
        self.dumps = dumps

    def address(self, name):
        address = self._engine.get_function_address(name)
        if not address:
            raise CompileError(f"compiled module has no function {name}")
        return address

    def global_address(self, name):
        address = self._engine.get_global_value_address(name)
        if not address:
            raise CompileError(f"compiled module has no global {name}")
        return address


def _unlocked(name):
    """llvmlite's C function ``name``, called without llvmlite's lock (see the module; the
    locked one if this llvmlite wraps its functions otherwise)."""
    function = getattr(ffi.lib, name)
    return getattr(function, "_cfn", function)


def _emit(machine, parsed, object_file):
    """Object code (bytes) or assembly (str) of the parsed module, made without llvmlite's
    lock (as ``TargetMachine.emit_object`` and ``emit_assembly`` do with it)."""
    with ffi.OutputString() as error:
        buffer = _unlocked("LLVMPY_TargetMachineEmitToMemory")(machine, parsed,
                                                               int(object_file), error)
        if not buffer:
            raise CompileError(f"LLVM could not emit code: {error}")
    try:
        data = ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buffer),
                                ffi.lib.LLVMPY_GetBufferSize(buffer))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)
    return data if object_file else data.decode()


def compile_object(module, target, opt_level=3, dump=False):
    """Compile an llvmlite ``ir.Module`` for the host ``target`` into an object file; returns
    (object bytes, dumps) (see :func:`compile_objects`)."""
    irutil.set_target(module, target)
    objects, dumps = compile_objects([str(module)], target, [opt_level], dump)
    return objects[0], dumps


def compile_objects(texts, target, opt_levels, dump=False, workers=1):
    """Compile the modules of LLVM IR ``texts`` (made for the host ``target``, see
    :func:`myelin.codegen.llvm.irutil.set_target`), each at its level of ``opt_levels``, into
    an object file each, on up to ``workers`` threads; returns (the object files' bytes, in
    order, and dumps).

    ``dumps`` holds "llvm" (optimized IR text) and "asm" of every module when ``dump`` is set
    or the environment asks for them (then they are also printed to stderr).
    """
    compilation = Compilation(target, dump, workers)
    # The largest first, so that no thread is left with a large one at the end.
    for index in sorted(range(len(texts)), key=lambda i: -len(texts[i])):
        compilation.add(index, texts[index], opt_levels[index])
    done, dumps = compilation.results(range(len(texts)))
    return [done[index] for index in range(len(texts))], dumps


class Compilation:
    """Modules compiled as they are added, on the process's ``workers`` compile threads
    (where more than one: the caller goes on, emitting the next module, while LLVM, which
    releases the GIL, compiles the ones before), gathered by :meth:`results`; ``dump`` as
    for :func:`compile_objects`."""

    def __init__(self, target, dump=False, workers=1):
        self.target = target
        self.want = {"llvm": dump or os.environ.get("MYELIN_DUMP_LLVM"),
                     "asm": dump or os.environ.get("MYELIN_DUMP_ASM")}
        self.pool = _compile_pool(workers) if workers > 1 else None
        self.modules = {}          # name -> a future, or (text, opt_level) to compile here

    def add(self, name, text, opt_level):
        """Compile the module ``text`` at ``opt_level``; its object file will be ``name``'s."""
        work = (text, opt_level)
        self.modules[name] = self.pool.submit(self._compile, name, *work) if self.pool \
            else work

    def _compile(self, name, text, opt_level):
        parsed = parse(text, f"module {name}")
        if glue_only(parsed):
            opt_level = 0
        machine = self.target.machine(opt=3 if opt_level else GLUE_MACHINE_LEVEL)
        optimize(parsed, machine, opt_level)
        dumped = {"llvm": str(parsed) if self.want["llvm"] else None,
                  "asm": _emit(machine, parsed, False) if self.want["asm"] else None}
        return _emit(machine, parsed, True), dumped

    def _finished(self):
        """(name, (object file, dumps)) of each module, in the order they finish compiling."""
        if self.pool:
            names = {future: name for name, future in self.modules.items()}
            for future in concurrent.futures.as_completed(names):
                yield names[future], future.result()
        else:
            for name, work in self.modules.items():
                yield name, self._compile(name, *work)

    def results(self, order=None, each=None):
        """(the object file of each module by name, and the dumps of the modules in
        ``order``, by default as added). ``each(name, object file)`` is called on this thread
        for each module as soon as it is compiled, while the compile threads go on with the
        others (the compiler writes them to its cache meanwhile)."""
        finished = {}
        for name, result in self._finished():
            finished[name] = result
            if each:
                each(name, result[0])
        done = {name: finished[name] for name in self.modules}       # (in the order added)
        dumps = {kind: "\n".join(done[name][1][kind] for name in order or done)
                 for kind, wanted in self.want.items() if wanted}
        for kind in dumps:
            if os.environ.get(f"MYELIN_DUMP_{kind.upper()}"):
                print(dumps[kind], file=sys.stderr)
        return {name: result[0] for name, result in done.items()}, dumps


_pools = {}
_pools_lock = threading.Lock()


def _compile_pool(workers):
    """The process's pool of ``workers`` compile threads, made once and kept (new threads
    for every compile left the allocator's per-thread arenas growing from compile to compile);
    compiles on several threads at once share it."""
    with _pools_lock:
        if workers not in _pools:
            _pools[workers] = concurrent.futures.ThreadPoolExecutor(
                workers, thread_name_prefix="myelin-compile")
        return _pools[workers]


# Symbols bound with llvm.add_symbol are process-wide: binding and loading happen together.
_load_lock = threading.Lock()


def load_object(object_bytes, target, symbols=None, dumps=None):
    """Load an object file made by :func:`compile_object` for ``target`` into this process,
    binding its external ``symbols`` (name -> address); returns a CompiledModule."""
    return load_objects([object_bytes], target, symbols, dumps)


def load_objects(objects, target, symbols=None, dumps=None):
    """Load object files made by :func:`compile_objects` for ``target`` into this process,
    linked together (a function one defines is called by the others), binding their external
    ``symbols`` (name -> address); returns a CompiledModule."""
    machine = target.machine(opt=3)
    with _load_lock:
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
        for name, address in (symbols or {}).items():
            llvm.add_symbol(name, address)
        for object_bytes in objects:
            engine.add_object_file(llvm.ObjectFileRef.from_data(object_bytes))
        engine.finalize_object()
    return CompiledModule(engine, dumps or {})


def compile_module(module, target, opt_level=3, dump=False, symbols=None):
    """Compile ``module`` for the host ``target`` and load it (binding ``symbols``)."""
    object_bytes, dumps = compile_object(module, target, opt_level, dump)
    return load_object(object_bytes, target, symbols, dumps)


def emit_assembly(texts, target, opt_level=3, object_file=False):
    """Assembly text (or object file bytes) for the modules of LLVM IR ``texts`` (made for
    ``target``, see :func:`myelin.codegen.llvm.irutil.set_target`), linked into one, on any
    LLVM target."""
    machine = target.machine(opt=3, reloc="pic", codemodel="default")
    context = llvm.create_context()
    linked = parse(texts[0], "module 0", context)
    for index, text in enumerate(texts[1:], 1):
        linked.link_in(parse(text, f"module {index}", context))
    optimize(linked, machine, opt_level)
    return _emit(machine, linked, object_file)
