"""Building CUDA modules with NVRTC: the modules of every emulated suite and of two imported
networks compile for sm_80 and sm_90; errors name what went wrong (a compile error with
NVRTC's log and the source lines, a bad architecture, NVRTC missing, steps without a CUDA
kernel)."""

import re
import sys

import pytest

import emulator
import myelin
from myelin.codegen.cuda import module, nvrtc, planner
from myelin.codegen.cuda.modulecache import ModuleCache
from myelin.codegen.cuda.target import CudaTarget
from myelin.errors import CompileError, UnsupportedOpError
from test_emulated_ops import SUITES

ARCHS = ("sm_80", "sm_90")


def build_all(kernels):
    """Compile ``kernels`` as one module for each of :data:`ARCHS` (no cache), checking that
    each binary is an ELF CUBIN for its architecture with an entry point per kernel."""
    emulator.require_nvrtc()
    for arch in ARCHS:
        built = module.build(kernels, CudaTarget(arch), cache=ModuleCache(False))
        assert built.origin == "nvrtc" and built.binary.cubin[:4] == b"\x7fELF"
        assert re.search(rf"^\.target {arch}\b", built.binary.ptx, re.M)
        entries = set(re.findall(r"\.entry (\w+)\(", built.binary.ptx))
        assert entries == {kernel.name for kernel in kernels}


@pytest.mark.parametrize("name", sorted(SUITES))
def test_suite_module_compiles(name):
    """The very module test_emulated_ops runs for suite ``name``."""
    build_all(planner.plan(SUITES[name]().flow).kernels())


def _model(name):
    """(flow, input variable, input shape) of an imported PyTorch network."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from myelin.importers.onnx import import_model
    from torch_models import encoder, export, mnist_mlp

    model, shape = {"mlp": (mnist_mlp(), [3, 784]), "encoder": (encoder(), [2, 10, 64])}[name]
    flow = import_model(export(model, torch.zeros(shape)), shapes={"x": shape}).flow
    return flow, flow.vars["main/x"], shape


@pytest.mark.parametrize("name", ["mlp", "encoder"])
def test_network(name, compare, rng):
    """An MNIST MLP and a two-layer transformer encoder: NVRTC compiles their module, and
    emulated they match the reference."""
    flow, x, shape = _model(name)
    build_all(planner.plan(flow).kernels())
    compare(flow, {"main": {x: rng.uniform(-1, 1, shape).astype("float32")}}, 1e-5)


def test_compile_error_quotes_the_source():
    emulator.require_nvrtc()
    source = module.module_source([]) + (
        '\nextern "C" __global__ void broken(float* p) {\n  p[0] = undefined_name;\n}\n')
    line = source.splitlines().index("  p[0] = undefined_name;") + 1
    with pytest.raises(CompileError) as error:
        nvrtc.compile(source, "sm_90")
    message = str(error.value)
    assert f'{nvrtc.SOURCE_NAME}({line}): error: identifier "undefined_name" is undefined' \
        in message
    assert f">{line:5d} |   p[0] = undefined_name;" in message
    assert f" {line - 1:5d} | " in message and f" {line + 1:5d} | }}" in message


def test_bad_architecture():
    with pytest.raises(CompileError, match="not of the form sm_XY"):
        CudaTarget("compute_90")
    emulator.require_nvrtc()
    with pytest.raises(CompileError, match=r"for sm_1 \(NVRTC_ERROR_INVALID_OPTION\)"):
        nvrtc.compile(module.module_source([]), "sm_1")


def test_missing_nvrtc(monkeypatch):
    """Without cuda-bindings, NVRTC is a CompileError saying how to install it, and tests that
    need it skip."""
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(CompileError, match=r"NVRTC cannot be loaded .*myelin\[cuda\]"):
        nvrtc.version()
    with pytest.raises(pytest.skip.Exception, match="NVRTC is not available"):
        emulator.require_nvrtc()


def test_unsupported_steps_are_listed_together():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [5])
    f.op("TopK", [x], attrs={"k": 2})
    f.op("CumSum", [x])
    y = f.var("y", "int32", [5, 3])
    f.matmul(y, y, transpose_b=True)
    with pytest.raises(UnsupportedOpError) as error:
        planner.plan(flow)
    message = str(error.value)
    assert message.startswith("3 ops cannot be compiled")
    for name, op_type in [("f/TopK", "TopK"), ("f/CumSum", "CumSum"), ("f/MatMul", "MatMul")]:
        assert f"{name} ({op_type}: no CUDA kernel supports" in message
