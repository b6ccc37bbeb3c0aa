"""Peephole optimization of a function's instructions (the step Myia left empty):

- **direct calls**: a ``push_graph`` read only by the ``call`` after it becomes a
  ``call_graph`` of that function (no closure value at run time);
- **branches**: closures of two functions over the same values, a ``switch`` between them and
  a call of the one chosen (the lowering of ``If``) become one ``branch`` instruction;
- **tail calls**: a call whose results the function returns at once becomes a ``tailcall``
  (``tailcall_graph``): the callee takes over the frame, so a loop written as tail recursion
  runs in bounded memory;
- **early element reads**: a ``tuple_get`` moves up to just after the instruction that gives
  its tuple, out of the way of the externals around it;
- **merged externals**: an ``external`` moves up past instructions it does not depend on (and
  that do not depend on it) until it meets the ``external`` before it; the two become one
  segment, compiled into one cell;
- **dead values**: a ``push`` of a constant, a ``tuple`` or a ``tuple_get`` that no
  instruction reads is dropped.
"""

from myelin.control.lower import Instr, Segment

# Instructions after which an external may not move: they start or end the frame.
_BARRIERS = ("pad_stack", "return", "tailcall", "tailcall_graph", "tailbranch")


def optimize(instrs):
    """The optimized list of ``instrs`` (a function's, from :mod:`myelin.control.lower`)."""
    instrs = _direct_calls(instrs)
    instrs = _branches(instrs)
    instrs = _tail_calls(instrs)
    instrs = _early_element_reads(instrs)
    instrs = _merge_externals(instrs)
    return _drop_dead_values(instrs)


def reads(instr):
    """The registers ``instr`` reads."""
    op, args = instr.op, instr.args
    if op == "external":
        return set(args[1])
    if op in ("call", "tailcall"):
        return {args[-2] if op == "call" else args[0], *args[-1]}
    if op in ("call_graph", "tailcall_graph"):
        return set(args[-1])
    if op in ("branch", "tailbranch"):
        return {args[-4], *args[-1]}
    if op == "partial":
        return {args[1], *args[2]}
    if op == "tuple":
        return set(args[1])
    if op == "tuple_get":
        return {args[1]}
    if op == "switch":
        return set(args[1:])
    if op == "return":
        return set(args[0])
    return set()


def writes(instr):
    """The registers ``instr`` writes."""
    op, args = instr.op, instr.args
    if op == "external":
        return set(args[2])
    if op in ("call", "call_graph", "branch"):
        return set(args[0])
    if op in ("push", "push_graph", "partial", "switch", "tuple", "tuple_get"):
        return {args[0]}
    return set()


def _readers(instrs):
    counts = {}
    for instr in instrs:
        for register in reads(instr):
            counts[register] = counts.get(register, 0) + 1
    return counts


def _direct_calls(instrs):
    readers = _readers(instrs)
    graphs = {i.args[0]: i.args[1] for i in instrs if i.op == "push_graph"}
    result = []
    for instr in instrs:
        if instr.op == "call" and readers.get(instr.args[1]) == 1 and instr.args[1] in graphs:
            results, target, arguments = instr.args
            instr = Instr("call_graph", (results, graphs[target], arguments))
        result.append(instr)
    readers = _readers(result)
    return [i for i in result if i.op != "push_graph" or readers.get(i.args[0])]


def _branches(instrs):
    """push_graph, partial (twice), switch, call -> branch, when nothing else reads the
    closures and the switch's result."""
    readers = _readers(instrs)
    result, position = [], 0
    while position < len(instrs):
        window = instrs[position:position + 6]
        if _is_branch(window, readers):
            then_graph, then_closure, else_graph, _, switch, call = window
            result.append(Instr("branch", (call.args[0], switch.args[1], then_graph.args[1],
                                           else_graph.args[1], then_closure.args[2])))
            position += 6
        else:
            result.append(instrs[position])
            position += 1
    return result


def _is_branch(window, readers):
    if [i.op for i in window] != ["push_graph", "partial"] * 2 + ["switch", "call"]:
        return False
    then_graph, then_closure, else_graph, else_closure, switch, call = window
    closures = (then_closure.args[0], else_closure.args[0])
    return (then_closure.args[1:] == (then_graph.args[0], else_closure.args[2])
            and else_closure.args[1] == else_graph.args[0]
            and switch.args[2:] == closures and call.args[1:] == (switch.args[0], ())
            and all(readers.get(r) == 1 for r in closures + (switch.args[0],)))


def _tail_calls(instrs):
    result = list(instrs)
    for position in range(len(result) - 1):
        call, following = result[position], result[position + 1]
        if call.op in ("call", "call_graph", "branch") and following.op == "return" \
                and following.args[0] == call.args[0]:
            kind = {"call": "tailcall", "call_graph": "tailcall_graph",
                    "branch": "tailbranch"}[call.op]
            result[position] = Instr(kind, call.args[1:])
            result[position + 1] = None
    return [i for i in result if i is not None]


def _early_element_reads(instrs):
    """Each ``tuple_get`` moved up to just after the instruction writing its tuple (or the
    frame's start)."""
    result = []
    for instr in instrs:
        position = len(result)
        if instr.op == "tuple_get":
            while position > 0 and result[position - 1].op not in _BARRIERS \
                    and instr.args[1] not in writes(result[position - 1]):
                position -= 1
        result.insert(position, instr)
    return result


def _merge_externals(instrs):
    result = []
    for instr in instrs:
        result.append(instr)
        if instr.op != "external":
            continue
        # Move it up past independent instructions while no external is right before it.
        position = len(result) - 1
        while position > 0:
            before = result[position - 1]
            if before.op == "external" or before.op in _BARRIERS:
                break
            if reads(instr) & writes(before) or writes(instr) & reads(before):
                break
            result[position - 1], result[position] = instr, before
            position -= 1
        if position > 0 and result[position - 1].op == "external":
            merged = _merge(result[position - 1], instr)
            del result[position]
            result[position - 1] = merged
    return result


def _merge(first, second):
    """One external running ``first``'s segment then ``second``'s. An input of the second
    from a register the first reads or writes is that variable of the first (an alias, if
    it is another variable: an element of a tuple)."""
    a, a_in, a_out = first.args
    b, b_in, b_out = second.args
    given = dict(zip(a_in, a.inputs)) | dict(zip(a_out, a.outputs))   # register -> variable
    inputs, aliases = list(zip(a_in, a.inputs)), a.aliases + b.aliases
    for var, register in zip(b.inputs, b_in):
        if register not in given:
            given[register] = var
            inputs.append((register, var))
        elif given[register] is not var:
            aliases.append((var, given[register]))
    segment = Segment(a.name, a.ops + b.ops, [v for _, v in inputs], a.outputs + b.outputs,
                      aliases=aliases)
    return Instr("external", (segment, tuple(r for r, _ in inputs), a_out + b_out))


def _drop_dead_values(instrs):
    """``instrs`` without the pushes, tuples and element reads whose values nothing reads
    (repeated: a dropped element read may leave its tuple unread)."""
    while True:
        readers = _readers(instrs)
        kept = [i for i in instrs
                if i.op not in ("push", "tuple", "tuple_get") or readers.get(i.args[0])]
        if len(kept) == len(instrs):
            return kept
        instrs = kept
