"""The CPU kernel library: which kernels implement which op types, in order of preference."""

from myelin.codegen.llvm import elementwise
from myelin.codegen.llvm.kernels.attention import AttentionKernel
from myelin.codegen.llvm.kernels.base import EmitContext, Kernel
from myelin.codegen.llvm.kernels.conv import ConvKernel
from myelin.codegen.llvm.kernels.blocked import channel_block
from myelin.codegen.llvm.kernels.conv_blocked import BlockedConvKernel
from myelin.codegen.llvm.kernels.conv_channels import ConvChannelsKernel
from myelin.codegen.llvm.kernels.conv_depthwise import DepthwiseConvKernel
from myelin.codegen.llvm.kernels.conv_gemm import ConvGemmKernel
from myelin.codegen.llvm.kernels.conv_int8 import ConvInt8Kernel
from myelin.codegen.llvm.kernels.conv_transpose import ConvTransposeKernel
from myelin.codegen.llvm.kernels.expression import ElementwiseKernel
from myelin.codegen.llvm.kernels.fused import CalculateKernel
from myelin.codegen.llvm.kernels.indexing import KERNELS as _INDEXING_KERNELS
from myelin.codegen.llvm.kernels.matmul import MatMulKernel
from myelin.codegen.llvm.kernels.matmul_int8 import MatMulInt8Kernel
from myelin.codegen.llvm.kernels.movement import (ArgKernel, AssignKernel, ConcatKernel,
                                                  GatherKernel, ShapeKernel, SliceKernel,
                                                  SplitKernel, TransposeKernel, ViewKernel)
from myelin.codegen.llvm.kernels.pool import LRNKernel, PoolKernel
from myelin.codegen.llvm.kernels.pool_blocked import BlockedPoolKernel
from myelin.codegen.llvm.kernels.reduction import ReductionKernel
from myelin.codegen.llvm.kernels.resize import ResizeKernel
from myelin.codegen.llvm.kernels.roi import KERNELS as _ROI_KERNELS
from myelin.codegen.llvm.kernels.sampling import KERNELS as _SAMPLING_KERNELS

_ELEMENTWISE = ElementwiseKernel()
_VIEW = ViewKernel()
_LIBRARY = {
    "MatMul": [MatMulKernel()],
    "FusedMatMul": [MatMulKernel()],
    "MatMulInteger": [MatMulInt8Kernel()],
    "ConvInteger": [DepthwiseConvKernel(), ConvInt8Kernel()],
    "Calculate": [CalculateKernel()],
    "Transpose": [TransposeKernel()],
    "Concat": [ConcatKernel()],
    "Split": [SplitKernel()],
    "Slice": [SliceKernel()],
    "Gather": [GatherKernel()],
    "ArgMax": [ArgKernel()],
    "ArgMin": [ArgKernel()],
    "Shape": [ShapeKernel()],
    "Size": [ShapeKernel()],
    "Rank": [ShapeKernel()],
    "Assign": [AssignKernel()],
    "Resize": [ResizeKernel()],
    "Attention": [AttentionKernel()],
}
for _type in ViewKernel.TYPES:
    _LIBRARY.setdefault(_type, []).append(_VIEW)
for _type in BlockedPoolKernel.TYPES:
    _LIBRARY.setdefault(_type, []).append(BlockedPoolKernel())
for _type in PoolKernel.TYPES:
    _LIBRARY.setdefault(_type, []).append(PoolKernel())
for _type in ("Conv", "FusedConv"):
    _LIBRARY.setdefault(_type, []).extend([BlockedConvKernel(), ConvChannelsKernel(),
                                          ConvGemmKernel(),
                                          DepthwiseConvKernel(), ConvKernel()])
_LIBRARY.setdefault("ConvTranspose", []).append(ConvTransposeKernel())
_LIBRARY.setdefault("LRN", []).append(LRNKernel())
for _kernel in _INDEXING_KERNELS + _SAMPLING_KERNELS + _ROI_KERNELS:
    _LIBRARY.setdefault(_kernel.TYPE, []).append(_kernel)
for _type in ReductionKernel.TYPES:
    _LIBRARY.setdefault(_type, []).append(ReductionKernel())


def register(op_type, kernel, first=True):
    """Add a kernel for ``op_type``; by default it is tried before the existing ones."""
    kernels = _LIBRARY.setdefault(op_type, [])
    kernels.insert(0 if first else len(kernels), kernel)


def select(step, target):
    """The first kernel that supports ``step`` on ``target``, or None."""
    candidates = list(_LIBRARY.get(step.type, []))
    if elementwise.supported(step.type):
        candidates.append(_ELEMENTWISE)
    for kernel in candidates:
        if kernel.supports(step, target):
            return kernel
    return None


__all__ = ["EmitContext", "Kernel", "channel_block", "register", "select"]
