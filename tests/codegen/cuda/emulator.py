"""Running generated CUDA kernels without a GPU: the module source compiled as C++ by g++.

The source is exactly the one NVRTC compiles (:func:`myelin.codegen.cuda.module.module_source`);
only ``host/myelin_cuda.h`` differs, standing in for the support header with host versions of
CUDA's built-ins (a fiber per CUDA thread, barriers for warp shuffles and ``__syncthreads``);
g++ compiles it without optimization, which is fastest here. A trampoline per kernel, appended
after the module, calls it with pointers from an array. Launches use the
grid and block that the kernel's :class:`Launch` chooses for :data:`DEVICE`, a small device
(two multiprocessors), so grid-stride loops take several rounds.

:class:`CellMemory` lays out a planned cell's instance block and globals on the host and runs
its kernels in plan order; library calls (GEMM) are done by NumPy from the call's own
parameters, so those are checked too.
"""

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from myelin.codegen.cuda import module, nvrtc
from myelin.codegen.cuda.kernels import GemmCall, KernelCode
from myelin.codegen.cuda.target import Device
from myelin.errors import CompileError
from myelin.flow import dtypes

HOST = Path(__file__).with_name("host")
DEVICE = Device(max_threads_per_block=256, sm_count=2, max_threads_per_sm=512)


def require_nvrtc():
    """Skip the test unless NVRTC can be loaded."""
    try:
        return nvrtc.version()
    except CompileError as error:
        pytest.skip(f"NVRTC is not available: {error}")


def require_gxx():
    """Skip the test unless g++ (for host emulation) is installed."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed: CUDA kernels cannot be emulated on the host")


def _trampoline(kernel):
    args = [f"({p.ctype}*)a[{i}]" for i, p in enumerate(kernel.params)]
    if kernel.status:
        args.append(f"(int*)a[{len(kernel.params)}]")
    return f'extern "C" void emu_{kernel.name}(void** a) {{ {kernel.name}({", ".join(args)}); }}\n'


class Emulator:
    """``kernels`` (KernelCode) compiled for the host in ``directory``."""

    def __init__(self, kernels, directory):
        require_gxx()
        self.kernels = {kernel.name: kernel for kernel in kernels}
        directory = Path(directory)
        source = directory / "module.cpp"
        library = directory / "module.so"
        source.write_text(module.module_source(kernels) + "\n"
                          + "".join(_trampoline(k) for k in kernels))
        result = subprocess.run(["g++", "-std=c++20", "-O0", "-shared", "-fPIC", "-w",
                                 "-I", str(HOST), "-o", str(library), str(source)],
                                capture_output=True, text=True)
        if result.returncode:
            raise AssertionError(f"g++ failed on the generated module:\n{result.stderr[:5000]}")
        self.library = ctypes.CDLL(str(library))
        self.library.emu_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_uint] * 6
        self.library.emu_launch.restype = ctypes.c_int

    def launch(self, kernel, addresses, device=DEVICE):
        """Run ``kernel`` with its arguments at ``addresses`` (ints), as launched on
        ``device``."""
        grid, block, shared = kernel.launch.configure(device)
        assert shared == 0
        args = (ctypes.c_void_p * len(addresses))(*addresses)
        call = ctypes.cast(getattr(self.library, f"emu_{kernel.name}"), ctypes.c_void_p)
        if self.library.emu_launch(call, args, *grid, *block):
            raise AssertionError(f"kernel {kernel.name}: the threads of a block wait at "
                                 f"different barriers")


class CellMemory:
    """The instance block of a planned cell (poisoned: every byte 0xFF, NaN for floats) and
    the network's globals, on the host."""

    def __init__(self, plan, cell, rng=None):
        self.cell = cell
        self.instance = np.full(cell.sizes[0] + 8, 0xFF, np.uint8)
        self.globals = {}
        for name, spec in plan.globals.items():
            numpy_type = dtypes.to_numpy(spec.dtype)
            data = getattr(spec.var, "data", None)
            if data is None:
                data = rng.uniform(-1, 1, spec.shape)
            self.globals[name] = np.array(np.asarray(data).reshape(spec.shape), numpy_type)
        self.status = np.zeros(1, np.int32)

    def spec(self, name):
        """The cell's tensor ``name``."""
        return next(spec for spec in self.cell.tensors if spec.name == name)

    def view(self, tensor):
        """A NumPy array over ``tensor``'s elements."""
        root = tensor.root()
        if root.is_global:
            return self.globals[root.name].reshape(tensor.shape)
        data = self.instance[root.offset:root.offset + tensor.size]
        return data.view(dtypes.to_numpy(tensor.dtype)).reshape(tensor.shape)

    def address(self, tensor):
        return self.view(tensor).ctypes.data

    def run(self, emulator, device=DEVICE):
        """Run the cell's kernels and library calls in order."""
        for step, items in self.cell.work:
            for item in items:
                if isinstance(item, KernelCode):
                    addresses = [self.address(p.tensor) for p in item.params]
                    if item.status:
                        addresses.append(self.status.ctypes.data)
                    emulator.launch(item, addresses, device)
                else:
                    assert isinstance(item, GemmCall)
                    self.gemm(item)

    def gemm(self, call):
        """``call`` done by NumPy, reading and writing memory as its parameters say."""
        itemsize = dtypes.itemsize(call.dtype)

        def matrices(tensor, rows, columns, leading, stride, writeable=False):
            flat = self.view(tensor).reshape(-1)
            return np.lib.stride_tricks.as_strided(
                flat, (call.batch, rows, columns),
                (stride * itemsize, leading * itemsize, itemsize), writeable=writeable)

        a = matrices(call.a, *((call.k, call.m) if call.transpose_a else (call.m, call.k)),
                     call.lda, call.stride_a)
        b = matrices(call.b, *((call.n, call.k) if call.transpose_b else (call.k, call.n)),
                     call.ldb, call.stride_b)
        if call.transpose_a:
            a = a.transpose(0, 2, 1)
        if call.transpose_b:
            b = b.transpose(0, 2, 1)
        c = matrices(call.c, call.m, call.n, call.ldc, call.stride_c, writeable=True)
        c[...] = np.matmul(a.astype(np.float64), b.astype(np.float64))


def run(flow, inputs_by_func, directory, rng=None, **options):
    """Plan ``flow`` for CUDA (``options`` go to the planner) and run each function's cell in
    emulation on its inputs ({variable: array} by function name); only those cells' kernels
    are compiled. Returns the plan and the :class:`CellMemory` of each function after its
    run."""
    from myelin.codegen.cuda import planner

    plan = planner.plan(flow, **options)
    emulator = Emulator([item for name in inputs_by_func for _, items in plan.cell(name).work
                         for item in items if isinstance(item, KernelCode)], directory)
    memories = {}
    for name, inputs in inputs_by_func.items():
        cell = plan.cell(name)
        memory = memories[name] = CellMemory(plan, cell, rng)
        for var, value in inputs.items():
            memory.view(memory.spec(var.name))[...] = value
        memory.run(emulator)
    return plan, memories


def compare(flow, inputs_by_func, directory, tolerance, exact=False, rng=None, **options):
    """:func:`run` ``flow`` and compare every output of each function with the float64
    reference: relative error up to ``tolerance`` (a number, or one per function name),
    equal if ``exact`` or the tolerance is 0. No kernel may set the status word. Returns the
    plan."""
    from jitcheck import relative_error
    from myelin import reference

    plan, memories = run(flow, inputs_by_func, directory, rng, **options)
    for name, inputs in inputs_by_func.items():
        memory = memories[name]
        assert memory.status[0] == 0, f"{name}: a kernel reported bad input"
        limit = tolerance[name] if isinstance(tolerance, dict) else tolerance
        for output, want in reference.run(flow, name, inputs).items():
            got = memory.view(memory.spec(output))
            if exact or limit == 0:
                np.testing.assert_array_equal(got, want, err_msg=f"{name}: {output}")
                continue
            error = relative_error(got, want)
            assert error <= limit, (f"{name}: output {output} relative error {error:.3g} > "
                                    f"{limit:g}\n got {got}\n want {want}")
    return plan
