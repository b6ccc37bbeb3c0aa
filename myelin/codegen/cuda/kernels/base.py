"""The kernel interface of the GPU back end, the record of a generated kernel, and the pieces
of CUDA C that kernels share.

A :class:`CudaKernel` plays the part the CPU's kernels play for the planner (``supports``,
``variant``, ``view``, ``inplace``) and generates the code of one planned step: a list of
:class:`KernelCode` (a ``__global__`` function with its source, its tensors in argument order
and its :class:`Launch`), and, for steps done by a vendor library, of
:class:`~myelin.codegen.cuda.kernels.library.GemmCall`.

Every kernel is specialized to its step's shapes: sizes and strides are constants in the code
and every argument is a pointer to a tensor's first element. Work is spread by grid-stride
loops over *units* (elements, rows, output elements), so any grid size computes everything;
:meth:`Launch.configure` picks the grid for a device. One-element constants are written into
the code as literals instead of being passed.
"""

import dataclasses
import re

import numpy as np

from myelin.codegen.cuda import cudatypes
from myelin.plan.strides import contiguous_strides
from myelin.errors import CompileError
from myelin.plan.cell import CONSTANT
from myelin.plan.kernel import PlannedKernel

DEFAULT_BLOCK = 256     # threads per block of kernels whose code fixes none


class CudaKernel(PlannedKernel):
    """Base class of CUDA kernels (see :class:`~myelin.plan.kernel.PlannedKernel`).
    Subclasses set ``name`` and implement ``generate``."""

    def generate(self, step, names):
        """The kernels (and library calls) computing ``step``, in order; ``names`` makes
        unique C identifiers (:class:`Names`)."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Launch:
    """How a kernel is launched: ``units`` independent pieces of work, each done by
    ``unit_threads`` threads (1, a warp, or a whole block); ``block`` is the block size the
    code requires (its shared memory and reductions are sized for it), or 0 for any multiple
    of ``unit_threads``. The grid-stride loops of the code accept any grid."""

    units: int
    unit_threads: int = 1
    block: int = 0

    def configure(self, device):
        """((grid x, y, z), (block x, y, z), dynamic shared bytes) for ``device``: the
        default block size (or the required one) and enough blocks for every unit, at most
        as many as the device keeps resident at once."""
        block = self.block or min(DEFAULT_BLOCK, device.max_threads_per_block)
        block -= block % self.unit_threads
        if block < self.unit_threads or block > device.max_threads_per_block:
            raise CompileError(f"a kernel needs blocks of {self.block or self.unit_threads} "
                               f"threads, the device allows {device.max_threads_per_block}")
        per_block = block // self.unit_threads
        needed = -(-max(self.units, 1) // per_block)
        resident = device.sm_count * max(device.max_threads_per_sm // block, 1)
        return (max(1, min(needed, resident)), 1, 1), (block, 1, 1), 0


@dataclasses.dataclass(frozen=True)
class Param:
    """A kernel argument: a pointer to ``tensor``'s first element, written if ``write``."""

    tensor: object
    write: bool

    @property
    def ctype(self):
        return cudatypes.storage(self.tensor.dtype)


@dataclasses.dataclass
class KernelCode:
    """A generated ``extern "C" __global__`` function ``name`` computing (part of) step
    ``step``: its definition ``source``, its arguments ``params`` (:class:`Param`, in order),
    its :class:`Launch`. With ``status``, one more last argument is an ``int*`` the kernel
    sets to 1 on bad input (an index out of range), which the runtime reports as an
    InputError of the step."""

    name: str
    step: str
    source: str
    params: tuple
    launch: Launch
    status: bool = False

    @property
    def reads(self):
        return [p.tensor for p in self.params if not p.write]

    @property
    def writes(self):
        return [p.tensor for p in self.params if p.write]


class Names:
    """Unique C identifiers made from step names."""

    def __init__(self):
        self.used = set()

    def unique(self, text):
        base = "k_" + re.sub(r"\W", "_", text)
        name, count = base, 1
        while name in self.used:
            name, count = f"{base}_{count}", count + 1
        self.used.add(name)
        return name


def literal_constant(tensor):
    """The C literal of a one-element constant (in its compute type), or None."""
    root = tensor.root()
    if root.kind != CONSTANT or root.elements != 1 or getattr(root, "var", None) is None:
        return None
    value = np.asarray(root.var.data).reshape(-1)[0]
    return cudatypes.literal(value.item(), tensor.dtype)


class Signature:
    """The pointer arguments of a kernel being generated: each tensor once, in order of
    first use, named ``p0``, ``p1``, ..."""

    def __init__(self):
        self.tensors, self.written = [], []

    def pointer(self, tensor, write=False):
        """The argument name of ``tensor`` (added on first use)."""
        for i, known in enumerate(self.tensors):
            if known is tensor:
                self.written[i] |= write
                return f"p{i}"
        self.tensors.append(tensor)
        self.written.append(write)
        return f"p{len(self.tensors) - 1}"

    def params(self):
        return tuple(Param(t, w) for t, w in zip(self.tensors, self.written))

    def declaration(self, status=False):
        parts = [f"{'' if w else 'const '}{cudatypes.storage(t.dtype)}* p{i}"
                 for i, (t, w) in enumerate(zip(self.tensors, self.written))]
        return ", ".join(parts + (["int* status"] if status else []))


def kernel(name, step, signature, body, launch, status=False):
    """The :class:`KernelCode` of a ``__global__`` function ``name`` with the arguments of
    ``signature`` and the C statements ``body`` (lines, indented by two spaces here)."""
    bounds = f"__launch_bounds__({launch.block}) " if launch.block else ""
    source = (f'extern "C" __global__ void {bounds}{name}({signature.declaration(status)}) {{\n'
              + "".join(f"  {line}\n" for line in body) + "}\n")
    return KernelCode(name, step.name, source, signature.params(), launch, status)


def coordinates(index, shape, stride_lists, prefix):
    """C statements splitting the linear ``index`` (an int64 expression) over the row-major
    ``shape``, and the offset expression of each stride list (strides in elements); only the
    coordinates some offset needs are computed."""
    dense = contiguous_strides(shape)
    lists = [tuple(strides) for strides in stride_lists]
    needed = {a for strides in lists if strides != dense for a, s in enumerate(strides) if s}
    lines, coords, rest = [], {}, index
    for axis in range(len(shape) - 1, 0, -1):
        if axis in needed:
            coords[axis] = f"{prefix}c{axis}"
            lines.append(f"const int64_t {coords[axis]} = {rest} % {shape[axis]};")
        if not any(a < axis for a in needed):
            break
        lines.append(f"const int64_t {prefix}q{axis} = {rest} / {shape[axis]};")
        rest = f"{prefix}q{axis}"
    coords[0] = rest
    offsets = []
    for strides in lists:
        if strides == dense:
            offsets.append(index)
            continue
        terms = [coords[a] if s == 1 else f"{coords[a]} * {s}LL"
                 for a, s in enumerate(strides) if s]
        offsets.append(" + ".join(terms) or "0")
    return lines, offsets


def grid_stride(variable, units):
    """The head of a grid-stride loop over ``units``, one per thread."""
    return (f"for (int64_t {variable} = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; "
            f"{variable} < {units}LL; {variable} += (int64_t)gridDim.x * blockDim.x) {{")


def unit_loop(variable, units, unit_threads, block):
    """The head of a grid-stride loop over ``units`` done by ``unit_threads`` threads each
    (a warp, or the whole block when it equals ``block``); declares ``lane``, the thread's
    index in its unit."""
    if unit_threads == 1:
        return ["const int lane = 0;", grid_stride(variable, units)]
    if unit_threads == block:
        return ["const int lane = threadIdx.x;",
                f"for (int64_t {variable} = blockIdx.x; {variable} < {units}LL; "
                f"{variable} += gridDim.x) {{"]
    per_block = f"(blockDim.x / {unit_threads})"
    return [f"const int lane = threadIdx.x % {unit_threads};",
            f"for (int64_t {variable} = (int64_t)blockIdx.x * {per_block} + threadIdx.x / "
            f"{unit_threads}; {variable} < {units}LL; "
            f"{variable} += (int64_t)gridDim.x * {per_block}) {{"]
