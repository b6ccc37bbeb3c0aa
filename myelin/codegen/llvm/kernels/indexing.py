"""Kernels of the indexing ops (myelin.ops.indexing): Pad, Tile, BroadcastTo, GatherElements,
GatherND, ScatterElements, ScatterND, CumSum/CumProd, TopK, OneHot and Trilu.

Shapes are static, so copies whose source position is an affine function of the output
position (Tile, BroadcastTo, constant Pad) are strided copies through the vectorized loop
nests of :mod:`loops`. The others run scalar loops. Indices read at run time are checked: an
index out of range stops the cell with an InputError (``EmitContext.fail_if``), so generated
code never reads or writes outside a tensor.
"""

import contextlib

import llvmlite.ir as ir
import numpy as np

from myelin.codegen.llvm import elementwise, irutil, loops
from myelin.codegen.llvm.kernels.base import Kernel
from myelin.codegen.llvm.kernels.movement import copy
from myelin.flow.attributes import Attributes
from myelin.ops.indexing import pad_layout, topk_layout


def _prod(values):
    return int(np.prod(values, dtype=np.int64))


def _supported_types(step):
    return all(t.dtype in irutil._STORAGE for t in step.inputs + step.outputs)


@contextlib.contextmanager
def _nest(builder, shape, name="x"):
    """Nested counted loops over ``shape``; yields the list of i64 indices."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(irutil.for_range(builder, 0, dim, name=f"{name}{axis}"))
               for axis, dim in enumerate(shape)]


def _affine(builder, indices, strides):
    """sum(indices[i] * strides[i]) as an i64 (strides are ints)."""
    total = irutil.i64(0)
    for index, stride in zip(indices, strides):
        if stride:
            total = builder.add(total, builder.mul(index, irutil.i64(stride)))
    return total


def _move(builder, source, source_dtype, target, target_dtype):
    """Copy one element (raw bits: no conversion when the dtypes are equal)."""
    if source_dtype == target_dtype:
        storage = irutil.storage_type(source_dtype)
        size = irutil.dtypes.itemsize(source_dtype)
        builder.store(builder.load(source, typ=storage, align=size), target, align=size)
    else:
        value = irutil.load(builder, source, source_dtype)
        irutil.store(builder, irutil.convert(builder, value, source_dtype, target_dtype), target,
                     target_dtype)


def _offset_operand(ctx, tensor, strides, offset):
    """An operand over ``tensor`` with ``strides``, starting ``offset`` elements in."""
    operand = ctx.operand(tensor, strides)
    if offset:
        operand.ptr = irutil.element_ptr(ctx.builder, operand.ptr, tensor.dtype, offset)
        operand.align = int(np.gcd(operand.align, offset * tensor.itemsize))
    return operand


def _checked_index(ctx, value, dtype, size):
    """A run-time index as i64, negatives counted from the end; fails the cell if it is out of
    [-size, size)."""
    b = ctx.builder
    index = irutil.convert(b, value, dtype, "int64")
    if dtype not in irutil.UNSIGNED:
        index = b.select(b.icmp_signed("<", index, irutil.i64(0)),
                         b.add(index, irutil.i64(size)), index)
    ctx.fail_if(b.icmp_unsigned(">=", index, irutil.i64(size)))
    return index


def _global_table(builder, values):
    """A constant i64 array in the module; returns a pointer to its first element."""
    module = builder.module
    typ = ir.ArrayType(irutil.I64, len(values))
    table = ir.GlobalVariable(module, typ, module.get_unique_name("table"))
    table.initializer = ir.Constant(typ, [int(v) for v in values])
    table.global_constant = True
    table.linkage = "internal"
    return builder.bitcast(table, irutil.PTR)


class _IndexingKernel(Kernel):
    TYPE = None

    def supports(self, step, target):
        return step.type == self.TYPE and _supported_types(step)

    @property
    def name(self):
        return self.TYPE


class PadKernel(_IndexingKernel):
    """``Pad``: constant mode fills the output and copies the kept block into it; reflect,
    edge and wrap read every output element through per-axis tables of source offsets."""

    TYPE = "Pad"

    def emit(self, ctx, step):
        source, out = step.inputs[0], step.outputs[0]
        layout, _ = pad_layout(step, source.shape)
        mode = step.attrs.get_str("mode", "constant")
        if out.elements == 0:
            return
        kept = tuple(d - cb - ce for d, (cb, ce, _, _) in zip(source.shape, layout))
        source_strides = loops.contiguous_strides(source.shape)
        out_strides = loops.contiguous_strides(out.shape)
        if mode == "constant":
            self._fill(ctx, step, out)
            if _prod(kept):
                start = sum(cb * s for (cb, _, _, _), s in zip(layout, source_strides))
                place = sum(pb * s for (_, _, pb, _), s in zip(layout, out_strides))
                copy(ctx, kept, _offset_operand(ctx, source, source_strides, start),
                     _offset_operand(ctx, out, out_strides, place))
            return
        b = ctx.builder
        tables = []
        for axis, (dim, (cb, _, pb, _)) in enumerate(zip(out.shape, layout)):
            n = kept[axis]
            offsets = []
            for o in range(dim):
                j = o - pb
                if mode == "edge":
                    j = min(max(j, 0), n - 1)
                elif mode == "wrap":
                    j %= n
                elif n == 1:
                    j = 0
                else:
                    period = 2 * (n - 1)
                    j %= period
                    j = period - j if j >= n else j
                offsets.append((j + cb) * source_strides[axis])
            tables.append(_global_table(b, offsets))
        src, dst = ctx.pointer(source), ctx.pointer(out)
        with _nest(b, out.shape, "p") as index:
            offset = irutil.i64(0)
            for table, i in zip(tables, index):
                entry = b.load(b.gep(table, [i], source_etype=irutil.I64), typ=irutil.I64)
                offset = b.add(offset, entry)
            _move(b, irutil.element_ptr(b, src, source.dtype, offset), source.dtype,
                  irutil.element_ptr(b, dst, out.dtype, _affine(b, index, out_strides)),
                  out.dtype)

    @staticmethod
    def _fill(ctx, step, out):
        """Set every output element to the value input (or 0)."""
        compute = irutil.compute_type(out.dtype)
        if len(step.inputs) == 2:
            value = step.inputs[1]
            inputs = [ctx.operand(value, (0,) * len(out.shape))]

            def body(builder, values, lanes):
                return [values[0]]
        else:
            inputs = []

            def body(builder, values, lanes):
                return [irutil.const(irutil.vector_of(compute, lanes), 0)]
        loops.elementwise(ctx.builder, ctx.target, out.shape, inputs, [ctx.operand(out)], body)


class TileKernel(_IndexingKernel):
    """``Tile``: the output seen as [r0, n0, r1, n1, ...] is a strided copy of the input with
    zero strides on the repeat axes."""

    TYPE = "Tile"

    def emit(self, ctx, step):
        source, out = step.inputs[0], step.outputs[0]
        if out.elements == 0:
            return
        repeats = step.attrs.get_ints("repeats")
        own = loops.contiguous_strides(source.shape)
        shape, strides = [], []
        for dim, repeat, stride in zip(source.shape, repeats, own):
            shape += [repeat, dim]
            strides += [0, stride]
        copy(ctx, tuple(shape), ctx.operand(source, tuple(strides)),
             ctx.operand(out, loops.contiguous_strides(shape)))


class BroadcastToKernel(_IndexingKernel):
    """``BroadcastTo``: a strided copy with zero strides on the broadcast axes."""

    TYPE = "BroadcastTo"

    def emit(self, ctx, step):
        source, out = step.inputs[0], step.outputs[0]
        if out.elements == 0:
            return
        copy(ctx, out.shape, ctx.operand(source, loops.broadcast_strides(source.shape, out.shape)),
             ctx.operand(out))


def _element_loop(ctx, data, indices, axis, body):
    """For each element of ``indices``: ``body(position, data_offset)`` where position is the
    flat index into indices and data_offset the checked offset into data."""
    b = ctx.builder
    index_ptr = ctx.pointer(indices)
    data_strides = loops.contiguous_strides(data.shape)
    index_strides = loops.contiguous_strides(indices.shape)
    with _nest(b, indices.shape, "e") as index:
        position = _affine(b, index, index_strides)
        value = irutil.load(b, irutil.element_ptr(b, index_ptr, indices.dtype, position),
                            indices.dtype)
        along = _checked_index(ctx, value, indices.dtype, data.shape[axis])
        others = [i for a, i in enumerate(index) if a != axis]
        offset = _affine(b, others, [s for a, s in enumerate(data_strides) if a != axis])
        offset = b.add(offset, b.mul(along, irutil.i64(data_strides[axis])))
        body(position, offset)


class GatherElementsKernel(_IndexingKernel):
    """``GatherElements``: one checked element read per index."""

    TYPE = "GatherElements"

    def emit(self, ctx, step):
        data, indices = step.inputs
        out = step.outputs[0]
        axis = step.attrs.get_int("axis", 0) % len(data.shape)
        b = ctx.builder
        src, dst = ctx.pointer(data), ctx.pointer(out)

        def body(position, offset):
            _move(b, irutil.element_ptr(b, src, data.dtype, offset), data.dtype,
                  irutil.element_ptr(b, dst, out.dtype, position), out.dtype)

        _element_loop(ctx, data, indices, axis, body)


_FOLD = {"add": "Add", "mul": "Mul", "max": "Maximum", "min": "Minimum"}


def _combine(builder, reduction, old, new, dtype):
    if reduction == "none":
        return new
    return elementwise.emit(builder, _FOLD[reduction], [old, new], [dtype, dtype], dtype,
                            Attributes())


class ScatterElementsKernel(_IndexingKernel):
    """``ScatterElements``: copy data, then apply the updates one by one in order."""

    TYPE = "ScatterElements"

    def emit(self, ctx, step):
        data, indices, updates = step.inputs
        out = step.outputs[0]
        axis = step.attrs.get_int("axis", 0) % len(data.shape)
        reduction = step.attrs.get_str("reduction", "none")
        b = ctx.builder
        if out.elements:
            copy(ctx, (out.elements,), ctx.operand(data, (1,)), ctx.operand(out, (1,)))
        dst, upd = ctx.pointer(out), ctx.pointer(updates)

        def body(position, offset):
            target = irutil.element_ptr(b, dst, out.dtype, offset)
            source = irutil.element_ptr(b, upd, updates.dtype, position)
            if reduction == "none":
                _move(b, source, updates.dtype, target, out.dtype)
                return
            value = _combine(b, reduction, irutil.load(b, target, out.dtype),
                             irutil.load(b, source, updates.dtype), out.dtype)
            irutil.store(b, value, target, out.dtype)

        _element_loop(ctx, data, indices, axis, body)


def _nd_rows(ctx, data, indices, batch_dims, body):
    """For each index tuple (row) of ``indices``: ``body(row, data_offset)`` with the checked
    offset of the slice it selects in data."""
    b = ctx.builder
    k = indices.shape[-1]
    batches = _prod(indices.shape[:batch_dims])
    per_batch = _prod(indices.shape[batch_dims:-1])
    data_strides = loops.contiguous_strides(data.shape)
    batch_stride = _prod(data.shape[batch_dims:])
    index_ptr = ctx.pointer(indices)
    with irutil.for_range(b, 0, batches, name="nb") as batch:
        with irutil.for_range(b, 0, per_batch, name="nr") as n:
            row = b.add(b.mul(batch, irutil.i64(per_batch)), n)
            offset = b.mul(batch, irutil.i64(batch_stride))
            for j in range(k):
                at = b.add(b.mul(row, irutil.i64(k)), irutil.i64(j))
                value = irutil.load(b, irutil.element_ptr(b, index_ptr, indices.dtype, at),
                                    indices.dtype)
                index = _checked_index(ctx, value, indices.dtype, data.shape[batch_dims + j])
                offset = b.add(offset, b.mul(index, irutil.i64(data_strides[batch_dims + j])))
            body(row, offset)


class GatherNDKernel(_IndexingKernel):
    """``GatherND``: a checked slice copy per index tuple."""

    TYPE = "GatherND"

    def emit(self, ctx, step):
        data, indices = step.inputs
        out = step.outputs[0]
        batch_dims = step.attrs.get_int("batch_dims", 0)
        size = _prod(data.shape[batch_dims + indices.shape[-1]:])
        b = ctx.builder
        src, dst = ctx.pointer(data), ctx.pointer(out)
        if out.elements == 0:
            return

        def body(row, offset):
            source = irutil.element_ptr(b, src, data.dtype, offset)
            target = irutil.element_ptr(b, dst, out.dtype, b.mul(row, irutil.i64(size)))
            copy(ctx, (size,), loops.Operand(source, data.dtype, (1,), data.itemsize),
                 loops.Operand(target, out.dtype, (1,), out.itemsize))

        _nd_rows(ctx, data, indices, batch_dims, body)


class ScatterNDKernel(_IndexingKernel):
    """``ScatterND``: copy data, then write (or combine) each update slice in order. The
    output may take data's storage (``inplace``), as ``Assign(cache, ScatterND(cache, ...))``
    does for a key/value cache: then only the update slices are written."""

    TYPE = "ScatterND"

    def inplace(self, step):
        return [0]          # the output has data's type and shape

    def emit(self, ctx, step):
        data, indices, updates = step.inputs
        out = step.outputs[0]
        reduction = step.attrs.get_str("reduction", "none")
        size = _prod(data.shape[indices.shape[-1]:])
        b = ctx.builder
        if out.elements:
            with b.if_then(b.icmp_unsigned("!=", ctx.pointer(data), ctx.pointer(out))):
                copy(ctx, (out.elements,), ctx.operand(data, (1,)), ctx.operand(out, (1,)))
        if updates.elements == 0:
            return
        dst, upd = ctx.pointer(out), ctx.pointer(updates)

        def body(row, offset):
            target = loops.Operand(irutil.element_ptr(b, dst, out.dtype, offset), out.dtype,
                                   (1,), out.itemsize)
            source = loops.Operand(
                irutil.element_ptr(b, upd, updates.dtype, b.mul(row, irutil.i64(size))),
                updates.dtype, (1,), updates.itemsize)
            if reduction == "none":
                copy(ctx, (size,), source, target)
                return

            def combine(builder, values, lanes):
                return [_combine(builder, reduction, values[0], values[1], out.dtype)]

            loops.elementwise(b, ctx.target, (size,), [target, source], [target], combine)

        _nd_rows(ctx, data, indices, 0, body)


def _lines(shape, axis):
    """(outer, length, inner) of the lines of ``shape`` along ``axis``."""
    return _prod(shape[:axis]), shape[axis], _prod(shape[axis + 1:])


class ScanKernel(_IndexingKernel):
    """``CumSum`` and ``CumProd``: a running sum or product along each line of the axis (in the
    compute type). ``TYPE`` names the op; ``identity`` and the float and integer instructions
    say how values combine."""

    def __init__(self, op_type, identity, float_op, int_op):
        self.TYPE = op_type
        self.identity, self.float_op, self.int_op = identity, float_op, int_op

    def supports(self, step, target):
        return super().supports(step, target) and step.inputs[0].dtype != "bool"

    def emit(self, ctx, step):
        source, out = step.inputs[0], step.outputs[0]
        if out.elements == 0:
            return
        axis = step.attrs.get_int("axis", 0) % len(source.shape)
        exclusive = step.attrs.get_bool("exclusive", False)
        reverse = step.attrs.get_bool("reverse", False)
        outer, length, inner = _lines(source.shape, axis)
        b = ctx.builder
        src, dst = ctx.pointer(source), ctx.pointer(out)
        start = irutil.const(irutil.compute_type(source.dtype), self.identity)
        combine = getattr(b, self.float_op if irutil.is_float(start.type) else self.int_op)
        with irutil.for_range(b, 0, outer, name="co") as o:
            with irutil.for_range(b, 0, inner, name="ci") as n:
                base = b.add(b.mul(o, irutil.i64(length * inner)), n)
                with irutil.accumulating_loop(b, 0, length, [start], name="ct") as loop:
                    t = b.sub(irutil.i64(length - 1), loop.index) if reverse else loop.index
                    at = b.add(base, b.mul(t, irutil.i64(inner)))
                    x = irutil.load(b, irutil.element_ptr(b, src, source.dtype, at), source.dtype)
                    total = combine(loop.values[0], x)
                    irutil.store(b, loop.values[0] if exclusive else total,
                                 irutil.element_ptr(b, dst, out.dtype, at), out.dtype)
                    loop.set_next([total])


class TopKKernel(_IndexingKernel):
    """``TopK``: each line is scanned once, inserting every element into the sorted list of
    the best k so far (held in the outputs), O(length * k) per line."""

    TYPE = "TopK"

    def emit(self, ctx, step):
        source = step.inputs[0]
        values, positions = step.outputs
        axis, k = topk_layout(step, source.shape)
        if k == 0 or values.elements == 0:
            return
        largest = step.attrs.get_bool("largest", True)
        outer, length, inner = _lines(source.shape, axis)
        b = ctx.builder
        src, vals, idxs = ctx.pointer(source), ctx.pointer(values), ctx.pointer(positions)
        dtype = source.dtype
        floating = irutil.is_float(irutil.compute_type(dtype))

        def better(x, y):
            if floating:
                nan_x, nan_y = b.fcmp_unordered("uno", x, x), b.fcmp_unordered("uno", y, y)
                if largest:   # NaN is the greatest value
                    return b.or_(b.fcmp_ordered(">", x, y), b.and_(nan_x, b.not_(nan_y)))
                return b.or_(b.fcmp_ordered("<", x, y), b.and_(b.not_(nan_x), nan_y))
            compare = (b.icmp_unsigned if dtype in irutil.UNSIGNED or dtype == "bool"
                       else b.icmp_signed)
            return compare(">" if largest else "<", x, y)

        with irutil.for_range(b, 0, outer, name="ko") as o:
            with irutil.for_range(b, 0, inner, name="kn") as n:
                base = b.add(b.mul(o, irutil.i64(length * inner)), n)
                out_base = b.add(b.mul(o, irutil.i64(k * inner)), n)
                with irutil.for_range(b, 0, length, name="ki") as i:
                    at = b.add(base, b.mul(i, irutil.i64(inner)))
                    x = irutil.load(b, irutil.element_ptr(b, src, dtype, at), dtype)

                    def slot(j):
                        at = b.add(out_base, b.mul(j, irutil.i64(inner)))
                        return (irutil.element_ptr(b, vals, dtype, at),
                                irutil.element_ptr(b, idxs, "int64", at))

                    def goes_before(j, value):
                        # Slot j is empty (j >= i) or x is better than its value.
                        return b.or_(b.icmp_signed(">=", j, i), better(x, value))

                    with irutil.for_range(b, 0, k, name="kj") as t:
                        j = b.sub(irutil.i64(k - 1), t)
                        has_previous = b.icmp_signed(">", j, irutil.i64(0))
                        previous = b.select(has_previous, b.sub(j, irutil.i64(1)), j)
                        value_ptr, index_ptr = slot(j)
                        prev_value_ptr, prev_index_ptr = slot(previous)
                        value = irutil.load(b, value_ptr, dtype)
                        prev_value = irutil.load(b, prev_value_ptr, dtype)
                        index = irutil.load(b, index_ptr, "int64")
                        prev_index = irutil.load(b, prev_index_ptr, "int64")
                        shift = b.and_(has_previous, goes_before(previous, prev_value))
                        insert = goes_before(j, value)
                        new_value = b.select(shift, prev_value, b.select(insert, x, value))
                        new_index = b.select(shift, prev_index, b.select(insert, i, index))
                        irutil.store(b, new_value, value_ptr, dtype)
                        irutil.store(b, new_index, index_ptr, "int64")


class OneHotKernel(_IndexingKernel):
    """``OneHot``: on where the (wrapped) index equals the position on the new axis."""

    TYPE = "OneHot"

    def emit(self, ctx, step):
        indices, values = step.inputs
        out = step.outputs[0]
        depth = out.shape[_onehot_axis(step, len(indices.shape))]
        axis = _onehot_axis(step, len(indices.shape))
        outer, inner = _prod(indices.shape[:axis]), _prod(indices.shape[axis:])
        if out.elements == 0:
            return
        b = ctx.builder
        index_ptr, value_ptr, dst = ctx.pointer(indices), ctx.pointer(values), ctx.pointer(out)
        storage = irutil.storage_type(values.dtype)
        size = irutil.dtypes.itemsize(values.dtype)
        off = b.load(value_ptr, typ=storage, align=size)
        on = b.load(irutil.element_ptr(b, value_ptr, values.dtype, 1), typ=storage, align=size)
        with irutil.for_range(b, 0, outer, name="ho") as o:
            with irutil.for_range(b, 0, inner, name="hn") as n:
                at = b.add(b.mul(o, irutil.i64(inner)), n)
                raw = irutil.load(b, irutil.element_ptr(b, index_ptr, indices.dtype, at),
                                  indices.dtype)
                index = irutil.convert(b, raw, indices.dtype, "int64")
                if indices.dtype not in irutil.UNSIGNED:
                    index = b.select(b.icmp_signed("<", index, irutil.i64(0)),
                                     b.add(index, irutil.i64(depth)), index)
                base = b.add(b.mul(o, irutil.i64(depth * inner)), n)
                with irutil.for_range(b, 0, depth, name="hd") as d:
                    value = b.select(b.icmp_signed("==", index, d), on, off)
                    target = irutil.element_ptr(b, dst, out.dtype,
                                                b.add(base, b.mul(d, irutil.i64(inner))))
                    b.store(value, target, align=size)


def _onehot_axis(step, rank):
    axis = step.attrs.get_int("axis", -1)
    return axis + rank + 1 if axis < 0 else axis


class TriluKernel(_IndexingKernel):
    """``Trilu``: each element of the last two axes is kept or zeroed by its diagonal."""

    TYPE = "Trilu"

    def emit(self, ctx, step):
        source, out = step.inputs[0], step.outputs[0]
        if out.elements == 0:
            return
        upper = step.attrs.get_bool("upper", True)
        k = step.attrs.get_int("k", 0)
        *batch, rows, cols = source.shape
        b = ctx.builder
        src, dst = ctx.pointer(source), ctx.pointer(out)
        storage = irutil.storage_type(source.dtype)
        size = irutil.dtypes.itemsize(source.dtype)
        zero = irutil.const(storage, 0)
        with irutil.for_range(b, 0, _prod(batch), name="tb") as m:
            with irutil.for_range(b, 0, rows, name="tr") as i:
                row = b.mul(b.add(b.mul(m, irutil.i64(rows)), i), irutil.i64(cols))
                with irutil.for_range(b, 0, cols, name="tc") as j:
                    diagonal = b.sub(j, i)
                    keep = b.icmp_signed(">=" if upper else "<=", diagonal, irutil.i64(k))
                    at = b.add(row, j)
                    value = b.load(irutil.element_ptr(b, src, source.dtype, at), typ=storage,
                                   align=size)
                    b.store(b.select(keep, value, zero),
                            irutil.element_ptr(b, dst, out.dtype, at), align=size)


KERNELS = [PadKernel(), TileKernel(), BroadcastToKernel(), GatherElementsKernel(),
           GatherNDKernel(), ScatterElementsKernel(), ScatterNDKernel(),
           ScanKernel("CumSum", 0, "fadd", "add"), ScanKernel("CumProd", 1, "fmul", "mul"),
           TopKKernel(), OneHotKernel(), TriluKernel()]
