"""What the planner asks of a kernel, whichever back end generates its code.

The compiler asks each kernel registered for an op type, in order, whether it ``supports`` a
step; the first that does is used. The kernel then names itself in dumps (``kernel_name``,
``variant``) and tells the memory planner whether its output is only a view of its input
(``view``: no code at all), which inputs an output may overwrite (``inplace``) and which it
reads at compile time only (``packed_inputs``: a constant nothing else reads is not copied
into the network's memory). The CPU's kernels (:class:`myelin.codegen.llvm.kernels.base.Kernel`)
and the GPU's (:class:`myelin.codegen.cuda.kernels.base.CudaKernel`) add how they generate
code. A step whose outputs are all empty gets :data:`EMPTY` instead, whichever the back end.
"""


class PlannedKernel:
    """Base class of every back end's kernels. Subclasses set ``name``."""

    name = "Kernel"

    def supports(self, step, target):
        return True

    def kernel_name(self, step):
        """The name shown in cell dumps and profiles."""
        return self.name

    def variant(self, step, target):
        return target.isa()

    def view(self, step):
        """True if output 0 can share the bytes of input 0 unchanged (no code)."""
        return False

    def inplace(self, step):
        """Indices of inputs whose storage output 0 may reuse when they die at this step."""
        return []

    def packed_inputs(self, step):
        """Indices of inputs whose values the kernel takes at compile time only (packing a
        constant into arrays of its own): its code never reads those tensors as it runs."""
        return ()


class EmptyKernel(PlannedKernel):
    """The kernel of a step whose outputs are all empty (a dimension of 0): no code at all,
    on any back end; the step is planned but never emitted (:attr:`Step.noop`)."""

    name = "Empty"

    def variant(self, step, target):
        return ""


EMPTY = EmptyKernel()
