"""Element-wise kernels: one op with NumPy broadcasting, and the point-wise loop that fused
recipes and matrix-product epilogues share.

:func:`pointwise` makes a kernel with one grid-stride loop over a domain (a shape): each thread
loads its element of every input (broadcast inputs by stride 0, over the domain's dimensions
merged where every operand allows), computes the outputs' values in registers and stores them.
"""

import math

from myelin.codegen.cuda import cudatypes, expressions
from myelin.codegen.cuda.kernels.base import (CudaKernel, Launch, Signature, coordinates,
                                              grid_stride, kernel, literal_constant)
from myelin.plan.strides import broadcast_strides, collapse, contiguous_strides


def pointwise(name, step, domain, inputs, outputs, evaluate):
    """The :class:`KernelCode` computing ``outputs`` (tensors of shape ``domain``) from
    ``inputs`` (tensors broadcasting to it) at every point of ``domain``.

    ``evaluate(values)`` gets one C value per input (an identifier or literal of its compute
    type) and returns (C statements, one value per output)."""
    signature = Signature()
    in_strides = [broadcast_strides(t.shape, domain) for t in inputs]
    out_strides = [contiguous_strides(domain)] * len(outputs)
    shape, strides = collapse(tuple(domain), in_strides + out_strides)
    units = math.prod(domain)
    lines, offsets = coordinates("i", shape, strides, "d")
    body = [grid_stride("i", units)] + ["  " + line for line in lines]
    values = []
    for k, (tensor, offset) in enumerate(zip(inputs, offsets)):
        constant = literal_constant(tensor)
        if constant is not None:
            values.append(constant)
            continue
        pointer = signature.pointer(tensor)
        values.append(f"x{k}")
        body.append(f"  const {cudatypes.compute(tensor.dtype)} x{k} = "
                    f"{cudatypes.load(tensor.dtype, f'{pointer}[{offset}]')};")
    statements, results = evaluate(values)
    body += ["  " + line for line in statements]
    for tensor, offset, value in zip(outputs, offsets[len(inputs):], results):
        pointer = signature.pointer(tensor, write=True)
        body.append(f"  {pointer}[{offset}] = {cudatypes.store(tensor.dtype, value)};")
    body.append("}")
    return kernel(name, step, signature, body, Launch(units))


def same_layout_inputs(step, domain):
    """Indices of inputs that output 0 may overwrite: read at exactly the position written
    (each element is read before it is written by the same thread)."""
    out = step.outputs[0]
    return [i for i, t in enumerate(step.inputs)
            if t.shape == out.shape and t.itemsize == out.itemsize
            and broadcast_strides(t.shape, domain) == contiguous_strides(domain)]


class ElementwiseKernel(CudaKernel):
    """``out[i] = op(in0[i], in1[i], ...)`` in one grid-stride loop (name ``<Op>Expr``)."""

    name = "Expr"

    def supports(self, step, target):
        return (expressions.supported(step.type) and len(step.outputs) == 1
                and all(cudatypes.supported(t.dtype) for t in step.inputs + step.outputs))

    def kernel_name(self, step):
        return f"{step.type}Expr"

    def inplace(self, step):
        return same_layout_inputs(step, step.outputs[0].shape)

    def generate(self, step, names):
        out = step.outputs[0]
        in_dtypes = [t.dtype for t in step.inputs]

        def evaluate(values):
            value = expressions.expression(step.type, values, in_dtypes, out.dtype, step.attrs)
            return [f"const {cudatypes.compute(out.dtype)} y = {value};"], ["y"]

        return [pointwise(names.unique(f"{step.type}_{step.name}"), step, out.shape,
                          step.inputs, [out], evaluate)]
