"""The compiled form of a function before code generation: tensors and steps.

A :class:`TensorSpec` is a variable as the compiled cell sees it: where it lives (an offset in
the instance block, or the address of a global owned by the network), its size, alignment and
live range, and which other tensor's storage it shares. A reference input (a variable flagged
``ref``) keeps only a pointer in the instance block: the caller binds an array of its own to
it, which the cell reads without a copy. A :class:`Step` is an operation with
its chosen kernel. A :class:`Repeat` makes a cell loop over its steps.
"""

import dataclasses
import math

from myelin.flow import dtypes

INPUT, OUTPUT, LOCAL, CONSTANT, LEARNABLE = "input", "output", "local", "constant", "learnable"


@dataclasses.dataclass(eq=False)
class TensorSpec:
    """One tensor of a cell: a variable with its layout in memory."""

    name: str
    dtype: str
    shape: tuple
    kind: str
    aliases: list = dataclasses.field(default_factory=list)
    is_output: bool = False        # an output of the cell (also set for input-and-output)
    alignment: int = 64
    offset: int | None = None      # byte offset in the instance block (instance tensors)
    address: int | None = None     # absolute address (globals)
    first: int = -1                # first and last step index that touch the tensor
    last: int = -1
    shares: "TensorSpec | None" = None   # storage taken over from this tensor (printed "union")
    # The tensor lives in another's bytes: a view made without code, or a value its producer
    # writes straight into the target of an Assign (myelin.plan.assign).
    view_of: "TensorSpec | None" = None
    # The tensor is a part of another's bytes, ``slice_offset`` bytes in: an input of a
    # Concat that its producer writes straight into its place in the output
    # (myelin.plan.concat). Unlike a view, code addresses it as a tensor of its own.
    slice_of: "TensorSpec | None" = None
    slice_offset: int = 0
    ref: bool = False              # the instance holds a pointer to the elements (inputs only)
    # A small constant that a back end passes to its kernels as they run rather than compiling
    # its value into their code (myelin.codegen.llvm.kernels.constants.pass_constants).
    passed: bool = False

    @property
    def itemsize(self):
        return dtypes.itemsize(self.dtype)

    @property
    def elements(self):
        """The number of elements: 0 for an empty tensor (a dimension of 0)."""
        return math.prod(self.shape)

    @property
    def size(self):
        return self.elements * self.itemsize

    @property
    def instance_bytes(self):
        """Bytes the tensor takes in the instance block: a pointer for a reference."""
        return 8 if self.ref else max(self.size, 1)

    @property
    def is_global(self):
        return self.kind in (CONSTANT, LEARNABLE)

    @property
    def in_instance(self):
        return not self.is_global

    def root(self):
        """The tensor whose storage this one uses (following views)."""
        tensor = self
        while tensor.view_of is not None:
            tensor = tensor.view_of
        return tensor

    def constant_data(self):
        """The values of this tensor's storage (its root) if that is a constant whose values
        are known at compile time, else None."""
        root = self.root()
        var = getattr(root, "var", None)
        return var.data if root.kind == CONSTANT and var is not None else None

    def owner(self):
        """(the tensor that owns this one's storage, following views and slices, and this
        one's byte offset in it)."""
        tensor, offset = self, 0
        while tensor.view_of is not None or tensor.slice_of is not None:
            if tensor.view_of is not None:
                tensor = tensor.view_of
            else:
                tensor, offset = tensor.slice_of, offset + tensor.slice_offset
        return tensor, offset

    def type_string(self):
        if not self.shape:
            return self.dtype
        return f"{self.dtype}[{'x'.join(str(d) for d in self.shape)}]"


@dataclasses.dataclass(eq=False)
class Step:
    """One operation of a cell with its inputs, outputs and kernel."""

    name: str
    type: str
    inputs: list
    outputs: list
    attrs: dict
    kernel: object = None
    variant: str = ""
    op: object = None   # the flow Operation it came from
    choice: dict = dataclasses.field(default_factory=dict)  # kernel options (tuning)

    @property
    def empty(self):
        """True if the step has outputs and every one is empty: there is nothing to compute."""
        return bool(self.outputs) and all(out.elements == 0 for out in self.outputs)

    @property
    def noop(self):
        """True if the step needs no code: its outputs are empty, or its kernel makes views
        and its outputs are."""
        if self.empty:
            return True
        return (bool(self.outputs) and all(out.view_of is not None for out in self.outputs)
                and (self.kernel is None or self.kernel.view(self)))


@dataclasses.dataclass(eq=False)
class Repeat:
    """A cell that loops: it runs its steps from step ``start`` on again while ``condition``
    (a one-element output) is true, first copying each output of ``feedback`` ((output,
    input) pairs) over its input. The inputs copied over are the loop's state; the steps
    before ``start`` depend on none of them and run once."""

    condition: TensorSpec
    feedback: list
    start: int = 0
