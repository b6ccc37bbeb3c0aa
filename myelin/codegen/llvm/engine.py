"""The JIT engine: verify, optimize and compile LLVM modules to machine code in this process.

Every module is parsed back from text and verified before compilation (llvmlite's IR builder
checks little). Dumps of the IR before and after optimization and of the assembly are kept on
request (``dump=True`` or $MYELIN_DUMP_LLVM / $MYELIN_DUMP_ASM set).
"""

import os

import llvmlite.binding as llvm

from myelin.errors import CompileError


def parse(module_text, name="module"):
    """Parse and verify LLVM IR text; raises CompileError with LLVM's message."""
    try:
        parsed = llvm.parse_assembly(module_text)
        parsed.verify()
    except RuntimeError as error:
        raise CompileError(f"invalid LLVM IR in {name}: {error}") from None
    return parsed


def optimize(parsed, machine, level=3):
    """Run LLVM's standard pipeline at ``level`` over a parsed module (in place).

    LLVM's loop vectorizer, interleaver and unroller are off: the kernels are vectorized
    explicitly, and those passes would only duplicate the scalar remainder loops (doubling
    compile time for no gain).
    """
    if level <= 0:
        return
    tuning = llvm.create_pipeline_tuning_options(speed_level=level)
    tuning.loop_vectorization = False
    tuning.loop_interleaving = False
    tuning.loop_unrolling = False
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(parsed, builder)


class CompiledModule:
    """Machine code for one module, kept alive as long as this object; look up function addresses."""

    def __init__(self, engine, parsed, dumps):
        self._engine = engine
        self._parsed = parsed
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


def compile_module(module, target, opt_level=3, dump=False):
    """Compile an llvmlite ``ir.Module`` for the host ``target``; returns a CompiledModule.

    ``dumps`` of the result holds "llvm" (optimized IR text) and "asm" when ``dump`` is set or
    the environment asks for them (then they are also printed to stderr).
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
            import sys
            print(dumps[kind], file=sys.stderr)
    engine = llvm.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    return CompiledModule(engine, parsed, dumps)


def emit_assembly(module, target, opt_level=3, object_file=False):
    """Assembly text (or object file bytes) for ``module`` on any LLVM target."""
    machine = target.machine(opt=3, reloc="pic", codemodel="default")
    module.triple = target.triple
    module.data_layout = str(machine.target_data)
    parsed = parse(str(module), module.name)
    optimize(parsed, machine, opt_level)
    return machine.emit_object(parsed) if object_file else machine.emit_assembly(parsed)
