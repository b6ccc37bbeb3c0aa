"""Loop nests over strided tensors, vectorized along the innermost dimension.

An :class:`Operand` is a pointer with one element stride per dimension of an index space
(0 where the operand is broadcast). :func:`elementwise` emits the loop nest that evaluates a
body for every index: adjacent dimensions that are contiguous for all operands are merged
first, outer dimensions become scalar loops, and the innermost one runs in vectors of the
target's width (operands with stride 1 load vectors, stride 0 are splatted once per row),
``UNROLL`` vectors per iteration and then one at a time; the last, partial vector goes through
stack buffers. Any other stride falls back to a scalar loop. :func:`elementwise_count` is
the same over one dimension whose length is known only at run time.
"""

import dataclasses
import math

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil
from myelin.flow import dtypes
# (the stride helpers are the loop nests' and their kernels' too, as loops.contiguous_strides)
from myelin.plan.strides import broadcast_strides, collapse, contiguous_strides  # noqa: F401


@dataclasses.dataclass
class Operand:
    """A tensor seen through an index space: base pointer, dtype, element strides, alignment."""

    ptr: ir.Value
    dtype: str
    strides: tuple
    align: int

    @property
    def itemsize(self):
        return dtypes.itemsize(self.dtype)


def batch_entry(b, base, dtype, batch, shape, strides):
    """``base`` (a pointer to elements of ``dtype``) advanced to entry ``batch`` (an i64, in
    row-major order) of the batch axes ``shape``, by element ``strides`` per axis (0 where a
    broadcast operand has the axis once)."""
    total, rest = irutil.i64(0), batch
    for size, stride in reversed(list(zip(shape, strides))):
        if stride:
            total = b.add(total, b.mul(b.urem(rest, irutil.i64(size)), irutil.i64(stride)))
        rest = b.udiv(rest, irutil.i64(size))
    return irutil.element_ptr(b, base, dtype, total)


UNROLL = 2
"""Vectors per iteration of a row's main loop: two independent chains help memory-bound and
short bodies; more spill registers in long ones (GELU)."""


def lanes(target, dtype):
    """Lanes per vector for one dtype (float16 and bfloat16 are computed in float32)."""
    computed = 4 if dtype in dtypes.REDUCED_FLOAT_TYPES else dtypes.itemsize(dtype)
    return max(1, target.vector_bytes // computed)


def vector_width(target, operands):
    """Lanes per vector for these operands: the target's SIMD bytes over the widest element."""
    return min(lanes(target, op.dtype) for op in operands)


def _row_align(operand, outer_strides, step_bytes):
    """Alignment guaranteed for every access at a multiple of ``step_bytes`` within a row."""
    align = operand.align
    for stride in outer_strides:
        if stride:
            align = math.gcd(align, stride * operand.itemsize)
    return max(math.gcd(align, step_bytes), operand.itemsize)


def outer_loops(builder, shape, operands, strides, body, name="d"):
    """Scalar loops over ``shape``; calls ``body(pointers)`` with each operand's base pointer."""

    def level(axis, pointers):
        if axis == len(shape):
            body(pointers)
            return
        with irutil.for_range(builder, 0, shape[axis], name=f"{name}{axis}") as index:
            moved = []
            for operand, ptr, stride in zip(operands, pointers, strides):
                if stride[axis]:
                    offset = builder.mul(index, irutil.i64(stride[axis]))
                    ptr = irutil.element_ptr(builder, ptr, operand.dtype, offset)
                moved.append(ptr)
            level(axis + 1, moved)

    level(0, [op.ptr for op in operands])


def elementwise(builder, target, shape, inputs, outputs, body, vectorize=True):
    """Emit a loop nest computing ``outputs[k][i] = body(inputs[...][i])[k]`` for all indices i.

    ``body(builder, values, lanes)`` receives the input values (scalars, or vectors of
    ``lanes`` elements) and returns one value per output, of the same width, in each output's
    compute type. The body is emitted once: the last, partial vector of a row is computed in
    small stack buffers that the loop's final iteration reads and writes instead of the tensor.
    The unused lanes of the input buffers hold ones, so no lane divides by zero. A shape
    with a dimension of 0 has no indices: nothing is emitted.
    """
    if 0 in shape:
        return
    operands = list(inputs) + list(outputs)
    shape, strides = collapse(tuple(shape), [op.strides for op in operands])
    if not shape:
        shape, strides = (1,), [(0,) for _ in operands]
    inner = shape[-1]
    width = vector_width(target, operands) if vectorize else 1
    inner_strides = [s[-1] for s in strides]
    if width > 1 and any(s not in (0, 1) for s in inner_strides):
        width = 1
    if width > 1 and inner < width:
        width = max(1, 1 << (inner.bit_length() - 1))  # a narrower vector still helps
    blocks, tail = divmod(inner, width)
    aligns = {id(op): _row_align(op, s[:-1], width * op.itemsize) for op, s in zip(operands, strides)}
    buffers = {}
    if tail:
        entry = builder.function.entry_basic_block
        with builder.goto_block(entry):
            if entry.instructions:
                builder.position_before(entry.instructions[0])
            for op, stride in zip(operands, inner_strides):
                if stride:
                    buffer = builder.alloca(ir.ArrayType(irutil.storage_type(op.dtype), width),
                                            name="tail")
                    buffer.align = width * op.itemsize
                    buffer.type = irutil.PTR  # llvmlite types allocas; the module is opaque
                    buffers[id(op)] = buffer
            for op in inputs:
                if id(op) in buffers:
                    one = irutil.const(irutil.storage_type(op.dtype), 1)
                    for k in range(tail, width):
                        builder.store(one, irutil.element_ptr(builder, buffers[id(op)],
                                                              op.dtype, k))

    def row(pointers):
        values_in = {}
        for operand, ptr, stride in zip(inputs, pointers, inner_strides):
            if stride == 0:
                values_in[id(operand)] = irutil.splat(
                    builder, irutil.load(builder, ptr, operand.dtype, 1, operand.itemsize), width)
        if tail:
            for operand, ptr, stride in zip(inputs, pointers, inner_strides):
                if stride:
                    _copy_elements(builder, operand.dtype, ptr, buffers[id(operand)],
                                   blocks * width, 0, tail)

        def vectors(indices, is_tail=None):
            """Load, compute and store the vectors numbered ``indices`` (i64 values)."""

            def address(operand, ptr, stride, block):
                # Vectors only run over unit strides; a scalar loop may step by any stride.
                offset = builder.mul(block, irutil.i64(width * stride))
                at = irutil.element_ptr(builder, ptr, operand.dtype, offset)
                if is_tail is None:
                    return at
                return builder.select(is_tail, buffers[id(operand)], at)

            loaded = [[values_in[id(op)] if stride == 0 else
                       irutil.load(builder, address(op, ptr, stride, block), op.dtype, width,
                                   aligns[id(op)])
                       for op, ptr, stride in zip(inputs, pointers, inner_strides)]
                      for block in indices]
            results = [body(builder, values, width) for values in loaded]
            for block, values in zip(indices, results):
                for operand, ptr, stride, value in zip(outputs, pointers[len(inputs):],
                                                       inner_strides[len(inputs):], values):
                    irutil.store(builder, value, address(operand, ptr, stride, block),
                                 operand.dtype, aligns[id(operand)])

        # Full groups of UNROLL vectors, then single vectors; the last one may be the tail.
        groups = blocks // UNROLL if width > 1 else 0
        if groups:
            with irutil.for_range(builder, 0, groups, name="u") as group:
                first = builder.mul(group, irutil.i64(UNROLL))
                vectors([builder.add(first, irutil.i64(k)) for k in range(UNROLL)])
        with irutil.for_range(builder, groups * UNROLL, blocks + (1 if tail else 0),
                              name="v") as block:
            vectors([block], builder.icmp_signed("==", block, irutil.i64(blocks)) if tail
                    else None)
        if tail:
            for operand, ptr in zip(outputs, pointers[len(inputs):]):
                _copy_elements(builder, operand.dtype, buffers[id(operand)], ptr, 0,
                               blocks * width, tail)

    outer_loops(builder, shape[:-1], operands, [s[:-1] for s in strides], row)


def elementwise_count(builder, count, width, inputs, outputs, body):
    """:func:`elementwise` over ``count`` elements, an i64 known only at run time, of
    operands of one dimension whose stride is 1, or 0 (an input read once), in vectors of
    ``width``: ``UNROLL`` vectors an iteration, then the rest one vector at a time through
    masked loads and stores, the last partial (its unused input lanes ones). Nothing is
    assumed of the operands' alignment beyond their elements'."""
    splats = {id(op): irutil.splat(builder, irutil.load(builder, op.ptr, op.dtype), width)
              for op in inputs if not op.strides[-1]}

    def vectors(starts, mask=None):
        """Compute the vectors whose first elements are ``starts`` (i64 values), those
        lanes alone where a ``mask`` is given."""
        def load(op, start):
            at = irutil.element_ptr(builder, op.ptr, op.dtype, start)
            if mask is None:
                return irutil.load(builder, at, op.dtype, width)
            value = irutil.masked_load(builder, at, op.dtype, mask)
            return builder.select(mask, value, irutil.const(value.type, 1))
        results = [body(builder, [splats[id(op)] if id(op) in splats else load(op, start)
                                  for op in inputs], width) for start in starts]
        for start, values in zip(starts, results):
            for op, value in zip(outputs, values):
                at = irutil.element_ptr(builder, op.ptr, op.dtype, start)
                if mask is None:
                    irutil.store(builder, value, at, op.dtype)
                else:
                    irutil.masked_store(builder, value, at, op.dtype, mask)

    if width == 1:
        with irutil.for_range(builder, 0, count, name="v") as index:
            vectors([index])
        return
    step = UNROLL * width
    groups = builder.udiv(count, irutil.i64(step))
    with irutil.for_range(builder, 0, groups, name="u") as group:
        first = builder.mul(group, irutil.i64(step))
        vectors([builder.add(first, irutil.i64(k * width)) for k in range(UNROLL)])
    # The rest, fewer than UNROLL vectors, one (masked) vector at a time.
    lanes = ir.Constant(ir.VectorType(irutil.I64, width), list(range(width)))
    with irutil.for_range(builder, builder.mul(groups, irutil.i64(step)), count, width,
                          name="v") as start:
        left = irutil.splat(builder, builder.sub(count, start), width)
        vectors([start], builder.icmp_unsigned("<", lanes, left))


def _copy_elements(builder, dtype, source, target, source_start, target_start, count):
    """Copy ``count`` elements of ``dtype`` (a small constant) between two pointers."""
    storage = irutil.storage_type(dtype)
    size = dtypes.itemsize(dtype)
    for k in range(count):
        value = builder.load(irutil.element_ptr(builder, source, dtype, source_start + k),
                             typ=storage, align=size)
        builder.store(value, irutil.element_ptr(builder, target, dtype, target_start + k),
                      align=size)
