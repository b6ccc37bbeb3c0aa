"""Direct convolutions: ``Conv`` and ``FusedConv`` (NC[D]HW, any number of spatial axes,
strides, pads, dilations, groups, depthwise), one thread per output pixel and a few output
channels.

A unit of work is one output position of one image and a tile of up to :data:`ROWS` output
channels of one group; neighbouring threads take neighbouring output positions, so their
stores (and, at unit stride, their input loads) are coalesced. Each thread loops over its
group's input channels and the kernel taps inside the input (loop bounds per axis, see
:mod:`~.window`), loads each input element once and multiplies it by the tap's weight of every
channel of its tile, accumulating in registers. The bias and a ``FusedConv``'s epilogue (the
typed recipe, :func:`myelin.codegen.cuda.kernels.fused.epilogue`, as C by
:func:`~.fused.recipe_code`) are applied in registers before the store
(:func:`output_lines`, which the tiled kernel of :mod:`~.conv_gemm` shares).
"""

import math

from myelin.codegen.cuda import cudatypes
from myelin.codegen.cuda.kernels.base import (CudaKernel, Launch, Signature, grid_stride, kernel,
                                              literal_constant)
from myelin.codegen.cuda.kernels.fused import epilogue, recipe_code
from myelin.codegen.cuda.kernels.window import split, window_axes, window_loops, window_start
from myelin.plan.strides import contiguous_strides
from myelin.ops import conv as conv_ops
from myelin.ops.fused import conv_part, first_extra

ROWS = 4        # output channels per thread, at most


def supported(step):
    """True if ``step`` is a ``Conv`` or ``FusedConv`` (with a compilable epilogue) of plain
    images (not in blocks of channels) whose tensors all have one float dtype."""
    if (step.type not in ("Conv", "FusedConv") or len(step.inputs[0].shape) < 3
            or conv_ops.channel_block(step)):
        return False
    dtypes = {t.dtype for t in step.inputs + step.outputs}
    if len(dtypes) != 1 or not dtypes <= cudatypes.FLOATS:
        return False
    return step.type == "Conv" or epilogue(step) is not None


def geometry(step):
    """The :class:`~myelin.ops.conv.Geometry` of a Conv's or FusedConv's convolution."""
    return conv_ops.geometry(conv_part(step))


def output_lines(step, signature, value, at, channel):
    """C statements (a block of their own) storing ``value``, the convolution's sum for
    output channel ``channel`` at output offset ``at`` (C expressions): the bias added, a
    FusedConv's epilogue applied."""
    y = step.outputs[0]
    ctype = cudatypes.compute(y.dtype)
    conv = conv_part(step)
    lines = []
    if len(conv.inputs) > 2:
        bias = conv.inputs[2]
        pointer = signature.pointer(bias)
        value = f"({value} + {cudatypes.load(bias.dtype, f'{pointer}[{channel}]')})"
    lines.append(f"const {ctype} v = {value};")
    value = "v"
    if step.type == "FusedConv":
        values = [value]
        for k, extra in enumerate(step.inputs[first_extra(step):]):
            constant = literal_constant(extra)
            if constant is not None:
                values.append(constant)
                continue
            index = at if extra.shape == y.shape else "0"
            lines.append(f"const {ctype} e{k} = "
                         f"{cudatypes.load(extra.dtype, f'{signature.pointer(extra)}[{index}]')};")
            values.append(f"e{k}")
        statements, (value,) = recipe_code(epilogue(step), values)
        lines += statements
    lines.append(f"{signature.pointer(y, write=True)}[{at}] = {cudatypes.store(y.dtype, value)};")
    return ["{"] + ["  " + line for line in lines] + ["}"]


def channel_tile(channels):
    """Output channels per thread: the largest of ROWS, ..., 2, 1 dividing ``channels``."""
    return next(r for r in range(ROWS, 0, -1) if channels % r == 0)


class ConvKernel(CudaKernel):
    """``Conv`` and ``FusedConv``, directly (see the module docstring)."""

    name = "Conv"

    def supports(self, step, target):
        return supported(step)

    def kernel_name(self, step):
        return f"{step.type}Direct"

    def generate(self, step, names):
        g = geometry(step)
        x, w, y = step.inputs[0], step.inputs[1], step.outputs[0]
        cg, mg = g.in_channels // g.group, g.out_channels // g.group
        rows = channel_tile(mg)
        blocks = mg // rows
        plane, in_plane, ksize = math.prod(g.output), math.prod(g.input), math.prod(g.kernel)
        units = g.batch * g.group * blocks * plane
        ctype = cudatypes.compute(y.dtype)
        signature = Signature()
        xp, wp = signature.pointer(x), signature.pointer(w)
        position_lines, positions = split("pix", g.output, "o")
        in_strides = contiguous_strides(g.input)
        axes = window_axes(g, positions)
        before, heads, offset, tap = window_loops(axes, in_strides)
        body = [grid_stride("u", units)]
        inner = [f"const int64_t pix = u % {plane}LL;",
                 f"const int64_t q = u / {plane}LL;",
                 f"const int64_t m0 = q % {blocks}LL * {rows}LL;",
                 f"const int64_t ng = q / {blocks}LL;      // image * groups + group",
                 f"const int64_t grp = ng % {g.group}LL;"]
        inner += position_lines + before
        inner += [f"const int64_t xb = ng * {cg * in_plane}LL + {window_start(axes, in_strides)};",
                  f"const int64_t wb = (grp * {mg}LL + m0) * {cg * ksize}LL;"]
        inner += [f"{ctype} acc{r} = {cudatypes.literal(0, y.dtype)};" for r in range(rows)]
        inner.append(f"for (int64_t c = 0; c < {cg}LL; ++c) {{")
        taps = [f"const {ctype} xv = "
                f"{cudatypes.load(x.dtype, f'{xp}[xb + c * {in_plane}LL + {offset}]')};",
                f"const int64_t wt = wb + c * {ksize}LL + {tap};"]
        taps += [f"acc{r} += xv * {cudatypes.load(w.dtype, f'{wp}[wt + {r * cg * ksize}LL]')};"
                 for r in range(rows)]
        depth = len(heads)
        inner += ["  " * (i + 1) + head for i, head in enumerate(heads)]
        inner += ["  " * (depth + 1) + line for line in taps]
        inner += ["  " * (i + 1) + "}" for i in range(depth - 1, -1, -1)] + ["}"]
        for r in range(rows):
            inner += output_lines(step, signature, f"acc{r}", f"(ng * {mg}LL + m0 + {r}) * "
                                  f"{plane}LL + pix", f"grp * {mg}LL + m0 + {r}")
        body += ["  " + line for line in inner] + ["}"]
        return [kernel(names.unique(f"{step.type}_{step.name}"), step, signature, body,
                       Launch(units))]
