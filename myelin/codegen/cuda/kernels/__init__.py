"""The CUDA kernel library: which kernels implement which op types, in order of preference.

:data:`select` is the kernel selector the planner gives the compiler
(:mod:`myelin.codegen.cuda.planner`); its ``backend`` names the back end in errors.
"""

from myelin.codegen.cuda import expressions
from myelin.codegen.cuda.kernels.base import CudaKernel, KernelCode, Launch, Names, Param
from myelin.codegen.cuda.kernels.conv import ConvKernel
from myelin.codegen.cuda.kernels.conv_gemm import ConvGemmKernel
from myelin.codegen.cuda.kernels.conv_transpose import ConvTransposeKernel
from myelin.codegen.cuda.kernels.elementwise import ElementwiseKernel
from myelin.codegen.cuda.kernels.fused import CalculateKernel
from myelin.codegen.cuda.kernels.library import GemmCall, MatMulKernel
from myelin.codegen.cuda.kernels.lrn import LRNKernel
from myelin.codegen.cuda.kernels.movement import (AssignKernel, ConcatKernel, GatherKernel,
                                                  SliceKernel, SplitKernel, TransposeKernel,
                                                  ViewKernel)
from myelin.codegen.cuda.kernels.pooling import PoolKernel
from myelin.codegen.cuda.kernels.reduction import ReductionKernel

_ELEMENTWISE = ElementwiseKernel()
_LIBRARY = {
    "MatMul": [MatMulKernel()],
    "FusedMatMul": [MatMulKernel()],
    "Calculate": [CalculateKernel()],
    "Transpose": [TransposeKernel()],
    "Concat": [ConcatKernel()],
    "Split": [SplitKernel()],
    "Slice": [SliceKernel()],
    "Gather": [GatherKernel()],
    "Assign": [AssignKernel()],
    "Conv": [ConvGemmKernel(), ConvKernel()],
    "FusedConv": [ConvGemmKernel(), ConvKernel()],
    "ConvTranspose": [ConvTransposeKernel()],
    "LRN": [LRNKernel()],
}
for _type in ViewKernel.TYPES:
    _LIBRARY.setdefault(_type, []).append(ViewKernel())
for _type in PoolKernel.TYPES:
    _LIBRARY.setdefault(_type, []).append(PoolKernel())
for _type in ReductionKernel.TYPES:
    _LIBRARY.setdefault(_type, []).append(ReductionKernel())


class _Selector:
    """``select(step, target)``: the first CUDA kernel that supports ``step``, or None."""

    backend = "CUDA"

    def __call__(self, step, target):
        candidates = list(_LIBRARY.get(step.type, []))
        if expressions.supported(step.type):
            candidates.append(_ELEMENTWISE)
        for kernel in candidates:
            if kernel.supports(step, target):
                return kernel
        return None


select = _Selector()

__all__ = ["CudaKernel", "GemmCall", "KernelCode", "Launch", "Names", "Param", "select"]
