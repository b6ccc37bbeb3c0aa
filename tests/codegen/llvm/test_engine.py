"""The JIT engine: optimizing and compiling modules leaves no native memory behind."""

import gc
import os

import numpy as np
import pytest
from llvmlite import ir

import myelin
from myelin.codegen.llvm import engine, target

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/statm"),
                                reason="needs Linux's /proc")


def resident_bytes():
    gc.collect()
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _growth(call, times, bound, windows=3):
    """The growth of the resident set over ``times`` calls of ``call``, after warming up: the
    least of up to ``windows`` such windows in a row, the first below ``bound`` ending the
    search. A leak grows every window; the allocator's arenas, grown or trimmed by what ran
    before on other threads, move one window by megabytes either way."""
    for _ in range(20):
        call()
    least = None
    for _ in range(windows):
        before = resident_bytes()
        for _ in range(times):
            call()
        growth = resident_bytes() - before
        least = growth if least is None else min(least, growth)
        if least < bound:
            break
    return least


def test_optimizing_modules_frees_the_pass_pipeline():
    """Each optimization used to leak its module pass manager, about 60 KiB (18 MiB over
    these 300 runs); what is left (llvmlite's pass instrumentation, 1.5 KiB a run) stays far
    below the bound."""
    host = target.host()
    machine = host.machine(opt=3)
    module = ir.Module("m")
    function = ir.Function(module, ir.FunctionType(ir.IntType(32), [ir.IntType(32)]), "f")
    builder = ir.IRBuilder(function.append_basic_block())
    builder.ret(builder.add(function.args[0], ir.Constant(ir.IntType(32), 3)))
    text = str(module)
    growth = _growth(lambda: engine.optimize(engine.parse(text), machine), 300, 6 << 20)
    assert growth < 6 << 20, f"300 optimizations kept {growth / 2**20:.1f} MiB"


def test_compiling_again_and_again_keeps_little_memory():
    """80 compiles of a small flow used to keep about 7 MiB (87 KiB each)."""
    def compile_once():
        flow = myelin.Flow()
        f = myelin.Builder(flow, "f")
        x = f.var("x", myelin.DT_FLOAT, [4, 16])
        f.relu(f.matmul(x, f.array("W", np.ones((16, 8), np.float32))), name="y")
        myelin.Compiler(cache=False).compile(flow)

    growth = _growth(compile_once, 80, 4 << 20)
    assert growth < 4 << 20, f"80 compiles kept {growth / 2**20:.1f} MiB"
