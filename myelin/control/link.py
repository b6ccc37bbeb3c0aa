"""Linking: the instructions of every function into one list of VM code.

Each function's instructions are laid out one after the other; the names of functions in
``push_graph``, ``call_graph``, ``tailcall_graph``, ``branch`` and ``tailbranch`` become their
positions in the list, the segments of ``external`` their indices in the list of cells, and
each instruction a tuple whose first item is its opcode (:mod:`myelin.control.vm`).
"""

from myelin.control.vm import OPCODES
from myelin.errors import FlowError

_GRAPH_OPERANDS = {"push_graph": (1,), "call_graph": (1,), "tailcall_graph": (0,),
                   "branch": (2, 3), "tailbranch": (1, 2)}


def link(codes, segment_index):
    """(code, {function name: entry position}) of ``codes`` (function name -> instruction
    list); ``segment_index`` maps a Segment's name to its index among the externals."""
    entries, position = {}, 0
    for name, instrs in codes.items():
        entries[name] = position
        position += len(instrs)
    code = []
    for name, instrs in codes.items():
        for instr in instrs:
            args = list(instr.args)
            for operand in _GRAPH_OPERANDS.get(instr.op, ()):
                if args[operand] not in entries:
                    raise FlowError(f"function {name} refers to {args[operand]!r}, which is "
                                    f"not a function of the program")
                args[operand] = entries[args[operand]]
            if instr.op == "external":
                args = [segment_index[args[0].name]]
            code.append((OPCODES[instr.op], *args))
    return code, entries
