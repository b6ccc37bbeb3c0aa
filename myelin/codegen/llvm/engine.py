"""The JIT engine: verify, optimize and compile LLVM modules to object code, and load object
code into this process, binding the external symbols it refers to.

Every module is parsed back from text and verified before compilation (llvmlite's IR builder
checks little). Dumps of the IR before and after optimization and of the assembly are kept on
request (``dump=True`` or $MYELIN_DUMP_LLVM / $MYELIN_DUMP_ASM set).
"""

import os
import sys
import threading

import llvmlite.binding as llvm
from llvmlite.binding.newpassmanagers import NewPassManager

from myelin.errors import CompileError


def parse(module_text, name="module"):
    """Parse and verify LLVM IR text; raises CompileError with LLVM's message.

    Each module gets an LLVM context of its own, freed with it: in the process's global
    context, the types and constants of every module compiled would stay for good (about
    2 KiB per compile at new shapes)."""
    try:
        parsed = llvm.parse_assembly(module_text, llvm.create_context())
        parsed.verify()
    except RuntimeError as error:
        raise CompileError(f"invalid LLVM IR in {name}: {error}") from None
    return parsed


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
        passes.run(parsed, builder)
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


def compile_object(module, target, opt_level=3, dump=False):
    """Compile an llvmlite ``ir.Module`` for the host ``target`` into an object file; returns
    (object bytes, dumps).

    ``dumps`` holds "llvm" (optimized IR text) and "asm" when ``dump`` is set or the
    environment asks for them (then they are also printed to stderr).
    """
    machine = target.machine(opt=3)
    module.triple = target.triple
    module.data_layout = str(machine.target_data)
    parsed = parse(str(module), module.name)
    optimize(parsed, machine, opt_level)
    dumps = {}
    want_llvm = dump or os.environ.get("MYELIN_DUMP_LLVM")
    want_asm = dump or os.environ.get("MYELIN_DUMP_ASM")
    if want_llvm:
        dumps["llvm"] = str(parsed)
    if want_asm:
        dumps["asm"] = machine.emit_assembly(parsed)
    for kind in ("llvm", "asm"):
        if kind in dumps and os.environ.get(f"MYELIN_DUMP_{kind.upper()}"):
            print(dumps[kind], file=sys.stderr)
    return machine.emit_object(parsed), dumps


# Symbols bound with llvm.add_symbol are process-wide: binding and loading happen together.
_load_lock = threading.Lock()


def load_object(object_bytes, target, symbols=None, dumps=None):
    """Load an object file made by :func:`compile_object` for ``target`` into this process,
    binding its external ``symbols`` (name -> address); returns a CompiledModule."""
    machine = target.machine(opt=3)
    with _load_lock:
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
        for name, address in (symbols or {}).items():
            llvm.add_symbol(name, address)
        engine.add_object_file(llvm.ObjectFileRef.from_data(object_bytes))
        engine.finalize_object()
    return CompiledModule(engine, dumps or {})


def compile_module(module, target, opt_level=3, dump=False, symbols=None):
    """Compile ``module`` for the host ``target`` and load it (binding ``symbols``)."""
    object_bytes, dumps = compile_object(module, target, opt_level, dump)
    return load_object(object_bytes, target, symbols, dumps)


def emit_assembly(module, target, opt_level=3, object_file=False):
    """Assembly text (or object file bytes) for ``module`` on any LLVM target."""
    machine = target.machine(opt=3, reloc="pic", codemodel="default")
    module.triple = target.triple
    module.data_layout = str(machine.target_data)
    parsed = parse(str(module), module.name)
    optimize(parsed, machine, opt_level)
    return machine.emit_object(parsed) if object_file else machine.emit_assembly(parsed)
