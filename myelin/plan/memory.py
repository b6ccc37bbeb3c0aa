"""The instance memory plan: live ranges, in-place sharing and offsets with reuse.

Inputs and outputs of a cell keep their own space for the whole call (the caller writes the
one and reads the other). A local tensor lives from the step that writes it to the last step
that reads it (views extend the range of the tensor they view); in a cell that loops from
step ``loop_start`` on, a tensor written before that step and read in the loop lives to the
end. Locals are placed first-fit,
in order of first use, into space freed by tensors whose range has ended, and an element-wise
step may write its output over an input that dies at that step (its kernel says which).
"""

from myelin.plan.cell import INPUT, LOCAL, OUTPUT


def _align(value, alignment):
    return (value + alignment - 1) // alignment * alignment


def live_ranges(steps, tensors, loop_start=None):
    """Set ``first``/``last`` step indices on every instance tensor (views count for their
    root; see the module for ``loop_start``)."""
    for tensor in tensors:
        tensor.first, tensor.last = -1, -1
    end = len(steps)
    for index, step in enumerate(steps):
        for tensor in step.inputs + step.outputs:
            root = tensor.root()
            if root.first < 0:
                root.first = index
            root.last = max(root.last, index)
    for tensor in tensors:
        root = tensor.root()
        if tensor.kind in (INPUT, OUTPUT):
            root.first, root.last = 0, end
        elif loop_start is not None and root.first < loop_start <= root.last:
            root.last = end


class _FreeList:
    """First-fit allocator over one growing block; freed ranges are merged with neighbours."""

    def __init__(self):
        self.free = []   # sorted (offset, size)
        self.top = 0

    def allocate(self, size, alignment):
        for i, (offset, length) in enumerate(self.free):
            start = _align(offset, alignment)
            if start + size <= offset + length:
                pieces = []
                if start > offset:
                    pieces.append((offset, start - offset))
                if start + size < offset + length:
                    pieces.append((start + size, offset + length - start - size))
                self.free[i:i + 1] = pieces
                return start
        start = _align(self.top, alignment)
        if start > self.top:
            self.release(self.top, start - self.top)
        self.top = start + size
        return start

    def release(self, offset, size):
        if size <= 0:
            return
        self.free.append((offset, size))
        self.free.sort()
        merged = []
        for start, length in self.free:
            if merged and merged[-1][0] + merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + length)
            else:
                merged.append((start, length))
        self.free = merged


def plan(steps, tensors, reuse=True, loop_start=None):
    """Assign ``offset`` to every instance tensor; returns (instance size, size without reuse).

    ``steps`` are in execution order (looping from ``loop_start``, if given); each step's
    kernel may answer ``inplace(step)`` with the indices of inputs whose storage its first
    output can take over.
    """
    live_ranges(steps, tensors, loop_start)
    owners = [t for t in tensors if t.in_instance and t.view_of is None]
    unshared_size = 0
    for tensor in owners:
        unshared_size = _align(unshared_size, tensor.alignment) + tensor.instance_bytes
    allocator = _FreeList()
    placed = set()

    # Inputs and outputs first, in their order: they are live throughout.
    for tensor in owners:
        if tensor.kind in (INPUT, OUTPUT):
            tensor.offset = allocator.allocate(tensor.instance_bytes, tensor.alignment)
            placed.add(id(tensor))

    dying = {}
    for tensor in owners:
        if tensor.kind == LOCAL and tensor.last >= 0:
            dying.setdefault(tensor.last, []).append(tensor)

    for index, step in enumerate(steps):
        for position, output in enumerate(step.outputs):
            if output.view_of is not None or id(output) in placed or output.kind != LOCAL:
                continue
            donor = _inplace_donor(step, position, index) if reuse else None
            if donor is not None:
                output.offset = donor.offset
                output.shares = donor
                dying[index].remove(donor)
            else:
                output.offset = allocator.allocate(max(output.size, 1), output.alignment)
            placed.add(id(output))
        if reuse:
            for tensor in dying.get(index, []):
                if id(tensor) in placed:
                    allocator.release(tensor.offset, max(tensor.size, 1))

    # Locals never touched by a step (none in a verified flow) still get space.
    for tensor in owners:
        if id(tensor) not in placed:
            tensor.offset = allocator.allocate(max(tensor.size, 1), tensor.alignment)
    for tensor in tensors:
        if tensor.view_of is not None and tensor.root().in_instance:
            tensor.offset = tensor.root().offset
    return allocator.top, unshared_size


def _inplace_donor(step, position, index):
    """An input local that dies at this step and whose space the output may take, or None."""
    if position != 0 or step.kernel is None:
        return None
    output = step.outputs[0]
    for input_index in step.kernel.inplace(step):
        candidate = step.inputs[input_index]
        root = candidate.root()
        if (root is candidate and candidate.kind == LOCAL and candidate.last == index
                and candidate.size == output.size and candidate.alignment >= output.alignment
                and candidate.offset is not None
                and sum(1 for t in step.inputs if t is candidate) == 1):
            return candidate
    return None
