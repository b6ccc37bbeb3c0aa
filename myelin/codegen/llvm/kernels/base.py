"""The kernel interface of the CPU back end and the context kernels emit code into.

A kernel generates the code of one step, inline in the cell function. The compiler asks each
kernel registered for an op type, in order, whether it ``supports`` the step; the first that
does is used. A kernel also tells the memory planner which input an output may overwrite
(``inplace``) and whether its output is only a view of its input (``view``: no code at all).
"""

import math

from myelin.codegen.llvm import irutil
from myelin.codegen.llvm.loops import Operand, contiguous_strides


class Kernel:
    """Base class of kernels. Subclasses set ``name`` and implement ``emit``."""

    name = "Kernel"

    def supports(self, step, target):
        return True

    def kernel_name(self, step):
        """The name shown in cell dumps and profiles."""
        return self.name

    def variant(self, step, target):
        return target.isa()

    def view(self, step):
        """True if output 0 can share the bytes of input 0 unchanged (no code is emitted)."""
        return False

    def inplace(self, step):
        """Indices of inputs whose storage output 0 may reuse when they die at this step."""
        return []

    def flops(self, step):
        return 0

    def emit(self, ctx, step):
        raise NotImplementedError


class EmitContext:
    """Where a kernel emits: the IR builder, the target, and the addresses of tensors."""

    def __init__(self, builder, target, instance_ptr, instance_alignment):
        self.builder = builder
        self.target = target
        self.instance_ptr = instance_ptr
        self.instance_alignment = instance_alignment
        self.status = 1     # what the cell function returns when the current step fails

    def fail_if(self, condition):
        """Return from the cell function with the current step's status if ``condition`` (an
        i1) holds: the runtime raises InputError naming the step (bad input at run time, such
        as an index out of range). Emission continues in the block where it is false."""
        b = self.builder
        fail = b.append_basic_block("fail")
        ok = b.append_basic_block("ok")
        b.cbranch(condition, fail, ok)
        b.position_at_end(fail)
        b.ret(irutil.const(irutil.I32, self.status))
        b.position_at_end(ok)

    def pointer(self, tensor):
        """An ``ptr`` value addressing the first element of ``tensor``."""
        root = tensor.root()
        if root.address is not None:
            return self.builder.inttoptr(irutil.i64(root.address), irutil.PTR)
        return irutil.byte_ptr(self.builder, self.instance_ptr, root.offset)

    def alignment(self, tensor):
        """Byte alignment guaranteed for the first element of ``tensor``."""
        root = tensor.root()
        if root.address is not None:
            return math.gcd(root.address, 4096) or 4096
        return math.gcd(root.offset, self.instance_alignment) or self.instance_alignment

    def operand(self, tensor, strides=None):
        """A loop operand over ``tensor`` (dense row-major unless ``strides`` are given)."""
        if strides is None:
            strides = contiguous_strides(tensor.shape)
        return Operand(self.pointer(tensor), tensor.dtype, tuple(strides), self.alignment(tensor))
