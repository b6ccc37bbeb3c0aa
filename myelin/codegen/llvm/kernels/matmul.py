"""Matrix multiplication: C = op(A) x op(B) over broadcast batch dimensions.

With B in row-major order (not transposed) the kernel computes register tiles of up to
``ROWS`` rows by ``VECTORS`` vectors of C: for each k, one vector of B's row k is loaded per
tile column and multiplied by A[i, k] splatted over the lanes, so every loaded element is used
``ROWS`` times. With B transposed, each C element is a dot product of two rows contiguous in k,
computed in vectors with a horizontal sum.

``FusedMatMul`` is the same product with an element-wise epilogue: where a result (a vector
of ``lanes`` columns or a scalar) is stored, the epilogue recipe is applied to it first, with
its extra inputs loaded at the same batch, row and columns through their broadcast strides.
"""

from myelin.codegen.llvm import irutil, loops, mathlib
from myelin.codegen.llvm.kernels import fused
from myelin.codegen.llvm.kernels.base import Kernel
from myelin.codegen.llvm.kernels.reduction import horizontal
from myelin.flow import dtypes

ROWS = 4
VECTORS = 3


def _fadd(b, x, y):
    return b.fadd(x, y) if irutil.is_float(x.type) else b.add(x, y)


def _madd(b, x, y, acc):
    if irutil.is_float(acc.type):
        return mathlib.fmuladd(b, x, y, acc)
    return b.add(b.mul(x, y), acc)


class MatMulKernel(Kernel):
    """``MatMul`` with attributes ``transpose_a``/``transpose_b`` and batch broadcasting, and
    ``FusedMatMul`` (the same with an epilogue)."""

    name = "MatMul"

    def supports(self, step, target):
        a, b = step.inputs[:2]
        if not (len(a.shape) >= 2 and len(b.shape) >= 2
                and a.dtype == b.dtype == step.outputs[0].dtype
                and a.dtype in ("float32", "float64", "int32", "int64")):
            return False
        if step.type == "FusedMatMul":
            return fused.epilogue(step) is not None
        return step.type == "MatMul" and len(step.inputs) == 2

    def kernel_name(self, step):
        return step.type

    def variant(self, step, target):
        layout = "T" if step.attrs.get_bool("transpose_b", False) else "N"
        return f"{target.isa()}{layout}"

    def inplace(self, step):
        # An epilogue reads each extra input element just before it writes the same position.
        c = step.outputs[0]
        return [i for i, t in enumerate(step.inputs) if i >= 2
                and t.shape == c.shape and t.itemsize == c.itemsize]

    def flops(self, step):
        a, c = step.inputs[0], step.outputs[0]
        k = a.shape[-2] if step.attrs.get_bool("transpose_a", False) else a.shape[-1]
        parts = len(fused.epilogue(step).parts) if step.type == "FusedMatMul" else 0
        return (2 * k + parts) * c.elements

    def emit(self, ctx, step):
        a, b, c = step.inputs[0], step.inputs[1], step.outputs[0]
        trans_a = step.attrs.get_bool("transpose_a", False)
        trans_b = step.attrs.get_bool("transpose_b", False)
        m, n = c.shape[-2], c.shape[-1]
        k = a.shape[-2] if trans_a else a.shape[-1]
        batch = c.shape[:-2]
        operands = [ctx.operand(t, self._batch_strides(t, batch)) for t in (a, b, c)]
        # Extra epilogue inputs: batch strides for the loops, (row, column) strides for loads.
        extra_strides = [loops.broadcast_strides(x.shape, c.shape) for x in step.inputs[2:]]
        operands += [ctx.operand(x, s[:-2]) for x, s in zip(step.inputs[2:], extra_strides)]
        geometry = dict(m=m, n=n, k=k, trans_a=trans_a, trans_b=trans_b, dtype=c.dtype,
                        epilogue=fused.epilogue(step) if step.type == "FusedMatMul" else None,
                        extra_strides=[s[-2:] for s in extra_strides])

        def product(pointers):
            if trans_b:
                self._emit_dots(ctx, pointers, geometry)
            else:
                self._emit_tiles(ctx, pointers, geometry)

        loops.outer_loops(ctx.builder, batch, operands, [op.strides for op in operands], product)

    @staticmethod
    def _batch_strides(tensor, batch):
        """Element strides of ``tensor``'s matrices over the output's batch dimensions."""
        matrix = tensor.shape[-2] * tensor.shape[-1]
        return tuple(s * matrix for s in loops.broadcast_strides(tensor.shape[:-2], batch))

    @staticmethod
    def _store(ctx, pointers, g, value, row, column):
        """Store ``value`` at C[row, column:column + lanes], through the epilogue if any."""
        b = ctx.builder
        dtype = g["dtype"]
        itemsize = dtypes.itemsize(dtype)
        if g["epilogue"] is not None:
            lanes = irutil.width_of(value)
            extras = []
            for ptr, (row_stride, column_stride) in zip(pointers[3:], g["extra_strides"]):
                # Broadcast strides of a dense tensor are 0 or 1 along the columns.
                index = b.add(b.mul(row, irutil.i64(row_stride)),
                              b.mul(column, irutil.i64(column_stride)))
                at = irutil.element_ptr(b, ptr, dtype, index)
                if column_stride == 0:
                    extras.append(irutil.splat(b, irutil.load(b, at, dtype, 1, itemsize), lanes))
                else:
                    extras.append(irutil.load(b, at, dtype, lanes, itemsize))
            (value,) = g["epilogue"].evaluate(b, [value] + extras)
        index = b.add(b.mul(row, irutil.i64(g["n"])), column)
        irutil.store(b, value, irutil.element_ptr(b, pointers[2], dtype, index), dtype, itemsize)

    # B row-major: register tiles of C.
    def _emit_tiles(self, ctx, pointers, g):
        b = ctx.builder
        m, n, dtype = g["m"], g["n"], g["dtype"]
        lanes = loops.lanes(ctx.target, dtype)
        if n < lanes:
            lanes = 1
        wide = lanes * VECTORS
        full_wide = n - n % wide if lanes > 1 else 0
        full_vec = n - n % lanes if lanes > 1 else 0

        def row_block(i0, rows):
            if full_wide:
                with irutil.for_range(b, 0, full_wide, wide, name="j") as j0:
                    self._tile(ctx, pointers, g, i0, j0, rows, VECTORS, lanes)
            if full_vec > full_wide:
                with irutil.for_range(b, full_wide, full_vec, lanes, name="jv") as j0:
                    self._tile(ctx, pointers, g, i0, j0, rows, 1, lanes)
            if n > full_vec:
                with irutil.for_range(b, full_vec, n, 1, name="js") as j0:
                    self._tile(ctx, pointers, g, i0, j0, rows, 1, 1)

        full_rows = m - m % ROWS
        if full_rows:
            with irutil.for_range(b, 0, full_rows, ROWS, name="i") as i0:
                row_block(i0, ROWS)
        if m > full_rows:
            row_block(irutil.i64(full_rows), m - full_rows)

    def _tile(self, ctx, pointers, g, i0, j0, rows, vectors, lanes):
        b = ctx.builder
        a_ptr, b_ptr = pointers[:2]
        k, n, m, dtype = g["k"], g["n"], g["m"], g["dtype"]
        acc_type = irutil.vector_of(irutil.compute_type(dtype), lanes)
        zero = irutil.const(acc_type, 0)
        itemsize = dtypes.itemsize(dtype)
        # A[i, kk] is at i*k + kk, or kk*m + i when A is transposed.
        a_row, a_col = (1, m) if g["trans_a"] else (k, 1)
        rows_at = [b.add(i0, irutil.i64(r)) for r in range(rows)]
        with irutil.accumulating_loop(b, 0, k, [zero] * (rows * vectors), name="kk") as loop:
            kk = loop.index
            b_row = b.mul(kk, irutil.i64(n))
            b_values = []
            for v in range(vectors):
                column = b.add(j0, irutil.i64(v * lanes))
                at = irutil.element_ptr(b, b_ptr, dtype, b.add(b_row, column))
                b_values.append(irutil.load(b, at, dtype, lanes, itemsize))
            nxt = []
            for r in range(rows):
                index = b.add(b.mul(rows_at[r], irutil.i64(a_row)), b.mul(kk, irutil.i64(a_col)))
                scalar = irutil.load(b, irutil.element_ptr(b, a_ptr, dtype, index), dtype, 1,
                                     itemsize)
                broadcast = irutil.splat(b, scalar, lanes)
                for v in range(vectors):
                    nxt.append(_madd(b, broadcast, b_values[v], loop.values[r * vectors + v]))
            loop.set_next(nxt)
        for r in range(rows):
            for v in range(vectors):
                column = b.add(j0, irutil.i64(v * lanes))
                self._store(ctx, pointers, g, loop.results[r * vectors + v], rows_at[r], column)

    # B transposed: dot products of rows.
    def _emit_dots(self, ctx, pointers, g):
        b = ctx.builder
        a_ptr, b_ptr = pointers[:2]
        m, n, k, dtype = g["m"], g["n"], g["k"], g["dtype"]
        itemsize = dtypes.itemsize(dtype)
        lanes = loops.lanes(ctx.target, dtype)
        a_row, a_col = (1, m) if g["trans_a"] else (k, 1)
        if k < lanes or g["trans_a"]:
            lanes = 1
        vector_end = k - k % lanes if lanes > 1 else 0
        scalar_type = irutil.compute_type(dtype)

        with irutil.for_range(b, 0, m, name="i") as i:
            with irutil.for_range(b, 0, n, name="j") as j:
                a_base = b.mul(i, irutil.i64(a_row))
                b_base = b.mul(j, irutil.i64(k))
                total = irutil.const(scalar_type, 0)
                if vector_end:
                    zero = irutil.const(irutil.vector_of(scalar_type, lanes), 0)
                    with irutil.accumulating_loop(b, 0, vector_end, [zero], lanes,
                                                  name="kv") as loop:
                        x = irutil.load(b, irutil.element_ptr(b, a_ptr, dtype,
                                                               b.add(a_base, loop.index)),
                                        dtype, lanes, itemsize)
                        y = irutil.load(b, irutil.element_ptr(b, b_ptr, dtype,
                                                               b.add(b_base, loop.index)),
                                        dtype, lanes, itemsize)
                        loop.set_next([_madd(b, x, y, loop.values[0])])
                    total = horizontal(b, loop.results[0], _fadd)
                if vector_end < k:
                    with irutil.accumulating_loop(b, vector_end, k, [total], name="ks") as loop:
                        a_index = b.add(a_base, b.mul(loop.index, irutil.i64(a_col)))
                        x = irutil.load(b, irutil.element_ptr(b, a_ptr, dtype, a_index), dtype,
                                        1, itemsize)
                        y = irutil.load(b, irutil.element_ptr(b, b_ptr, dtype,
                                                               b.add(b_base, loop.index)),
                                        dtype, 1, itemsize)
                        loop.set_next([_madd(b, x, y, loop.values[0])])
                    total = loop.results[0]
                self._store(ctx, pointers, g, total, i, j)
