"""The ``Resize`` kernel: nearest, linear and cubic resampling from precomputed tables.

Source indices and weights depend only on shapes and attributes, so they are computed at
compile time (:func:`myelin.ops.resize.axis_tables`, the same tables the reference applies) and
stored as constant globals. Adjacent identity axes (not resized) are merged. The kernel loops
over the output rows (every axis but the innermost; tasks on the worker pool split the
outermost); for each row it adds up, over the tap
combinations of the resized outer axes, a weighted row of the input interpolated along the
innermost axis. The innermost axis runs in vectors: a contiguous load when it is not resized,
else one load per lane through the index table (weights and indices of a tap are stored
contiguously along the output, so they load as vectors). Where the rows and the innermost axis
are both interpolated (bilinear and bicubic upsampling of images), each input row is
interpolated along the innermost axis once per plane into a small cache on the stack, and
the output rows are weighted sums of cached rows. With tf_crop_and_resize, a last pass
writes ``extrapolation_value`` where any axis extrapolates.
"""

import math

import llvmlite.ir as ir
import numpy as np

from myelin.codegen.llvm import irutil, loops
from myelin.codegen.llvm.kernels.base import Kernel, task_range
from myelin.errors import MyelinError
from myelin.ops import resize
from myelin.ops.common import NUMERIC

_GATHER_LANES = 8      # widest vector filled by per-lane loads
_UNROLL_TAPS = 8       # inner taps emitted inline up to this many, else a loop
_ROW_CACHE_BYTES = 64 << 10   # the most the interpolated input rows of a plane may take


class _Dim:
    """One (possibly merged) axis: output size, input element stride, table (None: identity)."""

    def __init__(self, size, stride, table):
        self.size = size
        self.stride = stride
        self.table = table
        self.index = self.weight = self.valid = None   # globals, filled by the kernel


def _dims(source_shape, out_shape, tables):
    strides = loops.contiguous_strides(source_shape)
    dims = []
    for size, stride, table in zip(out_shape, strides, tables):
        if table is None and size == 1:
            continue
        if table is None and dims and dims[-1].table is None:
            dims[-1].size *= size
            dims[-1].stride = stride
            continue
        dims.append(_Dim(size, stride, table))
    return dims or [_Dim(1, 1, None)]


def _global(builder, name, typ, values):
    """A private constant array global holding ``values`` (Python numbers) of LLVM ``typ``."""
    module = builder.module
    array = ir.ArrayType(typ, len(values))
    var = ir.GlobalVariable(module, array, module.get_unique_name(name))
    var.initializer = ir.Constant(array, [ir.Constant(typ, v) for v in values])
    var.global_constant = True
    var.linkage = "private"
    var.align = 16
    var.type = irutil.PTR   # llvmlite types globals; the module uses opaque pointers
    return var


class ResizeKernel(Kernel):
    """``Resize`` (ONNX semantics, see :mod:`myelin.ops.resize`) from constant tables."""

    name = "Resize"

    def supports(self, step, target):
        if step.type != "Resize" or len(step.inputs) != 1:
            return False
        dtype = step.inputs[0].dtype
        try:
            p = resize.params(step, step.inputs[0].shape)
        except MyelinError:
            return False
        if p.mode == "nearest":
            return dtype in NUMERIC
        return dtype in ("float32", "float64")

    def kernel_name(self, step):
        mode = step.attrs.get_str("mode", "nearest")
        return f"Resize[{mode}]"

    def flops(self, step):
        p = resize.params(step, step.inputs[0].shape)
        if p.mode == "nearest":
            return 0
        taps = math.prod(t.taps for t in resize.axis_tables(p, step.inputs[0].shape)
                         if t is not None)
        return 2 * taps * step.outputs[0].elements

    def emit(self, ctx, step):
        source, out = step.inputs[0], step.outputs[0]
        if not out.elements:
            return
        p = resize.params(step, source.shape)
        tables = resize.axis_tables(p, source.shape)
        dims = _dims(source.shape, out.shape, tables)
        rows = dims[0].size if len(dims) > 1 else 1
        tasks, size = ctx.chunks(rows, self.flops(step) + 2 * out.elements)
        ctx.parallel(f"Resize.{step.name}", [source, out], tasks,
                     lambda sub, index: _Emitter(sub, source, out, p, dims).emit(index, size))


class _Emitter:
    def __init__(self, ctx, source, out, p, dims):
        self.b = ctx.builder
        self.ctx = ctx
        self.source, self.out, self.p = source, out, p
        self.dtype = source.dtype
        self.nearest = p.mode == "nearest"
        self.value_type = irutil.compute_type(self.dtype)
        self.weight_dtype = self.dtype     # linear and cubic run on float32 and float64
        self.dims = dims
        self.outer, self.inner = dims[:-1], dims[-1]
        self.resized = [d for d in self.outer if d.table is not None]
        self.combinations = math.prod(d.table.taps for d in self.resized)
        self.extrapolates = any(d.table is not None and d.table.valid is not None for d in dims)
        self.slots = self._row_slots()
        self._make_tables()

    def _row_slots(self):
        """How many interpolated input rows a cache keeps (0: none), where the rows (the last
        outer axis) and the innermost axis are both interpolated: each input row is then
        interpolated along the innermost axis once per plane, into slot ``row % slots``,
        and each output row is a weighted sum of cached rows. Needs every output row's tap
        rows in distinct slots."""
        if (self.nearest or len(self.resized) != 1 or self.resized[0] is not self.outer[-1]
                or self.inner.table is None or self.extrapolates):
            return 0
        index = self.resized[0].table.index
        slots = 1 << (index.shape[1] - 1).bit_length()
        if slots * self.inner.size * self.source.itemsize > _ROW_CACHE_BYTES:
            return 0
        for taps in index:
            rows = set(taps.tolist())
            if len({row % slots for row in rows}) != len(rows):
                return 0
        return slots

    # Tables.
    def _make_tables(self):
        b, wtype = self.b, irutil.storage_type(self.weight_dtype)
        for d in self.resized:
            t = d.table
            d.index = _global(b, "resize.index", irutil.I64, (t.index * d.stride).ravel().tolist())
            if not self.nearest:
                d.weight = _global(b, "resize.weight", wtype, self._weights(t.weight.ravel()))
            if t.valid is not None:
                d.valid = _global(b, "resize.valid", irutil.I8, t.valid.astype(int).tolist())
        t = self.inner.table
        if t is not None:
            # Tap-major: the indices and weights of one tap are contiguous along the output.
            self.inner.index = _global(b, "resize.index", irutil.I32, t.index.T.ravel().tolist())
            if not self.nearest:
                self.inner.weight = _global(b, "resize.weight", wtype,
                                            self._weights(t.weight.T.ravel()))
            if t.valid is not None:
                self.inner.valid = _global(b, "resize.valid", irutil.I8,
                                           t.valid.astype(int).tolist())

    def _weights(self, values):
        if self.weight_dtype == "float32":
            return [float(v) for v in np.asarray(values, dtype=np.float32)]
        return [float(v) for v in values]

    def _load(self, table, dtype, index, width=1):
        b = self.b
        return irutil.load(b, irutil.element_ptr(b, table, dtype, index), dtype, width)

    # Loops.
    def emit(self, task, size):
        """The output rows of task ``task``: indices [task * size, (task + 1) * size) of the
        outermost axis (all of them when the innermost axis is the only one)."""
        b = self.b
        out_strides = loops.contiguous_strides([d.size for d in self.dims])
        zero = irutil.i64(0)

        if self.slots:
            cache = irutil.stack_array(b, irutil.storage_type(self.dtype),
                                       self.slots * self.inner.size)
            cached = irutil.stack_array(b, irutil.I64, self.slots, 8)

        def level(k, out_offset, in_offset, positions):
            if k == len(self.outer):
                if self.slots:
                    self._cached_row(out_offset, in_offset, positions[-1], cache, cached)
                else:
                    self._row(out_offset, in_offset, positions)
                return
            dim = self.outer[k]
            if self.slots and k == len(self.outer) - 1:     # a new plane: nothing cached
                for slot in range(self.slots):
                    b.store(irutil.i64(-1), irutil.element_ptr(b, cached, "int64",
                                                               irutil.i64(slot)))
            start, stop = 0, dim.size
            if k == 0:
                start, stop = task_range(b, task, size, dim.size)
            with irutil.for_range(b, start, stop, name=f"r{k}") as o:
                next_out = b.add(out_offset, b.mul(o, irutil.i64(out_strides[k])))
                next_in = in_offset
                if dim.table is None:
                    next_in = b.add(in_offset, b.mul(o, irutil.i64(dim.stride)))
                level(k + 1, next_out, next_in, positions + [o])

        level(0, zero, zero, [])

    def _row(self, out_offset, in_offset, positions):
        b = self.b
        out_row = irutil.element_ptr(b, self.ctx.pointer(self.out), self.dtype, out_offset)
        by_dim = {id(d): o for d, o in zip(self.outer, positions)}
        if self.combinations == 1:
            self._combination(irutil.i64(0), out_row, in_offset, by_dim)
        else:
            with irutil.for_range(b, 0, self.combinations, name="tap") as c:
                self._combination(c, out_row, in_offset, by_dim)
        if self.extrapolates:
            self._extrapolate(out_row, by_dim)

    def _cached_row(self, out_offset, in_offset, row, cache, cached):
        """Output row ``row`` of a plane from the cache of interpolated input rows: each tap
        row not cached yet is interpolated into its slot, then the slots are summed with the
        row's weights, in whole vectors."""
        b, dim, size = self.b, self.resized[0], self.inner.size
        taps = dim.table.taps
        rows, weights = [], []
        for t in range(taps):
            at = b.add(b.mul(row, irutil.i64(taps)), irutil.i64(t))
            offset = self._load(dim.index, "int64", at)
            slot = b.and_(b.udiv(offset, irutil.i64(dim.stride)), irutil.i64(self.slots - 1))
            slot_row = irutil.element_ptr(b, cache, self.dtype, b.mul(slot, irutil.i64(size)))
            entry = irutil.element_ptr(b, cached, "int64", slot)
            with b.if_then(b.icmp_signed("!=", b.load(entry, typ=irutil.I64), offset)):
                in_row = irutil.element_ptr(b, self.ctx.pointer(self.source), self.dtype,
                                            b.add(in_offset, offset))
                self._columns(lambda j, width: irutil.store(
                    b, self._interpolate(in_row, j, width),
                    irutil.element_ptr(b, slot_row, self.dtype, j), self.dtype))
                b.store(offset, entry)
            rows.append(slot_row)
            weights.append(self._load(dim.weight, self.weight_dtype, at))
        out_row = irutil.element_ptr(b, self.ctx.pointer(self.out), self.dtype, out_offset)

        def blend(j, width):
            total = None
            for slot_row, weight in zip(rows, weights):
                value = b.fmul(irutil.load(b, irutil.element_ptr(b, slot_row, self.dtype, j),
                                           self.dtype, width),
                               irutil.splat(b, weight, width))
                total = value if total is None else b.fadd(total, value)
            irutil.store(b, total, irutil.element_ptr(b, out_row, self.dtype, j), self.dtype,
                         self.out.itemsize)
        self._columns(blend, gathers=False)

    def _combination(self, c, out_row, in_offset, by_dim):
        """Store (combination 0) or add the input row of tap combination ``c`` of the outer
        resized axes, weighted."""
        b = self.b
        offset, weight = in_offset, None
        later = self.combinations
        for d in self.resized:
            taps = d.table.taps
            later //= taps
            tap = c if isinstance(c, ir.Constant) and c.constant == 0 else \
                b.urem(b.udiv(c, irutil.i64(later)), irutil.i64(taps))
            at = b.add(b.mul(by_dim[id(d)], irutil.i64(taps)), tap)
            offset = b.add(offset, self._load(d.index, "int64", at))
            if not self.nearest:
                w = self._load(d.weight, self.weight_dtype, at)
                weight = w if weight is None else b.fmul(weight, w)
        in_row = irutil.element_ptr(b, self.ctx.pointer(self.source), self.dtype, offset)
        first = None
        if self.combinations > 1:
            first = b.icmp_unsigned("==", c, irutil.i64(0))
        self._columns(lambda j, width: self._column_block(in_row, out_row, weight, j, width,
                                                          first))

    def _columns(self, body, gathers=True):
        """Run ``body(j, width)`` over the innermost axis in vectors (narrower where they
        gather), then a scalar tail."""
        b = self.b
        size = self.inner.size
        width = loops.lanes(self.ctx.target, self.dtype)
        if self.inner.table is not None and gathers:
            width = min(width, _GATHER_LANES)
        while width > 1 and width > size:
            width //= 2
        blocks = size // width if width > 1 else 0
        if blocks:
            with irutil.for_range(b, 0, blocks, name="col") as block:
                body(b.mul(block, irutil.i64(width)), width)
        if blocks * width < size:
            with irutil.for_range(b, blocks * width, size, name="colt") as j:
                body(j, 1)

    def _column_block(self, in_row, out_row, weight, j, width, first):
        b = self.b
        inner = self.inner
        if inner.table is None:
            value = irutil.load(b, irutil.element_ptr(b, in_row, self.dtype, j), self.dtype,
                                width, self.source.itemsize)
            if weight is not None:
                value = b.fmul(value, irutil.splat(b, weight, width))
        else:
            value = self._interpolate(in_row, j, width)
            if weight is not None:
                value = b.fmul(value, irutil.splat(b, weight, width))
        target = irutil.element_ptr(b, out_row, self.dtype, j)
        if first is not None:   # later combinations add to what the first one stored
            total = b.fadd(irutil.load(b, target, self.dtype, width, self.out.itemsize), value)
            value = b.select(first, value, total)
        irutil.store(b, value, target, self.dtype, self.out.itemsize)

    def _interpolate(self, in_row, j, width):
        """The input row interpolated along the innermost axis at columns j .. j+width-1."""
        b = self.b
        taps, size = self.inner.table.taps, self.inner.size

        def tap_value(t):
            if isinstance(t, int):
                base = b.add(j, irutil.i64(t * size)) if t else j
            else:
                base = b.add(b.mul(t, irutil.i64(size)), j)
            offsets = self._load(self.inner.index, "int32", base, width)
            value = self._gather(in_row, offsets, width)
            if self.nearest:
                return value
            w = self._load(self.inner.weight, self.weight_dtype, base, width)
            return b.fmul(w, value)

        if self.nearest:
            return tap_value(0)
        if taps <= _UNROLL_TAPS:
            total = tap_value(0)
            for t in range(1, taps):
                total = b.fadd(total, tap_value(t))
            return total
        zero = irutil.const(irutil.vector_of(self.value_type, width), 0.0)
        with irutil.accumulating_loop(b, 0, taps, [zero], name="itap") as loop:
            loop.set_next([b.fadd(loop.values[0], tap_value(loop.index))])
        return loop.results[0]

    def _gather(self, in_row, offsets, width):
        b = self.b
        if width == 1:
            at = b.sext(offsets, irutil.I64)
            return irutil.load(b, irutil.element_ptr(b, in_row, self.dtype, at), self.dtype)
        return irutil.gather(b, in_row, self.dtype, offsets)

    def _extrapolate(self, out_row, by_dim):
        """Write extrapolation_value where the source coordinate of any axis is outside."""
        b = self.b
        ok = ir.Constant(irutil.I1, 1)
        for d in self.resized:
            if d.valid is not None:
                ok = b.and_(ok, self._load(d.valid, "bool", by_dim[id(d)]))
        fill = irutil.const(self.value_type,
                            resize.extrapolation_value(self.p, self.dtype).item())
        with irutil.for_range(b, 0, self.inner.size, name="ext") as j:
            keep = ok
            if self.inner.valid is not None:
                keep = b.and_(keep, self._load(self.inner.valid, "bool", j))
            target = irutil.element_ptr(b, out_row, self.dtype, j)
            value = irutil.load(b, target, self.dtype, 1, self.out.itemsize)
            irutil.store(b, b.select(keep, value, fill), target, self.dtype, self.out.itemsize)

