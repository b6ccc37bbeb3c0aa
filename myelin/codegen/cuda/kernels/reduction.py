"""Reductions: Sum, Product, Max, Min, All, Any, Count and Mean over any axes, and the
warp- and block-level combining that fused rows share.

Each output element (a *unit*) is reduced by 1, 32 (a warp) or 128/256 threads (a block),
chosen by the length of the reduction (:func:`unit_threads`): each thread folds a strided part
of the unit into an accumulator, then the warp combines its lanes' accumulators with
butterfly shuffles (``__shfl_xor_sync``), and in a block each warp's result goes through
shared memory to the first warp, which combines them. When the reduced axes do not include
the innermost one, neighbouring threads take neighbouring output elements (one thread each),
so their loads are coalesced. Folds are the CPU's
(:mod:`myelin.codegen.llvm.kernels.reduction`), identities the registry's
(:func:`myelin.ops.reduction.identity`): Max and Min propagate NaN like NumPy.
"""

from myelin.codegen.cuda import cudatypes, expressions
from myelin.codegen.cuda.kernels.base import (CudaKernel, Launch, Signature, coordinates,
                                              kernel, unit_loop)
from myelin.codegen.cuda.target import WARP
from myelin.plan.strides import collapse, contiguous_strides
from myelin.flow.attributes import Attributes
from myelin.ops.reduction import FOLDS, identity, mean_scale, reduced_axes


def unit_threads(length):
    """Threads reducing one unit of ``length`` elements: 1, a warp, or a block of 128/256."""
    if length <= 8:
        return 1
    if length <= 256:
        return WARP
    return 128 if length <= 4096 else 256


def block_of(threads):
    """The block size a unit size requires: the block itself for block-level units, else any
    (0)."""
    return threads if threads > WARP else 0


def fold(op_type, dtype, x, y):
    """The C expression folding partial results ``x`` and ``y`` of reduction ``op_type``."""
    return expressions.expression(FOLDS[op_type], [x, y], [dtype, dtype], dtype, Attributes())


def start(op_type, dtype):
    """The C literal a reduction's accumulator starts from."""
    return cudatypes.literal(identity(op_type, dtype), dtype)


def shared_declarations(accumulators, threads):
    """Shared-memory slots of a block-level combine: one per warp and accumulator."""
    if threads <= WARP:
        return []
    return [f"__shared__ {cudatypes.compute(dtype)} {name}_warps[{threads // WARP}];"
            for name, _, dtype in accumulators]


def combine(accumulators, threads):
    """C statements leaving in lane 0 the fold of every thread's ``accumulators`` ((name,
    op type, dtype) triples) over a unit of ``threads`` threads (see the module docstring).
    Every thread of the unit must run them (block-level ones contain __syncthreads)."""
    if threads == 1:
        return []

    def warp_level(indent):
        lines = [f"{indent}for (int d = {WARP // 2}; d > 0; d >>= 1) {{"]
        for name, op_type, dtype in accumulators:
            ctype = cudatypes.compute(dtype)
            lines.append(f"{indent}  const {ctype} {name}_o = "
                         f"__shfl_xor_sync(0xffffffffu, {name}, d);")
            lines.append(f"{indent}  {name} = {fold(op_type, dtype, name, name + '_o')};")
        lines.append(f"{indent}}}")
        return lines

    lines = warp_level("")
    if threads <= WARP:
        return lines
    lines.append(f"if (lane % {WARP} == 0) {{")
    lines += [f"  {name}_warps[lane / {WARP}] = {name};" for name, _, _ in accumulators]
    lines += ["}", "__syncthreads();", f"if (lane < {WARP}) {{"]
    lines += [f"  {name} = lane < {threads // WARP} ? {name}_warps[lane] : "
              f"{start(op_type, dtype)};" for name, op_type, dtype in accumulators]
    lines += warp_level("  ") + ["}", "__syncthreads();   // the slots are free again"]
    return lines


def finish(op_type, dtype, value, count):
    """The C value of a reduction of ``count`` elements whose fold is ``value``: Mean divides."""
    if op_type != "Mean":
        return value
    if cudatypes.is_float(dtype):
        return f"({value} * {cudatypes.literal(mean_scale(count), dtype)})"
    return f"(({cudatypes.compute(dtype)})({value} / {cudatypes.literal(count, dtype)}))"


class ReductionKernel(CudaKernel):
    """Sum/Product/Max/Min/All/Any/Count/Mean over all axes or the ``axis`` attribute."""

    TYPES = ("Sum", "Product", "Max", "Min", "All", "Any", "Count", "Mean")

    def supports(self, step, target):
        if step.type not in self.TYPES or len(step.inputs) != 1 or len(step.outputs) != 1:
            return False
        source, out = step.inputs[0], step.outputs[0]
        if not (cudatypes.supported(source.dtype) and cudatypes.supported(out.dtype)):
            return False
        count = 1
        for axis in reduced_axes(step, len(step.inputs[0].shape)):
            count *= source.shape[axis]
        return out.elements * count == source.elements

    def kernel_name(self, step):
        return f"{step.type}Reduce"

    def variant(self, step, target):
        return f"{target.isa()}t{self._plan(step)[-1]}"

    @staticmethod
    def _plan(step):
        """(kept shape, kept strides, reduced shape, reduced strides, count, threads per
        output element), dimensions merged where they allow."""
        source = step.inputs[0]
        axes = set(reduced_axes(step, len(step.inputs[0].shape)))
        strides = contiguous_strides(source.shape)
        kept = [(d, s) for a, (d, s) in enumerate(zip(source.shape, strides)) if a not in axes]
        reduced = [(d, s) for a, (d, s) in enumerate(zip(source.shape, strides)) if a in axes]
        kept_shape, (kept_strides,) = collapse(tuple(d for d, _ in kept), [[s for _, s in kept]])
        red_shape, (red_strides,) = collapse(tuple(d for d, _ in reduced),
                                             [[s for _, s in reduced]])
        count = 1
        for d in red_shape:
            count *= d
        inner = bool(red_strides) and red_strides[-1] == 1
        threads = unit_threads(count) if inner else 1
        return kept_shape, kept_strides, red_shape, red_strides, count, threads

    def generate(self, step, names):
        source, out = step.inputs[0], step.outputs[0]
        kept_shape, kept_strides, red_shape, red_strides, count, threads = self._plan(step)
        signature = Signature()
        src = signature.pointer(source)
        dst = signature.pointer(out, write=True)
        dtype, op_type = out.dtype, step.type
        ctype = cudatypes.compute(dtype)
        accumulator = [("acc", op_type, dtype)]
        base_lines, (base,) = coordinates("u", kept_shape, [kept_strides], "k")
        part_lines, (part,) = coordinates("r", red_shape, [red_strides], "e")
        value = cudatypes.load(source.dtype, f"{src}[{base} + {part}]")
        if source.dtype != dtype:
            value = expressions.expression("Cast", [value], [source.dtype], dtype, Attributes())
        body = shared_declarations(accumulator, threads)
        body += unit_loop("u", out.elements, threads, block_of(threads))
        body += ["  " + line for line in base_lines]
        body += [f"  {ctype} acc = {start(op_type, dtype)};",
                 f"  for (int64_t r = lane; r < {count}LL; r += {threads}) {{"]
        body += ["    " + line for line in part_lines]
        body += [f"    const {ctype} x = {value};",
                 f"    acc = {fold(op_type, dtype, 'acc', 'x')};", "  }"]
        body += ["  " + line for line in combine(accumulator, threads)]
        body += [f"  if (lane == 0) {dst}[u] = "
                 f"{cudatypes.store(dtype, finish(op_type, dtype, 'acc', count))};", "}"]
        launch = Launch(out.elements, threads, block_of(threads))
        return [kernel(names.unique(f"{step.type}_{step.name}"), step, signature, body, launch)]
