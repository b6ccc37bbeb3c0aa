"""Native loops, the pipeline's step after the peephole: a loop whose body is one segment
runs as one cell that repeats itself.

A ``while_loop`` lowers to a function W whose code, once optimized, is ``external`` (the
body and the next test: one segment, since the loop is rotated) then ``tailbranch`` on the
test either to a function that only tail-calls W again, its arguments the segment's outputs,
or to a function that leaves the loop. When each parameter of W is passed on unchanged or
replaced by an output of the segment read in its place, and leaving reads only outputs and
unchanged parameters, the segment's cell can run the loop itself (a
:class:`myelin.plan.cell.Repeat`): after each round it copies those outputs over the inputs
they replace and goes again while the test holds. W becomes that ``external`` and a tail
call of the exit, so an iteration costs no VM instruction and no copy between the VM's
registers and the cell.
"""

import dataclasses

from myelin.control.lower import Instr


@dataclasses.dataclass
class Loop:
    """How a segment loops: ``condition`` is the index of the output holding the test,
    ``feedback`` the (output index, input index) pairs copied before the next round."""
    condition: int
    feedback: list


def native_loops(codes):
    """``codes`` (function name -> instructions) with every loop that qualifies (see the
    module) rewritten to run in its cell."""
    result = dict(codes)
    for name, instrs in codes.items():
        rewritten = _native_loop(name, instrs, codes)
        if rewritten is not None:
            result[name] = rewritten
    return result


def _native_loop(name, instrs, codes):
    """The instructions of loop function ``name`` running natively, or None."""
    if [i.op for i in instrs] != ["pad_stack", "external", "tailbranch"]:
        return None
    pad_stack, external, branch = instrs
    segment, inputs, outputs = external.args
    condition, again, leave, arguments = branch.args
    again_code = codes.get(again)
    if (condition not in outputs or segment.loop is not None or again_code is None
            or [i.op for i in again_code] != ["pad_stack", "tailcall_graph"]
            or again_code[1].args[0] != name):
        return None
    forwarded = again_code[1].args[1]         # registers of ``again``: its parameters
    if any(r >= len(arguments) for r in forwarded):
        return None
    following = [arguments[r] for r in forwarded]  # W's register giving parameter k next
    unchanged = {k for k, r in enumerate(following) if r == k}
    feedback = []
    for k, r in enumerate(following):
        if k in unchanged:
            continue
        if r not in outputs or k not in inputs:
            return None
        feedback.append((outputs.index(r), inputs.index(k)))
    if any(r not in outputs and r not in unchanged for r in arguments):
        return None
    looping = dataclasses.replace(segment, loop=Loop(outputs.index(condition), feedback))
    return [pad_stack, Instr("external", (looping, inputs, outputs)),
            Instr("tailcall_graph", (leave, arguments))]
