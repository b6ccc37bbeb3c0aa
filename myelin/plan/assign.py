"""Assign folding: an ``Assign(target, value)`` whose value another step of the cell computes
is done by that step writing the value straight into the target's storage.

The value becomes a view of the target and the Assign step goes away, so an update such as
``m = b1 m + (1 - b1) g; p = p - lr m`` fused into one ``Calculate`` reads and writes ``m``
and ``p`` in one pass over memory, with no copies after it. It is done only when that gives
the Assign's result:

* the value is a local of the cell with the target's type and shape; the target is not a
  constant, a reference input or a view;
* no step between the producer and the Assign touches the target's storage other than by
  reading the value, and no step after the Assign writes it before the value's last reader;
* where the producer reads the target itself, its kernel must allow the value to overwrite
  that input (``kernel.inplace``: each element is read before it is written), and the value
  has the shape of the producer's first output, to which that answer applies.
"""

from myelin.plan.cell import CONSTANT, LOCAL


def fold_assigns(steps):
    """``steps`` without the Assigns that their values' producers now do (those values are
    made views of the targets); the other steps stay, in their order."""
    position = {id(step): i for i, step in enumerate(steps)}
    producers, last_read = {}, {}
    for index, step in enumerate(steps):
        for tensor in step.outputs:
            producers[id(tensor)] = step
        for tensor in step.inputs:
            last_read[id(tensor)] = index
    folded = set()
    for index, step in enumerate(steps):
        if step.type != "Assign" or len(step.inputs) != 2:
            continue
        target, value = step.inputs
        source = producers.get(id(value))
        if source is None or not _fits(target, value):
            continue
        before = steps[position[id(source)] + 1:index]
        after = steps[index + 1:last_read[id(value)] + 1]
        if (_writes_safely(source, value, target)
                and not any(_touches(other, target, value) for other in before)
                and not any(_writes(other, target) for other in after)):
            value.view_of = target
            folded.add(id(step))
    return [step for step in steps if id(step) not in folded]


def _fits(target, value):
    """True if ``value`` may live in ``target``'s storage."""
    return (value.kind == LOCAL and value.view_of is None and not value.ref
            and target.kind != CONSTANT and target.view_of is None and not target.ref
            and (target.dtype, tuple(target.shape)) == (value.dtype, tuple(value.shape)))


def _writes_safely(source, value, target):
    """True if ``source`` may write ``value`` over ``target`` (which it may also read)."""
    if any(out.root() is target for out in source.outputs):
        return False
    reads = [i for i, tensor in enumerate(source.inputs) if tensor.root() is target]
    if not reads:
        return True
    allowed = source.kernel.inplace(source)
    return (tuple(value.shape) == tuple(source.outputs[0].shape)
            and all(i in allowed for i in reads))


def _touches(step, target, value):
    """True if ``step`` reads or writes ``target``'s storage other than as ``value``."""
    return any(tensor is not value and tensor.root() is target
               for tensor in step.inputs + step.outputs)


def _writes(step, target):
    """True if ``step`` may write ``target``'s storage: an output there, or, for a step with
    no outputs (an Assign), any input there."""
    tensors = step.outputs or step.inputs
    return any(tensor.root() is target for tensor in tensors)
