"""Kernels that move data: views (no code), copies, Transpose, Concat, Split, Slice, Gather and
Assign.

Each is a grid-stride loop over the elements written: the position of each element is split
into coordinates (over the dimensions merged where both sides allow) and read from the source
at its strides, which makes transposes and slices plain strided copies. ``Gather`` checks
every index: one out of range takes the ``oov`` row when there is one, and otherwise writes
zeros and sets the kernel's status word, which the runtime reports as an InputError.
"""

import numpy as np

from myelin.codegen.cuda import cudatypes
from myelin.codegen.cuda.kernels.base import (CudaKernel, Launch, Signature, coordinates,
                                              grid_stride, kernel)
from myelin.plan.strides import collapse, contiguous_strides


def _constant_ints(step, index):
    data = step.op.inputs[index].data if step.op is not None else None
    if data is None:
        return None
    return [int(v) for v in np.asarray(data).reshape(-1)]


def _copy_loop(signature, shape, source, source_strides, source_offset, target,
               target_strides, target_offset, variable):
    """C lines of a grid-stride loop copying ``shape`` elements between strided tensors
    (offsets and strides in elements), converting the element type if needed."""
    units = int(np.prod(shape, dtype=np.int64))
    merged, (reads, writes) = collapse(tuple(shape), [source_strides, target_strides])
    lines, (read, write) = coordinates(variable, merged, [reads, writes], f"{variable}_")
    src = signature.pointer(source)
    dst = signature.pointer(target, write=True)
    value = cudatypes.load(source.dtype, f"{src}[{source_offset}LL + {read}]")
    if source.dtype != target.dtype:
        value = f"(({cudatypes.compute(target.dtype)}){value})"
    return ([grid_stride(variable, units)] + ["  " + line for line in lines]
            + [f"  {dst}[{target_offset}LL + {write}] = {cudatypes.store(target.dtype, value)};",
               "}"])


def _copy_kernel(name, step, parts, units):
    """A kernel of one copy loop per part ((shape, source, strides, offset, target, strides,
    offset) tuples): the parts write disjoint elements, so one loop follows the other."""
    signature = Signature()
    body = []
    for i, part in enumerate(parts):
        body += _copy_loop(signature, *part, variable=f"i{i}")
    return kernel(name, step, signature, body, Launch(units))


def _dense(tensor):
    return contiguous_strides(tensor.shape)


class ViewKernel(CudaKernel):
    """Reshape-like ops whose output has the input's bytes unchanged: no code, unless the
    planner could not make the output a view (then the bytes are copied)."""

    name = "Reshape"
    TYPES = ("Reshape", "Identity", "Squeeze", "ExpandDims")

    def supports(self, step, target):
        source, out = step.inputs[0], step.outputs[0]
        return (step.type in self.TYPES and source.dtype == out.dtype
                and cudatypes.supported(out.dtype) and source.elements == out.elements)

    def kernel_name(self, step):
        return step.type

    def view(self, step):
        return True

    def generate(self, step, names):
        source, out = step.inputs[0], step.outputs[0]
        if out.view_of is not None:
            return []
        part = ((out.elements,), source, (1,), 0, out, (1,), 0)
        return [_copy_kernel(names.unique(f"Copy_{step.name}"), step, [part], out.elements)]


class TransposeKernel(CudaKernel):
    """``Transpose`` by attribute ``perm`` (default: reversed axes) as a strided copy."""

    name = "Transpose"

    def supports(self, step, target):
        return step.type == "Transpose" and cudatypes.supported(step.outputs[0].dtype)

    def generate(self, step, names):
        source, out = step.inputs[0], step.outputs[0]
        rank = len(source.shape)
        perm = step.attrs.get_ints("perm") if "perm" in step.attrs else list(range(rank))[::-1]
        own = _dense(source)
        reads = tuple(own[p % rank] for p in perm)
        part = (out.shape, source, reads, 0, out, _dense(out), 0)
        return [_copy_kernel(names.unique(f"Transpose_{step.name}"), step, [part],
                             out.elements)]


class SliceKernel(CudaKernel):
    """``Slice(x, begin, size)`` with a constant ``begin``."""

    name = "Slice"

    def supports(self, step, target):
        return (step.type == "Slice" and cudatypes.supported(step.outputs[0].dtype)
                and _constant_ints(step, 1) is not None)

    def generate(self, step, names):
        source, out = step.inputs[0], step.outputs[0]
        strides = _dense(source)
        offset = sum(b * s for b, s in zip(_constant_ints(step, 1), strides))
        part = (out.shape, source, strides, offset, out, _dense(out), 0)
        return [_copy_kernel(names.unique(f"Slice_{step.name}"), step, [part], out.elements)]


class ConcatKernel(CudaKernel):
    """``Concat(x1, ..., xN, axis)``: each input copied into its slice of the output."""

    name = "Concat"

    def supports(self, step, target):
        return (step.type == "Concat" and cudatypes.supported(step.outputs[0].dtype)
                and _constant_ints(step, len(step.inputs) - 1) is not None)

    def generate(self, step, names):
        out = step.outputs[0]
        axis = _constant_ints(step, len(step.inputs) - 1)[0] % len(out.shape)
        strides = _dense(out)
        parts, begin = [], 0
        for source in step.inputs[:-1]:
            parts.append((source.shape, source, _dense(source), 0, out, strides,
                          begin * strides[axis]))
            begin += source.shape[axis]
        return [_copy_kernel(names.unique(f"Concat_{step.name}"), step, parts, out.elements)]


class SplitKernel(CudaKernel):
    """``Split(x, n, axis)``: each output copied from its slice of the input."""

    name = "Split"

    def supports(self, step, target):
        return (step.type == "Split" and cudatypes.supported(step.inputs[0].dtype)
                and _constant_ints(step, 2) is not None)

    def generate(self, step, names):
        source = step.inputs[0]
        axis = _constant_ints(step, 2)[0] % len(source.shape)
        strides = _dense(source)
        parts, begin = [], 0
        for out in step.outputs:
            parts.append((out.shape, source, strides, begin * strides[axis], out, _dense(out), 0))
            begin += out.shape[axis]
        return [_copy_kernel(names.unique(f"Split_{step.name}"), step, parts,
                             source.elements)]


class AssignKernel(CudaKernel):
    """``Assign(target, value)``: copies value into the target variable's storage."""

    name = "Assign"

    def supports(self, step, target):
        return (step.type == "Assign" and len(step.inputs) == 2
                and step.inputs[0].elements == step.inputs[1].elements
                and all(cudatypes.supported(t.dtype) for t in step.inputs))

    def generate(self, step, names):
        target, value = step.inputs
        part = ((value.elements,), value, (1,), 0, target, (1,), 0)
        return [_copy_kernel(names.unique(f"Assign_{step.name}"), step, [part], value.elements)]


class GatherKernel(CudaKernel):
    """``Gather(params, indices[, oov])``: rows of params by index (or entries along ``axis``);
    see the module docstring for indices out of range."""

    name = "Gather"

    def supports(self, step, target):
        return (step.type == "Gather" and step.inputs[1].dtype in ("int32", "int64")
                and cudatypes.supported(step.inputs[0].dtype))

    def generate(self, step, names):
        params, indices, out = step.inputs[0], step.inputs[1], step.outputs[0]
        oov = step.inputs[2] if len(step.inputs) > 2 else None
        axis = step.attrs.get_int("axis", 0) % len(params.shape)
        rows = params.shape[axis]
        row = int(np.prod(params.shape[axis + 1:], dtype=np.int64))
        count = indices.elements
        signature = Signature()
        table, index_ptr = signature.pointer(params), signature.pointer(indices)
        fallback = signature.pointer(oov) if oov is not None else None
        dst = signature.pointer(out, write=True)
        ctype = cudatypes.storage(out.dtype)
        body = [grid_stride("i", out.elements),
                f"  const int64_t r = i % {row}LL;",
                f"  const int64_t g = (i / {row}LL) % {count}LL;",
                f"  const int64_t o = i / ({row}LL * {count}LL);",
                f"  const int64_t index = (int64_t){index_ptr}[g];",
                f"  if (index >= 0 && index < {rows}LL) {{",
                f"    {dst}[i] = {table}[(o * {rows}LL + index) * {row}LL + r];",
                "  } else {"]
        if fallback is not None:
            body.append(f"    {dst}[i] = {fallback}[r];")
        else:
            body += [f"    {dst}[i] = {ctype}();", "    *status = 1;"]
        body += ["  }", "}"]
        return [kernel(names.unique(f"Gather_{step.name}"), step, signature, body,
                       Launch(out.elements), status=oov is None)]
