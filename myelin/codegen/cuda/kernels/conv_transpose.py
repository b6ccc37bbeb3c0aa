"""``ConvTranspose`` (NC[D]HW, strides, pads, dilations, output padding and shape, groups),
gathered: one thread per output element.

Output position ``o`` along an axis receives input ``i`` through tap ``k`` when
``i * stride - pad + k * dilation == o``; each thread loops over its group's input channels and
the taps, keeps those for which ``o + pad - k * dilation`` is a multiple of the stride inside
the input, and sums input times weight in a register, so no output element is written twice
(no atomics) and neighbouring threads store neighbouring outputs. The bias is added before
the store.
"""

import math

from myelin.codegen.cuda import cudatypes
from myelin.codegen.cuda.kernels.base import (CudaKernel, Launch, Signature, grid_stride,
                                              kernel)
from myelin.codegen.cuda.kernels.window import split
from myelin.plan.strides import contiguous_strides
from myelin.ops import conv as conv_ops


class ConvTransposeKernel(CudaKernel):
    """``ConvTranspose`` of one float dtype (see the module docstring)."""

    name = "ConvTranspose"

    def supports(self, step, target):
        dtypes = {t.dtype for t in step.inputs + step.outputs}
        return (step.type == "ConvTranspose" and len(step.inputs[0].shape) >= 3
                and len(dtypes) == 1 and dtypes <= cudatypes.FLOATS)

    def generate(self, step, names):
        g = conv_ops.geometry(step)
        x, w, y = step.inputs[0], step.inputs[1], step.outputs[0]
        cg, mg = g.in_channels // g.group, g.out_channels // g.group
        plane, in_plane, ksize = math.prod(g.output), math.prod(g.input), math.prod(g.kernel)
        in_strides, k_strides = contiguous_strides(g.input), contiguous_strides(g.kernel)
        ctype = cudatypes.compute(y.dtype)
        signature = Signature()
        xp, wp = signature.pointer(x), signature.pointer(w)
        position_lines, positions = split("pix", g.output, "o")
        inner = [f"const int64_t pix = u % {plane}LL;",
                 f"const int64_t nm = u / {plane}LL;      // image * channels + channel",
                 f"const int64_t m = nm % {g.out_channels}LL;",
                 f"const int64_t grp = m / {mg}LL;",
                 f"const int64_t xb = (nm / {g.out_channels}LL * {g.in_channels}LL + grp * "
                 f"{cg}LL) * {in_plane}LL;",
                 f"const int64_t wb = (grp * {cg * mg}LL + m % {mg}LL) * {ksize}LL;"]
        inner += position_lines
        inner += [f"{ctype} acc = {cudatypes.literal(0, y.dtype)};",
                  f"for (int64_t c = 0; c < {cg}LL; ++c) {{"]
        depth = 1
        for a in range(g.rank):
            pad = "  " * depth
            inner += [f"{pad}for (int64_t k{a} = 0; k{a} < {g.kernel[a]}LL; ++k{a}) {{",
                      f"{pad}  const int64_t t{a} = {positions[a]} + {g.pads_begin[a]}LL - "
                      f"k{a} * {g.dilations[a]}LL;",
                      f"{pad}  if (t{a} < 0 || t{a} % {g.strides[a]}LL != 0 || "
                      f"t{a} / {g.strides[a]}LL >= {g.input[a]}LL) continue;"]
            depth += 1
        at = " + ".join(f"t{a} / {g.strides[a]}LL * {in_strides[a]}LL" for a in range(g.rank))
        tap = " + ".join(f"k{a} * {k_strides[a]}LL" for a in range(g.rank))
        xv = cudatypes.load(x.dtype, f"{xp}[xb + c * {in_plane}LL + {at}]")
        wv = cudatypes.load(w.dtype, f"{wp}[wb + c * {mg * ksize}LL + {tap}]")
        inner.append(f"{'  ' * depth}acc += {xv} * {wv};")
        inner += ["  " * d + "}" for d in range(depth - 1, -1, -1)]
        value = "acc"
        if len(step.inputs) > 2:
            bias = step.inputs[2]
            value = f"acc + {cudatypes.load(bias.dtype, f'{signature.pointer(bias)}[m]')}"
        inner.append(f"{signature.pointer(y, write=True)}[u] = "
                     f"{cudatypes.store(y.dtype, value)};")
        units = g.batch * g.out_channels * plane
        body = [grid_stride("u", units)] + ["  " + line for line in inner] + ["}"]
        return [kernel(names.unique(f"{step.type}_{step.name}"), step, signature, body,
                       Launch(units))]
