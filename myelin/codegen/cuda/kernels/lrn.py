"""Local response normalization across channels: ``LRN``, one thread per element.

``y = x / (bias + alpha / size * s) ^ beta``, where ``s`` sums the squares of the element's
neighbours across the channel window ``[c - (size - 1) // 2, c + ceil((size - 1) / 2)]`` (cut
at the first and last channel), as the reference defines it
(:mod:`myelin.ops.conv`). Neighbouring threads take neighbouring spatial positions, so every
load of the window is coalesced.
"""

import math

from myelin.codegen.cuda import cudatypes, expressions
from myelin.codegen.cuda.kernels.base import (CudaKernel, Launch, Signature, grid_stride,
                                              kernel)
from myelin.flow.attributes import Attributes
from myelin.ops.registry import attribute


class LRNKernel(CudaKernel):
    """``LRN`` of a float tensor [N, C, ...] (see the module docstring)."""

    name = "LRN"

    def supports(self, step, target):
        x, y = step.inputs[0], step.outputs[0]
        return (step.type == "LRN" and len(x.shape) >= 2 and x.dtype == y.dtype
                and x.dtype in cudatypes.FLOATS)

    def generate(self, step, names):
        x, y = step.inputs[0], step.outputs[0]
        dtype = y.dtype
        ctype = cudatypes.compute(dtype)
        channels, plane = x.shape[1], math.prod(x.shape[2:])
        size = step.attrs.get_int("size")
        alpha, beta, bias = (attribute(step, name) for name in ("alpha", "beta", "bias"))
        before, after = (size - 1) // 2, -(-(size - 1) // 2)
        signature = Signature()
        xp, yp = signature.pointer(x), signature.pointer(y, write=True)
        scaled = (f"({cudatypes.literal(bias, dtype)} + {cudatypes.literal(alpha / size, dtype)}"
                  f" * s)")
        factor = expressions.expression("Pow", [scaled, cudatypes.literal(-beta, dtype)],
                                        [dtype, dtype], dtype, Attributes())
        inner = [f"const int64_t c = u / {plane}LL % {channels}LL;",
                 f"const int64_t lo = c < {before}LL ? 0 : c - {before}LL;",
                 f"const int64_t hi = c + {after}LL < {channels}LL ? c + {after}LL : "
                 f"{channels - 1}LL;",
                 f"{ctype} s = {cudatypes.literal(0, dtype)};",
                 "for (int64_t k = lo; k <= hi; ++k) {",
                 f"  const {ctype} v = "
                 f"{cudatypes.load(x.dtype, f'{xp}[u + (k - c) * {plane}LL]')};",
                 "  s += v * v;", "}",
                 f"const {ctype} xv = {cudatypes.load(x.dtype, f'{xp}[u]')};",
                 f"{yp}[u] = {cudatypes.store(dtype, f'xv * {factor}')};"]
        body = [grid_stride("u", y.elements)] + ["  " + line for line in inner] + ["}"]
        return [kernel(names.unique(f"LRN_{step.name}"), step, signature, body,
                       Launch(y.elements))]
