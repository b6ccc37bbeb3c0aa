"""The element-wise kernel: any op with an element-wise lowering, with NumPy broadcasting."""

from myelin.codegen.llvm import elementwise, irutil, loops
from myelin.codegen.llvm.kernels.base import parallel_elementwise
from myelin.codegen.llvm.kernels.runs import RunKernel


class ElementwiseKernel(RunKernel):
    """``out[i] = op(in0[i], in1[i], ...)`` in one vectorized loop nest (name ``<Op>Expr``)."""

    name = "Expr"
    shares_code = True

    def supports(self, step, target):
        return (elementwise.supported(step.type) and len(step.outputs) == 1
                and all(t.dtype in irutil._STORAGE for t in step.inputs + step.outputs))

    def kernel_name(self, step):
        return f"{step.type}Expr"

    def variant(self, step, target):
        out = step.outputs[0]
        lanes = max(1, target.vector_bytes // max(t.itemsize for t in step.inputs + step.outputs))
        return f"{target.isa()}x{lanes}" if out.elements >= lanes else f"{target.isa()}x1"

    def inplace(self, step):
        out = step.outputs[0]
        return [i for i, t in enumerate(step.inputs)
                if t.shape == out.shape and t.itemsize == out.itemsize]

    def flops(self, step):
        return step.outputs[0].elements

    def run_domain(self, step):
        return step.outputs[0].shape

    def run_flops(self, step):
        return 1

    def emit(self, ctx, step):
        out = step.outputs[0]
        in_dtypes = [t.dtype for t in step.inputs]

        def body(builder, values, lanes):
            return [elementwise.emit(builder, step.type, values, in_dtypes, out.dtype, step.attrs)]

        if self.count(step) is not None:
            self.emit_run(ctx, step, body)
            return

        def operands(sub):
            return ([sub.operand(t, loops.broadcast_strides(t.shape, out.shape))
                     for t in step.inputs], [sub.operand(out)])

        parallel_elementwise(ctx, f"{step.type}.{step.name}", step.inputs + step.outputs,
                             out.shape, operands, body, flops=1)
