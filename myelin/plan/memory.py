"""The instance memory plan: live ranges, in-place sharing and offsets with reuse.

Inputs and outputs of a cell keep their own space for the whole call (the caller writes the
one and reads the other). A local tensor lives from the step that writes it to the last step
that reads it (views and slices extend the range of the tensor they are part of, and take
their place in it); in a cell that loops from
step ``loop_start`` on, a tensor written before that step and read in the loop lives to the
end. Locals are placed first-fit,
in order of first use, into space freed by tensors whose range has ended, and an element-wise
step may write its output over an input that dies at that step (its kernel says which).
"""

from myelin.plan.cell import INPUT, LOCAL, OUTPUT


def _align(value, alignment):
    return (value + alignment - 1) // alignment * alignment


def live_ranges(steps, tensors, loop_start=None):
    """Set ``first``/``last`` step indices on every instance tensor (views and slices count
    for their owner; see the module for ``loop_start``)."""
    for tensor in tensors:
        tensor.first, tensor.last = -1, -1
    end = len(steps)
    for index, step in enumerate(steps):
        for tensor in step.inputs + step.outputs:
            root = tensor.owner()[0]
            if root.first < 0:
                root.first = index
            root.last = max(root.last, index)
    for tensor in tensors:
        root = tensor.owner()[0]
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
    owners = [t for t in tensors if t.in_instance and t.owner()[0] is t]
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
            owner = output.owner()[0]
            if owner is not output:       # a view or slice: its owner's space, placed now
                if owner.kind == LOCAL and id(owner) not in placed:
                    owner.offset = allocator.allocate(max(owner.size, 1), owner.alignment)
                    placed.add(id(owner))
                continue
            if id(output) in placed or output.kind != LOCAL:
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
        owner, offset = tensor.owner()
        if owner is not tensor and owner.in_instance:
            tensor.offset = owner.offset + offset
    return allocator.top, unshared_size


def _inplace_donor(step, position, index):
    """An input local that dies at this step and whose space the output may take, or None."""
    if position != 0 or step.kernel is None:
        return None
    output = step.outputs[0]
    for input_index in step.kernel.inplace(step):
        candidate = step.inputs[input_index]
        if (candidate.owner()[0] is candidate and candidate.kind == LOCAL
                and candidate.last == index and candidate.size == output.size and candidate.alignment >= output.alignment
                and candidate.offset is not None
                and sum(1 for t in step.inputs if t is candidate) == 1):
            return candidate
    return None
