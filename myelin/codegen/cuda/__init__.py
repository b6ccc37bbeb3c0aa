"""The GPU back end: CUDA C generated per planned step, compiled with NVRTC.

A flow is planned as for the CPU (the same optimizer, fusion and memory plan, see
:mod:`~myelin.codegen.cuda.planner`) with CUDA kernels chosen per step
(:mod:`~myelin.codegen.cuda.kernels`): each element-wise op or fused ``Calculate`` becomes one
``__global__`` function generated from its expression (:mod:`~myelin.codegen.cuda.expressions`),
reductions and rows ending in a reduction get warp- or block-level kernels, and matrix
products become library calls (cuBLAS) whose epilogue is a kernel of its own. The kernels of a
network are one CUDA C module (:mod:`~myelin.codegen.cuda.module`), compiled by NVRTC for the
device's architecture (:mod:`~myelin.codegen.cuda.nvrtc`) and cached in memory and on disk
(:mod:`~myelin.codegen.cuda.modulecache`).

Everything here runs without a GPU; the runtime that loads the module and launches its
kernels on a device is :mod:`myelin.runtime.cuda`.
"""
