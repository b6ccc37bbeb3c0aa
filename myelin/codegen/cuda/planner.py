"""Planning a flow for the GPU: the optimizer, fusion and memory plan every back end shares,
with CUDA kernels chosen per step, then the code of every step.

:func:`plan` plans through :class:`~myelin.plan.planner.Planner` (optimize a copy of the flow,
order and plan each function, place its tensors in instance memory) with the CUDA kernel
selector (:data:`myelin.codegen.cuda.kernels.select`) and the element-wise ops CUDA C computes
(:func:`myelin.codegen.cuda.expressions.supported`), so a step no CUDA kernel supports raises
one UnsupportedOpError listing all of them. Each cell's steps then generate their kernels and
library calls, in execution order; steps that are views generate nothing.
"""

import dataclasses

from myelin import optimize
from myelin.codegen.cuda import expressions, kernels
from myelin.codegen.cuda.kernels.base import KernelCode, Names
from myelin.codegen.cuda.target import CudaTarget
from myelin.plan.planner import Planner

GPU_ALIGNMENT = 256     # bytes: what cudaMalloc guarantees, and a whole number of sectors


@dataclasses.dataclass
class CudaCell:
    """A planned cell: its steps and tensors (with their instance offsets), its (instance
    size, size without reuse), and ``work``: (step, [KernelCode or GemmCall, ...]) in
    execution order."""

    name: str
    steps: list
    tensors: list
    sizes: tuple
    work: list


@dataclasses.dataclass
class CudaPlan:
    """A flow planned for ``target``: the optimized flow, its cells, its globals by name."""

    flow: object
    cells: list
    globals: dict
    target: CudaTarget

    def cell(self, name):
        for cell in self.cells:
            if cell.name == name:
                return cell
        raise KeyError(name)

    def kernels(self):
        """Every generated kernel of every cell, in order (the module's contents)."""
        return [item for cell in self.cells for _, items in cell.work for item in items
                if isinstance(item, KernelCode)]


def plan(flow, target=None, opt_level=optimize.DEFAULT_LEVEL, reuse_memory=True,
         disable_passes=()):
    """Plan every function of ``flow`` for ``target``: a CudaTarget or its architecture's
    name (``"sm_90"``; default: ``CudaTarget()``, sm_80)."""
    target = CudaTarget(target) if isinstance(target, str) else target or CudaTarget()
    # No CUDA kernel computes Attention, MatMulInteger or ConvInteger: attention stays its
    # MatMuls and softmax, integer products int32 MatMuls, QDQ convolutions float Convs.
    planner = Planner(kernels.select, expressions.supported, opt_level, reuse_memory,
                      GPU_ALIGNMENT, tuple(disable_passes) + ("fuse_attention",
                                                              "fuse_integer_matmul",
                                                              "fuse_integer_conv"))
    optimized, planned, globals_ = planner.prepare(flow, target)
    names = Names()
    cells = []
    for cell in planned:
        work = [(step, step.kernel.generate(step, names)) for step in cell.steps
                if not step.noop]
        cells.append(CudaCell(cell.name, cell.steps, cell.tensors, cell.sizes, work))
    return CudaPlan(optimized, cells, globals_, target)
