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


def test_a_module_of_glue_alone_is_compiled_without_optimization():
    """Only a module whose every defined function is ``optnone`` (kernels.base.mark_glue)
    counts as glue; a declaration does not count."""
    def module(*attributes):
        text = "".join(f'define void @"f{i}"() {a} {{\n  ret void\n}}\n'
                       for i, a in enumerate(attributes))
        return engine.parse(text + 'declare void @"g"()\n')

    assert engine.glue_only(module("noinline optnone", "noinline nounwind optnone"))
    assert not engine.glue_only(module("noinline optnone", "nounwind"))
    assert not engine.glue_only(module())


def test_blocked_convolution_loops_are_glue(monkeypatch):
    """A blocked convolution's loops over its tiles compile as glue; its tile functions, and
    a depthwise convolution's rows, are optimized; the results are right."""
    from myelin.codegen.llvm.kernels import conv_blocked  # noqa: F401 (the kernel's module)
    glue, optimized = [], []
    compile_module = engine.Compilation._compile

    def sorting(compilation, name, text, opt_level):
        (glue if engine.glue_only(engine.parse(text)) else optimized).append(text)
        return compile_module(compilation, name, text, opt_level)

    monkeypatch.setattr(engine.Compilation, "_compile", sorting)
    rng = np.random.default_rng(0)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [1, 16, 10, 10])
    w = rng.standard_normal((32, 16, 1, 1)).astype(np.float32)
    d = rng.standard_normal((32, 1, 3, 3)).astype(np.float32)
    h = f.relu(f.op("Conv", [x, f.array("W", w)], None, {}))
    y = f.op("Conv", [h, f.array("D", d)], None, {"group": 32, "pads": [1, 1, 1, 1]})
    f.rename(y, "y")
    network = myelin.Compiler(cache=False, threads=1).compile(flow)
    assert {s.kernel.name for s in network.cell("f").steps if s.type in ("Conv", "FusedConv")} \
        == {"BlockedConv"}
    # (the tiles' multiply-adds in functions of their own, named by their IR's hash)
    assert len(glue) == 1 and "fmuladd" not in glue[0]
    assert sum("fmuladd" in text for text in optimized) >= 2      # a tile's, the rows'

    value = rng.standard_normal((1, 16, 10, 10)).astype(np.float32)
    data = network.cell("f").instance()
    data["f/x"] = value
    data.compute()
    hidden = np.maximum(np.einsum("oc,chw->ohw", w[:, :, 0, 0], value[0].astype(np.float64)), 0)
    padded = np.pad(hidden, ((0, 0), (1, 1), (1, 1)))
    want = sum(d[:, 0, i, j, None, None] * padded[:, i:i + 10, j:j + 10]
               for i in range(3) for j in range(3))
    np.testing.assert_allclose(np.asarray(data["f/y"])[0], want, rtol=1e-4, atol=1e-4)
