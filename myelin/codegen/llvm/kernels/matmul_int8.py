"""Integer matrix products on bytes: ``MatMulInteger`` (:mod:`myelin.ops.quantized`),
``(a - a_zero) x w`` of uint8 or int8 A and constant int8 or int16 weights, in int32.

It is :mod:`.matmul`'s product (register tiles, panels of B packed at compile time, tasks)
whose elements are groups of narrow values: each int32 lane of a tile sums a group of
products per multiply-add. The multiply-add is chosen by the target's features and the
weights' type:

* ``vpdpbusd`` (AVX512-VNNI, or AVX-VNNI on 256-bit vectors) where the weights are int8:
  four products of unsigned bytes of A by signed bytes of the weights per lane, summed
  exactly. A's bytes are used as they are (int8 A with its sign bit flipped: a + 128), so the
  zero point is a correction per column, ``-(a_zero [+ 128]) * sum_k w[k, j]``, whose sums
  are computed when the weights are packed;
* ``pmaddwd`` everywhere else (SSE2, AVX2, AVX-512BW; on other CPUs LLVM's equivalent of the
  same IR): two products of int16 per lane. Each task packs its rows of A as int16 with the
  zero point subtracted (``a - a_zero`` in [-255, 255]), the weights are packed as int16, and
  every product and pair sum is exact.

Both are exact, so results equal the int32 product's. AVX2's ``vpmaddubsw`` (four bytes
per lane in two instructions) is not used: it adds pairs of uint8 x int8 products in int16
with saturation (2 x 255 x 127 > 32767), which ONNX Runtime's MLAS accepts on AVX2 and
myelin does not.
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from llvmlite import ir

from myelin.codegen.llvm import irutil, loops
from myelin.codegen.llvm.kernels.base import Kernel
from myelin.codegen.llvm.kernels.conv import ival
from myelin.codegen.llvm.kernels.matmul import Plan, Task, choices, pack_constant

A_BYTES = 128 << 10     # the packed rows of A of a task (on its stack)
I32 = ir.IntType(32)


def _pmaddwd(b, x, y, acc):
    """``acc`` + the sums of pairs of int16 products of ``x`` and ``y`` (each int32 lane a
    pair): the IR of x86's ``pmaddwd``, which LLVM selects for it."""
    lanes = irutil.width_of(acc)
    pairs, wide = ir.VectorType(ir.IntType(16), 2 * lanes), ir.VectorType(I32, 2 * lanes)
    products = b.mul(b.sext(b.bitcast(x, pairs), wide), b.sext(b.bitcast(y, pairs), wide))
    undefined = ir.Constant(wide, ir.Undefined)
    even, odd = (b.shuffle_vector(products, undefined, ir.Constant(
        ir.VectorType(I32, lanes), list(range(first, 2 * lanes, 2)))) for first in (0, 1))
    return b.add(acc, b.add(even, odd))


def _vpdpbusd(b, x, y, acc):
    """``acc`` + the sums of four products of unsigned bytes of ``x`` by signed bytes of
    ``y`` per int32 lane (AVX512-VNNI / AVX-VNNI)."""
    name = f"llvm.x86.avx512.vpdpbusd.{irutil.width_of(acc) * 32}"
    function = b.module.globals.get(name) or ir.Function(
        b.module, ir.FunctionType(acc.type, [acc.type] * 3), name)
    return b.call(function, [acc, x, y])


class Product(NamedTuple):
    """A multiply-add on groups of narrow values: ``per_lane`` values of k per int32 lane,
    A packed as ``a_dtype``, the weights as ``w_dtype``."""

    name: str
    per_lane: int
    a_dtype: str
    w_dtype: str
    madd: Callable


PMADDWD = Product("pmaddwd", 2, "int16", "int16", _pmaddwd)
VPDPBUSD = Product("vpdpbusd", 4, "uint8", "int8", _vpdpbusd)


def product(target, w_dtype):
    """The multiply-add for weights of ``w_dtype`` on ``target``."""
    features, lanes = target.feature_set, loops.lanes(target, "int32")
    vnni = (lanes == 16 and "avx512vnni" in features) or (lanes == 8 and (
        "avxvnni" in features or {"avx512vnni", "avx512vl"} <= features))
    return VPDPBUSD if vnni and w_dtype == "int8" else PMADDWD


class _Plan(Plan):
    """The product of A's rows (every batch entry's, one after the other) by the weights,
    in int32 elements each holding ``per_lane`` narrow values of k; a task's row block is
    at most ``A_BYTES`` of packed rows."""

    def __init__(self, ctx, step):
        a, w = step.inputs[:2]
        found = product(ctx.target, w.dtype)
        self.product, self.madd = found.name, found.madd
        self.found, self.depth = found, a.shape[-1]
        m, n = math.prod(a.shape[:-1]), w.shape[1]
        super().__init__(ctx, m, n, -(-self.depth // found.per_lane), (), "int32", "compile",
                         split_rows=m > n, choice=step.choice)

    def _split(self, threads, flops, split_rows):
        super()._split(threads, flops, split_rows)
        most = max(1, A_BYTES // (self.k * self.itemsize * self.rows)) * self.rows
        if self.block_rows > most:
            self.block_rows = most
            self.row_blocks = -(-self.m // most)
            self.tasks = self.batches * self.row_blocks * self.panel_blocks


def _packed(step, plan):
    """(the weights in panels of int32 groups, their column sums or None) for ``plan``."""
    w = step.inputs[1]
    data = np.asarray(w.constant_data()).reshape(w.shape)
    depth, n = data.shape
    per_lane = plan.found.per_lane
    padded = np.zeros((plan.k * per_lane, n), np.int16 if per_lane == 2 else np.int8)
    padded[:depth] = data
    grouped = np.ascontiguousarray(padded.reshape(plan.k, per_lane, n).transpose(0, 2, 1))
    packed = pack_constant(grouped.view(np.int32).reshape(plan.k, n), plan)
    if plan.found is not VPDPBUSD:
        return packed, None
    sums = np.zeros(plan.panels * plan.width, np.int32)
    sums[:n] = data.sum(axis=0, dtype=np.int64)
    return packed, sums


class MatMulInt8Kernel(Kernel):
    """``MatMulInteger`` with constant weights."""

    name = "MatMulInteger"
    shares_code = True

    def supports(self, step, target):
        if step.type != "MatMulInteger":
            return False
        return step.inputs[1].constant_data() is not None

    def variant(self, step, target):
        return f"{target.isa()}{product(target, step.inputs[1].dtype).name}"

    def loaded_inputs(self, step):
        return (2,)     # A's zero point (a variable where quantization is dynamic)

    def choices(self, step, target):
        return choices(target, math.prod(step.inputs[0].shape[:-1]),
                       step.outputs[0].shape[-1], "int32")

    def flops(self, step):
        return 2 * step.inputs[0].shape[-1] * step.outputs[0].elements

    def emit(self, ctx, step):
        plan = _Plan(ctx, step)
        packed, sums = _packed(step, plan)
        ctx.parallel(f"MatMulInteger.{step.name}", step.inputs + step.outputs, plan.tasks,
                     lambda sub, index: _Task(sub, step, plan, packed, sums, index).emit(),
                     outline=plan.large)

    def kept(self, ctx, step):
        packed, sums = _packed(step, _Plan(ctx, step))
        return [packed] if sums is None else [packed, sums]

    def packed_inputs(self, step):
        return (1,)          # (the weights: constant, see supports)


class _Task(Task):
    """A task: a block of A's rows, packed on the stack as the multiply-add reads them, by a
    block of the weights' panels."""

    def __init__(self, ctx, step, plan, packed, sums, index):
        super().__init__(ctx, plan, index)
        self.step, self.packed, self.sums = step, packed, sums
        self.first = self.zero = self.correction = None

    def pointers(self, batch):
        b, ctx, plan = self.b, self.ctx, self.plan
        a, _, zero = self.step.inputs
        self.source = ctx.pointer(a)
        self.bp = ctx.keep(self.packed)
        self.c = ctx.pointer(self.step.outputs[0])
        self.zero = irutil.load(b, ctx.pointer(zero), zero.dtype)
        if self.sums is not None:
            # (a - a_zero) = u - c, u the byte used unsigned (a + 128 for int8 a).
            c = b.zext(self.zero, I32) if a.dtype == "uint8" else \
                b.add(b.sext(self.zero, I32), ir.Constant(I32, 128))
            self.correction = irutil.splat(b, c, plan.lanes)
            self.sums = ctx.keep(self.sums)

    def pack_a(self, rows):
        b, plan = self.b, self.plan
        start = ival(rows[0])
        buffer = irutil.stack_array(b, I32, plan.block_rows * plan.k)
        with irutil.for_range(b, start, ival(rows[1]), name="ar") as row:
            into = irutil.element_ptr(b, buffer, "int32", b.mul(b.sub(row, start),
                                                                irutil.i64(plan.k)))
            self._pack_row(irutil.element_ptr(
                b, self.source, self.step.inputs[0].dtype, b.mul(row, irutil.i64(plan.depth))),
                into)
        self.a, self.first = buffer, start

    def _pack_row(self, source, into):
        """A's row at ``source`` as the multiply-add reads it, zeros past its end."""
        b, plan = self.b, self.plan
        dtype, out = self.step.inputs[0].dtype, plan.found.a_dtype
        width = plan.lanes * plan.found.per_lane       # values per vector
        whole = plan.depth - plan.depth % width
        with irutil.for_range(b, 0, whole, width, name="ak") as kk:
            value = irutil.load(b, irutil.element_ptr(b, source, dtype, kk), dtype, width, 1)
            irutil.store(b, self._converted(value, width),
                         irutil.element_ptr(b, into, out, kk), out, 1)
        for kk in range(whole, plan.k * plan.found.per_lane):
            if kk < plan.depth:
                value = self._converted(irutil.load(
                    b, irutil.element_ptr(b, source, dtype, kk), dtype), 1)
            else:
                value = ir.Constant(irutil.storage_type(out), 0)
            irutil.store(b, value, irutil.element_ptr(b, into, out, kk), out)

    def _converted(self, value, width):
        """Bytes of A as the multiply-add reads them: int16 less the zero point, or unsigned
        bytes (an int8's sign bit flipped)."""
        b = self.b
        signed = self.step.inputs[0].dtype == "int8"
        if self.plan.found is VPDPBUSD:
            return b.xor(value, irutil.const(value.type, -128)) if signed else value
        wide = irutil.vector_of(ir.IntType(16), width)
        extend = b.sext if signed else b.zext
        zero = extend(self.zero, ir.IntType(16))
        return b.sub(extend(value, wide), irutil.splat(b, zero, width))

    def a_row(self, i):
        b = self.b
        return irutil.element_ptr(b, self.a, "int32",
                                  b.mul(b.sub(ival(i), self.first), irutil.i64(self.plan.k)))

    def store(self, value, row, column, valid, inline=False):
        if self.correction is not None:
            b, lanes = self.b, irutil.width_of(value)
            sums = irutil.load(b, irutil.element_ptr(b, self.sums, "int32", column), "int32",
                               lanes, 4)     # (the sums are padded to whole panels)
            value = b.sub(value, b.mul(self.correction, sums))
        super().store(value, row, column, valid, inline)
