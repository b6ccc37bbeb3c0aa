"""Kernels that move data without arithmetic: views, copies, transpose, concat, split, slice,
gather, arg-reductions, shape queries and assignment."""

import math

import numpy as np

from myelin.codegen.llvm import irutil, loops
from myelin.codegen.llvm.kernels.base import (ELEMENT_WORK, Kernel, parallel_elementwise,
                                              task_range)
from myelin.flow import dtypes


def copy(ctx, shape, source, target):
    """Emit a strided copy of ``shape`` elements from operand ``source`` to ``target``."""
    convert = source.dtype != target.dtype

    def body(builder, values, lanes):
        value = values[0]
        return [irutil.convert(builder, value, source.dtype, target.dtype) if convert else value]

    loops.elementwise(ctx.builder, ctx.target, shape, [source], [target], body)


def _constant_ints(step, index):
    """Input ``index`` of the step as a list of ints; None unless it is a constant."""
    data = step.op.inputs[index].data if step.op is not None else None
    return None if data is None else [int(v) for v in np.asarray(data).reshape(-1)]


class ViewKernel(Kernel):
    """Reshape-like ops whose output has the input's bytes unchanged: no code at all, unless
    the compiler could not make the output a view (then the bytes are copied)."""

    name = "Reshape"
    TYPES = ("Reshape", "Identity", "Squeeze", "ExpandDims")

    def supports(self, step, target):
        source, out = step.inputs[0], step.outputs[0]
        return (step.type in self.TYPES and source.dtype == out.dtype
                and source.elements == out.elements)

    def kernel_name(self, step):
        return step.type

    def view(self, step):
        return True

    def emit(self, ctx, step):
        source, out = step.inputs[0], step.outputs[0]
        if out.view_of is None:
            copy(ctx, (out.elements,), ctx.operand(source, (1,)), ctx.operand(out, (1,)))


class TransposeKernel(Kernel):
    """``Transpose`` by attribute ``perm`` (default: reversed axes) as a strided copy; where
    the last two axes (after merging) swap, in square blocks of one vector per row,
    transposed in registers, so loads and stores are whole vectors (by one function for all
    sizes, see :func:`_plane_function`)."""

    name = "Transpose"
    shares_code = True

    def supports(self, step, target):
        return step.type == "Transpose"

    def flops(self, step):
        return 0

    def emit(self, ctx, step):
        source, out = step.inputs[0], step.outputs[0]
        rank = len(source.shape)
        perm = step.attrs.get_ints("perm") if "perm" in step.attrs else list(range(rank))[::-1]
        own = loops.contiguous_strides(source.shape)
        strides = tuple(own[p % rank] for p in perm)
        shape, (reads, _) = loops.collapse(tuple(out.shape),
                                           [strides, loops.contiguous_strides(out.shape)])
        lanes = loops.lanes(ctx.target, out.dtype)
        if (len(shape) >= 2 and reads[-2] == 1 and reads[-1] != 1 and lanes >= 4
                and min(shape[-2:]) >= lanes and out.dtype == source.dtype):
            _blocked_transpose(ctx, f"Transpose.{step.name}", source, out, shape, reads,
                               lanes)
            return
        parallel_elementwise(ctx, f"Transpose.{step.name}", [source, out], out.shape,
                             lambda sub: ([sub.operand(source, strides)], [sub.operand(out)]),
                             lambda builder, values, lanes: values)


def _blocked_transpose(ctx, name, source, out, shape, reads, lanes):
    """out[..., i, j] = source at i + j * reads[-1] (+ the outer axes' strides), for an output
    of merged ``shape``: each plane, or band of a plane's rows, by a call of
    :func:`_plane_function`, shared by every transpose of the type (its sizes are arguments).
    A large transpose is split over the threads by planes, and by bands of rows (whole
    register blocks) where there are fewer planes than tasks."""
    b, dtype = ctx.builder, out.dtype
    rows, columns = shape[-2:]
    outer = shape[:-2]
    writes = loops.contiguous_strides(shape)
    plane = ctx.function(("transpose plane", dtype, lanes),
                         lambda module: _plane_function(module, dtype, lanes))
    planes = math.prod(outer)
    if planes == 0:
        return
    work = planes * rows * columns * ELEMENT_WORK
    wanted, _ = ctx.chunks(planes * rows, work)
    per_plane = -(-wanted // planes)                    # bands a plane is cut into
    band = lanes * -(-rows // (per_plane * lanes))      # rows a band, whole register blocks
    bands = -(-rows // band)
    tasks, size = ctx.chunks(planes * bands, work)
    if tasks == 1:
        operands = [ctx.operand(source, reads), ctx.operand(out, writes)]
        loops.outer_loops(b, outer, operands, [reads[:-2], writes[:-2]], lambda pointers: b.call(
            plane, list(pointers) + [irutil.i64(rows), irutil.i64(columns),
                                     irutil.i64(reads[-1])]))
        return

    def task(sub, index):
        tb = sub.builder
        src, dst = sub.operand(source, reads).ptr, sub.operand(out, writes).ptr
        first, last = task_range(tb, index, size, planes * bands)
        with irutil.for_range(tb, first, last, name="unit") as unit:
            entry = tb.udiv(unit, irutil.i64(bands))            # the plane, then its band
            row = tb.mul(tb.urem(unit, irutil.i64(bands)), irutil.i64(band))
            src_plane = loops.batch_entry(tb, src, dtype, entry, outer, reads[:-2])
            dst_plane = loops.batch_entry(tb, dst, dtype, entry, outer, writes[:-2])
            count = irutil.smin(tb, irutil.i64(band), tb.sub(irutil.i64(rows), row))
            tb.call(plane, [irutil.element_ptr(tb, src_plane, dtype, row),
                            irutil.element_ptr(tb, dst_plane, dtype,
                                               tb.mul(row, irutil.i64(columns))),
                            count, irutil.i64(columns), irutil.i64(reads[-1])])

    ctx.parallel(name, [source, out], tasks, task)


def _plane_function(module, dtype, lanes):
    """A function ``void(ptr src, ptr dst, i64 rows, i64 columns, i64 step)`` storing
    dst[i * columns + j] = src[i + j * step] for i < rows, j < columns: ``lanes`` x ``lanes``
    blocks transposed in registers (whole vectors loaded and stored), then the leftover rows
    and columns one element at a time."""
    function, b = irutil.helper_function(module, "transpose.plane", 2, 3, noalias=False)
    src, dst, rows, columns, step = function.args
    itemsize = dtypes.itemsize(dtype)

    def element(i, j):
        at = b.add(i, b.mul(j, step))
        value = irutil.load(b, irutil.element_ptr(b, src, dtype, at), dtype, 1, itemsize)
        at = b.add(b.mul(i, columns), j)
        irutil.store(b, value, irutil.element_ptr(b, dst, dtype, at), dtype, itemsize)

    full_rows, full_columns = (b.sub(n, b.urem(n, irutil.i64(lanes))) for n in (rows, columns))
    with irutil.for_range(b, 0, full_rows, lanes, name="bi") as i:
        with irutil.for_range(b, 0, full_columns, lanes, name="bj") as j:
            block = [irutil.load(b, irutil.element_ptr(
                b, src, dtype, b.add(i, b.mul(b.add(j, irutil.i64(k)), step))),
                dtype, lanes, itemsize) for k in range(lanes)]
            for k, vector in enumerate(irutil.transpose_block(b, block)):
                at = b.add(b.mul(b.add(i, irutil.i64(k)), columns), j)
                irutil.store(b, vector, irutil.element_ptr(b, dst, dtype, at), dtype, itemsize)
        with irutil.for_range(b, full_columns, columns, name="rj") as j:
            with irutil.for_range(b, 0, lanes, name="ri") as k:
                element(b.add(i, k), j)
    with irutil.for_range(b, full_rows, rows, name="ti") as i:
        with irutil.for_range(b, 0, columns, name="tj") as j:
            element(i, j)
    b.ret_void()
    return function


def _part_operand(ctx, tensor, whole, axis, start):
    """The operand for a sub-block of ``whole`` beginning at ``start`` along ``axis``."""
    strides = loops.contiguous_strides(whole.shape)
    operand = ctx.operand(whole, strides)
    offset = start * strides[axis]
    operand.ptr = irutil.element_ptr(ctx.builder, operand.ptr, whole.dtype, offset)
    operand.align = int(np.gcd(operand.align, offset * whole.itemsize)) if offset else operand.align
    return operand


class ConcatKernel(Kernel):
    """``Concat(x1, ..., xN, axis)``: each input copied into its slice of the output."""

    name = "Concat"

    def supports(self, step, target):
        return step.type == "Concat" and _constant_ints(step, len(step.inputs) - 1) is not None

    def emit(self, ctx, step):
        out = step.outputs[0]
        axis = _constant_ints(step, len(step.inputs) - 1)[0] % len(out.shape)
        start = 0
        for part in step.inputs[:-1]:
            if part.elements:
                copy(ctx, part.shape, ctx.operand(part), _part_operand(ctx, part, out, axis, start))
            start += part.shape[axis]


class SplitKernel(Kernel):
    """``Split(x, n, axis)``: each output copied from its slice of the input."""

    name = "Split"

    def supports(self, step, target):
        return step.type == "Split" and _constant_ints(step, 2) is not None

    def emit(self, ctx, step):
        source = step.inputs[0]
        axis = _constant_ints(step, 2)[0] % len(source.shape)
        start = 0
        for part in step.outputs:
            copy(ctx, part.shape, _part_operand(ctx, part, source, axis, start), ctx.operand(part))
            start += part.shape[axis]


class SliceKernel(Kernel):
    """``Slice(x, begin, size)`` with constant begin and size."""

    name = "Slice"

    def supports(self, step, target):
        return step.type == "Slice" and _constant_ints(step, 1) is not None

    def emit(self, ctx, step):
        source, out = step.inputs[0], step.outputs[0]
        begin = _constant_ints(step, 1)
        strides = loops.contiguous_strides(source.shape)
        operand = ctx.operand(source, strides)
        offset = sum(b * s for b, s in zip(begin, strides))
        if offset:
            operand.ptr = irutil.element_ptr(ctx.builder, operand.ptr, source.dtype, offset)
            operand.align = int(np.gcd(operand.align, offset * source.itemsize))
        copy(ctx, out.shape, operand, ctx.operand(out))


class GatherKernel(Kernel):
    """``Gather(params, indices[, oov])``: rows of params by index (or entries along ``axis``).

    An index outside [0, rows) selects the ``oov`` row when given, and otherwise stops the cell
    with an InputError (generated code never reads outside ``params``).
    """

    name = "Gather"

    def supports(self, step, target):
        return step.type == "Gather" and step.inputs[1].dtype in ("int32", "int64")

    def emit(self, ctx, step):
        b = ctx.builder
        params, indices, out = step.inputs[0], step.inputs[1], step.outputs[0]
        oov = step.inputs[2] if len(step.inputs) > 2 else None
        axis = step.attrs.get_int("axis", 0) % len(params.shape)
        outer = int(np.prod(params.shape[:axis], dtype=np.int64))
        rows = params.shape[axis]
        row = int(np.prod(params.shape[axis + 1:], dtype=np.int64))
        count = indices.elements
        params_ptr = ctx.pointer(params)
        index_ptr = ctx.pointer(indices)
        out_ptr = ctx.pointer(out)
        fallback = ctx.pointer(oov) if oov is not None else None
        with irutil.for_range(b, 0, outer, name="go") as o:
            with irutil.for_range(b, 0, count, name="g") as g:
                index = irutil.load(b, irutil.element_ptr(b, index_ptr, indices.dtype, g),
                                    indices.dtype, 1)
                index = irutil.convert(b, index, indices.dtype, "int64")
                valid = b.and_(b.icmp_signed(">=", index, irutil.i64(0)),
                               b.icmp_signed("<", index, irutil.i64(rows)))
                if fallback is None:
                    ctx.fail_if(b.not_(valid))
                safe = b.select(valid, index, irutil.i64(0))
                start = b.add(b.mul(o, irutil.i64(rows)), safe)
                source = irutil.element_ptr(b, params_ptr, params.dtype,
                                            b.mul(start, irutil.i64(row)))
                position = b.add(b.mul(o, irutil.i64(count)), g)
                target = irutil.element_ptr(b, out_ptr, out.dtype,
                                            b.mul(position, irutil.i64(row)))
                if fallback is not None:
                    source = b.select(valid, source, fallback)
                copy(ctx, (row,), loops.Operand(source, params.dtype, (1,), params.itemsize),
                     loops.Operand(target, out.dtype, (1,), out.itemsize))


class ArgKernel(Kernel):
    """``ArgMax``/``ArgMin`` over all elements (a scalar) or along ``axis``; the first index
    on ties, or the last with ``select_last_index``."""

    name = "Arg"

    def supports(self, step, target):
        return step.type in ("ArgMax", "ArgMin")

    def kernel_name(self, step):
        return step.type

    def emit(self, ctx, step):
        b = ctx.builder
        source, out = step.inputs[0], step.outputs[0]
        shape = source.shape
        if "axis" in step.attrs and shape:
            axis = step.attrs.get_int("axis") % len(shape)
            outer = int(np.prod(shape[:axis], dtype=np.int64))
            length, inner = shape[axis], int(np.prod(shape[axis + 1:], dtype=np.int64))
        else:
            outer, length, inner = 1, source.elements, 1
        src, dst = ctx.pointer(source), ctx.pointer(out)
        greater = step.type == "ArgMax"
        last = step.attrs.get_bool("select_last_index", False)
        value_type = irutil.compute_type(source.dtype)
        floating = irutil.is_float(value_type)
        with irutil.for_range(b, 0, outer, name="o") as o:
            with irutil.for_range(b, 0, inner, name="n") as n:
                base = b.add(b.mul(o, irutil.i64(length * inner)), n)
                first = irutil.load(b, irutil.element_ptr(b, src, source.dtype, base),
                                    source.dtype)
                with irutil.accumulating_loop(b, 1, length, [first, irutil.i64(0)],
                                              name="a") as loop:
                    at = b.add(base, b.mul(loop.index, irutil.i64(inner)))
                    x = irutil.load(b, irutil.element_ptr(b, src, source.dtype, at), source.dtype)
                    best, best_index = loop.values
                    predicate = (">" if greater else "<") + ("=" if last else "")
                    if floating and last:
                        # The last NaN wins.
                        better = b.or_(b.fcmp_ordered(predicate, x, best),
                                       b.fcmp_unordered("uno", x, x))
                    elif floating:
                        # The first NaN wins, as in NumPy.
                        better = b.fcmp_ordered(predicate, x, best)
                        better = b.and_(b.or_(better, b.fcmp_unordered("uno", x, x)),
                                        b.fcmp_ordered("ord", best, best))
                    elif source.dtype in irutil.UNSIGNED or source.dtype == "bool":
                        better = b.icmp_unsigned(predicate, x, best)
                    else:
                        better = b.icmp_signed(predicate, x, best)
                    loop.set_next([b.select(better, x, best),
                                   b.select(better, loop.index, best_index)])
                position = b.add(b.mul(o, irutil.i64(inner)), n)
                result = irutil.convert(b, loop.results[1], "int64", out.dtype)
                irutil.store(b, result, irutil.element_ptr(b, dst, out.dtype, position), out.dtype)


class ShapeKernel(Kernel):
    """``Shape``/``Size``/``Rank``: the input's (static) shape facts stored as constants."""

    name = "Shape"

    def supports(self, step, target):
        return step.type in ("Shape", "Size", "Rank")

    def kernel_name(self, step):
        return step.type

    def emit(self, ctx, step):
        source, out = step.inputs[0], step.outputs[0]
        values = {"Shape": list(source.shape), "Size": [source.elements],
                  "Rank": [len(source.shape)]}[step.type]
        ptr = ctx.pointer(out)
        for i, value in enumerate(values):
            irutil.store(ctx.builder, irutil.const(irutil.compute_type(out.dtype), value),
                         irutil.element_ptr(ctx.builder, ptr, out.dtype, i), out.dtype)


class AssignKernel(Kernel):
    """``Assign(target, value)``: copies value into the target variable's storage."""

    name = "Assign"

    def supports(self, step, target):
        return (step.type == "Assign" and len(step.inputs) == 2
                and step.inputs[0].elements == step.inputs[1].elements)

    def emit(self, ctx, step):
        target, value = step.inputs
        copy(ctx, value.shape, ctx.operand(value),
             ctx.operand(target, loops.contiguous_strides(value.shape)))

