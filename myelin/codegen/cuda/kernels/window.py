"""Sliding windows in CUDA C: the kernel taps of a convolution or pooling window that fall
inside the input, as loop bounds computed once per output element.

Along one spatial axis, output position ``o`` reads input ``o * stride - pad + k * dilation``
for taps ``k`` in ``[0, taps)``. :func:`tap_range` declares the window's start and the taps
``[lo, hi)`` whose input lies in ``[0, size)``, so loops over ``[lo, hi)`` skip the padding
without a test per tap (the CPU's :func:`myelin.codegen.llvm.kernels.conv.tap_range`, in C);
bounds that hold for every output position become constants. :func:`window_loops` nests such
loops over all spatial axes; :func:`split` finds an output element's position.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Axis:
    """One spatial axis of a window: output ``position`` (a C expression), its ``stride``,
    ``pad`` (at the beginning), ``dilation``, ``taps``, input ``size`` and the number of
    ``outputs`` along it."""

    position: str
    stride: int
    pad: int
    dilation: int
    taps: int
    size: int
    outputs: int


def window_axes(g, positions):
    """The :class:`Axis` of each spatial axis of the conv or pool geometry ``g``
    (:func:`myelin.ops.conv.geometry`) at output ``positions`` (C expressions)."""
    return [Axis(positions[a], g.strides[a], g.pads_begin[a], g.dilations[a], g.kernel[a],
                 g.input[a], g.output[a]) for a in range(g.rank)]


def tap_range(axis, prefix):
    """(C statements, lo, hi): ``{prefix}s``, the window's first input position, and the
    bounds of the taps inside the input (C expressions; constants where they hold for every
    output position)."""
    start = f"{prefix}s"
    lines = [f"const int64_t {start} = {axis.position} * {axis.stride}LL - {axis.pad}LL;"]
    d = axis.dilation

    def taps(distance):         # ceil(distance / d) for distance > 0, else <= 0
        return distance if d == 1 else f"({distance} + {d - 1}LL) / {d}LL"

    lo = "0"
    if axis.pad:
        lines.append(f"const int64_t {prefix}lo = {start} < 0 ? {taps(f'-{start}')} : 0;")
        lo = f"{prefix}lo"
    hi = str(axis.taps)
    last = (axis.outputs - 1) * axis.stride - axis.pad + (axis.taps - 1) * d
    if last >= axis.size:
        lines.append(f"const int64_t {prefix}r = {taps(f'{axis.size}LL - {start}')};")
        lines.append(f"const int64_t {prefix}hi = {prefix}r < {axis.taps}LL ? {prefix}r : "
                     f"{axis.taps}LL;")
        hi = f"{prefix}hi"
    return lines, lo, hi


def window_loops(axes, in_strides, prefix="w"):
    """(C statements before the loops, loop heads, the input offset of the tap relative to
    the window's first element, the tap's index in the row-major kernel): nested loops over
    the taps of ``axes`` inside the input. ``in_strides`` are the input's strides (in
    elements) of each axis. Loops over one constant tap are left out."""
    before, heads, offsets, taps = [], [], [], []
    tap_stride = 1
    for a in range(len(axes) - 1, -1, -1):
        axis = axes[a]
        lines, lo, hi = tap_range(axis, f"{prefix}{a}")
        before += lines
        if (lo, hi) == ("0", "1"):
            tap_stride *= axis.taps
            continue
        k = f"{prefix}k{a}"
        heads.insert(0, f"for (int64_t {k} = {lo}; {k} < {hi}; ++{k}) {{")
        offsets.append(f"{k} * {axis.dilation * in_strides[a]}LL")
        taps.append(f"{k} * {tap_stride}LL")
        tap_stride *= axis.taps
    return before, heads, " + ".join(offsets) or "0", " + ".join(taps) or "0"


def split(index, shape, prefix):
    """(C statements, coordinate names): the row-major ``shape``'s coordinates of the linear
    ``index`` (an int64 C expression); the first coordinate is not reduced."""
    lines, names, rest = [], [None] * len(shape), index
    for a in range(len(shape) - 1, 0, -1):
        names[a] = f"{prefix}{a}"
        lines.append(f"const int64_t {names[a]} = {rest} % {shape[a]}LL;")
        lines.append(f"const int64_t {prefix}q{a} = {rest} / {shape[a]}LL;")
        rest = f"{prefix}q{a}"
    names[0] = rest
    return lines, names


def window_start(axes, in_strides, prefix="w"):
    """The C offset of a window's first input element (which may lie in the padding) from
    its plane's first element; uses the starts :func:`window_loops` declares."""
    terms = [f"{prefix}{a}s * {s}LL" for a, s in enumerate(in_strides)]
    return " + ".join(terms) or "0"
