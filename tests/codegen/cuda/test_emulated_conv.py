"""CUDA convolutions, pools and LRN run in host emulation against the float64 reference
(strides, pads, dilations, groups, depthwise, 1x1, auto_pad, FusedConv epilogues, the direct
and the tiled kernels), a ResNet-18 imported from ONNX, and every module compiled by NVRTC."""


import numpy as np
import pytest

import emulator
import myelin
from jitcheck import random_array
from test_jit_conv import CONV_TRANSPOSE, POOL as CPU_POOL
from myelin.codegen.cuda import module, planner
from myelin.codegen.cuda.target import CudaTarget

TOLERANCE = {"float32": 2e-5, "float64": 1e-12}

# (op type, input shapes, attributes); inputs past the first become constants.
CONV = [
    ("Conv", [(2, 4, 7, 8), (6, 2, 3, 3), (6,)],
     dict(group=2, strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2])),
    ("Conv", [(1, 3, 9, 11), (5, 3, 3, 3), (5,)], dict(pads=[1, 1, 1, 1])),
    ("Conv", [(1, 5, 6, 9), (7, 5, 3, 3)], {}),
    ("Conv", [(1, 3, 12, 13), (4, 3, 7, 7)], dict(pads=[3, 3, 3, 3], strides=[2, 2])),
    ("Conv", [(1, 4, 11, 13), (6, 4, 3, 3)], dict(strides=[3, 3], pads=[1, 2, 0, 1])),
    ("Conv", [(2, 16, 5, 5), (12, 16, 1, 1), (12,)], {}),
    ("Conv", [(1, 8, 9, 9), (12, 8, 1, 1)], dict(strides=[2, 2])),
    ("Conv", [(1, 6, 8, 11), (6, 1, 3, 3), (6,)], dict(group=6, pads=[1, 1, 1, 1])),
    ("Conv", [(1, 6, 8, 11), (12, 2, 3, 5)], dict(group=3, dilations=[2, 3],
                                                    auto_pad="SAME_UPPER")),
    ("Conv", [(1, 3, 9, 10), (5, 3, 3, 2)], dict(auto_pad="SAME_LOWER", strides=[2, 3])),
    ("Conv", [(1, 3, 9, 10), (5, 3, 3, 2)], dict(auto_pad="VALID", strides=[2, 1])),
    ("Conv", [(2, 4, 19), (5, 4, 3), (5,)], dict(pads=[2, 1])),
    ("Conv", [(1, 4, 20), (4, 1, 5)], dict(group=4, strides=[2], dilations=[2],
                                           auto_pad="SAME_UPPER")),
    ("Conv", [(1, 2, 4, 5, 6), (3, 2, 2, 3, 2), (3,)], dict(pads=[1, 0, 1, 0, 1, 1],
                                                         strides=[1, 2, 2])),
    ("Conv", [(1, 1, 1, 1), (3, 1, 1, 1), (3,)], {}),
    ("Conv", [(1, 2, 3, 3), (2, 2, 5, 5)], dict(pads=[2, 2, 2, 2])),
]
# Large enough for the tiled kernel: whole and partial tiles, groups, strides, 1x1.
CONV_GEMM = [
    ("Conv", [(1, 8, 10, 11), (64, 8, 3, 3), (64,)], dict(pads=[1, 1, 1, 1])),
    ("Conv", [(2, 6, 9, 8), (40, 6, 3, 2)], dict(strides=[2, 1], pads=[1, 0, 2, 1],
                                                 dilations=[1, 2])),
    ("Conv", [(1, 32, 9, 8), (70, 16, 1, 1), (70,)], dict(group=2)),
    ("Conv", [(1, 3, 4, 9, 10), (33, 3, 3, 3, 3)], dict(pads=[1, 1, 1, 1, 1, 1])),
]
# The CPU tests' transposed convolutions and pools, and global pools over planes long enough
# for warp- and block-level reductions.
POOL = CPU_POOL + [
    ("GlobalAveragePool", [(1, 2, 40, 41)], {}),
    ("GlobalMaxPool", [(1, 2, 20, 13)], {}),
    ("GlobalLpPool", [(1, 2, 9, 8)], dict(p=3)),
]
MAX_POOL_INDICES = [dict(case[2], indices=True) for case in POOL if case[0] == "MaxPool"] + [
    dict(kernel_shape=[3, 2], strides=[2, 3], ceil_mode=1, storage_order=1, indices=True)]


def _flow(cases, dtype, rng):
    """One function per case; the op's first input is the variable ``x``, the others
    constants."""
    flow = myelin.Flow()
    for i, (op_type, shapes, attrs) in enumerate(cases):
        f = myelin.Builder(flow, f"f{i}")
        inputs = [f.var("x", dtype, shapes[0])]
        inputs += [f.array(f"c{k}", random_array(rng, dtype, shape, -1, 1))
                   for k, shape in enumerate(shapes[1:])]
        f.op(op_type, inputs, None, attrs)
    flow.infer_inputs_and_outputs()
    return flow


def _feeds(flow, rng):
    """Fresh random values for every function's inputs."""
    return {name: {var: random_array(rng, var.dtype, var.shape) for var in func.inputs()}
            for name, func in flow.funcs.items()}


def _run(flow, tmp_path, tolerance, rng):
    """Emulate ``flow`` against the reference; the kernel name of each function's steps."""
    emulator.require_gxx()
    plan = emulator.compare(flow, _feeds(flow, rng), tmp_path, tolerance, rng=rng)
    return {cell.name: [step.kernel.kernel_name(step) for step, _ in cell.work]
            for cell in plan.cells}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv(dtype, tmp_path):
    rng = np.random.default_rng()
    kernels = _run(_flow(CONV, dtype, rng), tmp_path, TOLERANCE[dtype], rng)
    assert {names[0] for names in kernels.values()} == {"ConvDirect"}


def test_conv_tiled_as_implicit_matrix_product(tmp_path):
    rng = np.random.default_rng()
    kernels = _run(_flow(CONV_GEMM, "float32", rng), tmp_path, TOLERANCE["float32"], rng)
    assert {names[0] for names in kernels.values()} == {"ConvGemm"}


def _fused_flow(rng):
    """Conv + bias + residual add + Relu (direct and tiled), and a Conv without bias with a
    constant added and a Relu, each fused into one FusedConv."""
    flow = myelin.Flow()
    for i, (x_shape, w_shape, attrs) in enumerate([
            ((1, 4, 9, 10), (8, 4, 3, 3), dict(pads=[1, 1, 1, 1])),
            ((1, 8, 10, 14), (48, 8, 3, 3), dict(pads=[1, 1, 1, 1], strides=[1, 2])),
            ((1, 6, 8, 8), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1]))]):
        f = myelin.Builder(flow, f"f{i}")
        x = f.var("x", "float32", x_shape)
        w = f.array("W", random_array(rng, "float32", w_shape, -1, 1))
        b = f.array("B", random_array(rng, "float32", w_shape[:1], -1, 1))
        conv = f.op("Conv", [x, w, b], None, attrs)
        residual = f.var("r", "float32", conv.shape)
        f.relu(f.add(conv, residual), name="y")
    f = myelin.Builder(flow, "shift")
    x = f.var("x", "float32", (1, 3, 7, 8))
    conv = f.op("Conv", [x, f.array("W", random_array(rng, "float32", (5, 3, 3, 3), -1, 1))],
                None, dict(strides=[2, 2]))
    f.relu(f.add(conv, f.const(0.25)), name="y")
    flow.infer_inputs_and_outputs()
    return flow


def test_fused_conv_epilogues(tmp_path):
    rng = np.random.default_rng()
    kernels = _run(_fused_flow(rng), tmp_path, TOLERANCE["float32"], rng)
    assert kernels == {"f0": ["FusedConvDirect"], "f1": ["FusedConvGemm"],
                       "f2": ["FusedConvDirect"], "shift": ["FusedConvDirect"]}


def test_conv_transpose(tmp_path):
    rng = np.random.default_rng()
    _run(_flow(CONV_TRANSPOSE, "float32", rng), tmp_path, TOLERANCE["float32"], rng)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pools_and_lrn(dtype, tmp_path):
    rng = np.random.default_rng()
    _run(_flow(POOL, dtype, rng), tmp_path, TOLERANCE[dtype], rng)


def test_max_pool_indices(tmp_path):
    rng = np.random.default_rng()
    shapes = [case[1] for case in POOL if case[0] == "MaxPool"] + [[(2, 3, 8, 11)]]
    cases = [("MaxPool", shape, attrs) for shape, attrs in zip(shapes, MAX_POOL_INDICES)]
    _run(_flow(cases, "float32", rng), tmp_path, 0, rng)


def _resnet18(rng):
    """ResNet18(width=8, classes=10) exported by PyTorch and imported, and its input."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from torch_models import ResNet18, export
    from myelin.importers.onnx import import_model

    torch.manual_seed(int(rng.integers(1 << 31)))
    x = random_array(rng, "float32", (1, 3, 32, 32))
    model = export(ResNet18(width=8, classes=10).eval(), (torch.from_numpy(x),),
                   dynamic_batch=False, inputs=("x",), outputs=("y",))
    return import_model(model, shapes={"x": x.shape}).flow, x


def test_resnet18_from_onnx(tmp_path):
    rng = np.random.default_rng()
    flow, x = _resnet18(rng)
    emulator.require_gxx()
    (var,) = flow.funcs["main"].inputs()
    plan = emulator.compare(flow, {"main": {var: x}}, tmp_path, 1e-4, rng=rng)
    kernels = [step.kernel.kernel_name(step) for step, _ in plan.cell("main").work]
    assert kernels.count("FusedConvDirect") + kernels.count("ConvDirect") == 20
    assert "MaxPool" in kernels and "GlobalAveragePool" in kernels


@pytest.mark.parametrize("cases", ["CONV", "CONV_GEMM", "CONV_TRANSPOSE", "POOL", "fused",
                                   "resnet18"])
def test_modules_compile_with_nvrtc(cases):
    emulator.require_nvrtc()
    rng = np.random.default_rng()
    if cases == "fused":
        flow = _fused_flow(rng)
    elif cases == "resnet18":
        flow = _resnet18(rng)[0]
    else:
        flow = _flow(globals()[cases], "float32", rng)
    kernels = planner.plan(flow).kernels()
    built = module.build(kernels, CudaTarget("sm_80"))
    assert built.binary is not None and len(built.kernels) == len(kernels)
