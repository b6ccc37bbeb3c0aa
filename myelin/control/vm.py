"""The VM: runs linked instructions over frames of registers.

Code is one list of instructions, each a tuple whose first item is its opcode; a function is
a position in it. Values are NumPy arrays (tensors), closures, ``(position, bound values)``:
a function and the values bound to its first parameters (``partial``), and tuples of values
(``tuple``; ``tuple_get`` reads an element). A condition is a
scalar array, true when nonzero. A call saves the
caller's frame on the frame stack and starts a frame of its own holding the bound values then
the arguments; a tail call replaces the caller's frame, so tail recursion runs in bounded
memory; ``return`` gives its values to the caller's result registers. Python's own stack is
never used for calls: recursion depth is bounded only by memory.

``external`` runs a compiled cell (:class:`External`) on tensors from registers, and puts its
outputs in registers. Everything else is pointer moving: the VM does no work per element.
"""

from myelin.errors import InputError

PAD_STACK, PUSH, PUSH_GRAPH, PARTIAL, SWITCH, EXTERNAL = range(6)
CALL, CALL_GRAPH, TAILCALL, TAILCALL_GRAPH, RETURN, BRANCH, TAILBRANCH = range(6, 13)
TUPLE, TUPLE_GET = range(13, 15)
OPCODES = {"pad_stack": PAD_STACK, "push": PUSH, "push_graph": PUSH_GRAPH, "partial": PARTIAL,
           "switch": SWITCH, "external": EXTERNAL, "call": CALL, "call_graph": CALL_GRAPH,
           "tailcall": TAILCALL, "tailcall_graph": TAILCALL_GRAPH, "return": RETURN,
           "branch": BRANCH, "tailbranch": TAILBRANCH, "tuple": TUPLE, "tuple_get": TUPLE_GET}


class External:
    """A compiled segment, run on one instance of its cell by the instruction ``external``.

    It reads its inputs from and writes its outputs to fixed registers of its function's
    frame (``inputs`` and ``outputs``: (tensor name, register) pairs). A small input is copied
    into the instance (cheaper than binding an address); a large one (``references``: names
    of reference inputs) is bound in place, only when the array changed. Outputs are copied
    out: the next run of the cell writes the instance again."""

    def __init__(self, cell, inputs, outputs, references):
        self.instance = instance = cell.instance()
        self.copies = [(instance.array(n), r) for n, r in inputs if n not in references]
        self.references = [(cell.index(n), r) for n, r in inputs if n in references]
        self.outputs = [(instance.array(n), r) for n, r in outputs]
        self.bound = {}

    def __call__(self, registers):
        for view, register in self.copies:
            view[...] = registers[register]
        for index, register in self.references:
            array = registers[register]
            if self.bound.get(index) is not array:
                self.instance.bind(index, array)
                self.bound[index] = array
        self.instance.compute()
        for view, register in self.outputs:
            registers[register] = view.copy()


def run(code, externals, entry, arguments):
    """Run the function at position ``entry`` of ``code`` on ``arguments`` (a list of values);
    returns the list of its results. ``externals`` are the External of each segment index."""
    registers = list(arguments)
    frames = []
    pc = entry
    while True:
        instr = code[pc]
        op = instr[0]
        if op == EXTERNAL:
            externals[instr[1]](registers)
        elif op == CALL_GRAPH:
            frames.append((pc, registers, instr[1]))
            registers = [registers[r] for r in instr[3]]
            pc = instr[2]
            continue
        elif op == TAILCALL_GRAPH:
            registers = [registers[r] for r in instr[2]]
            pc = instr[1]
            continue
        elif op == TAILBRANCH:
            taken = instr[2] if registers[instr[1]] else instr[3]
            registers = [registers[r] for r in instr[4]]
            pc = taken
            continue
        elif op == BRANCH:
            frames.append((pc, registers, instr[1]))
            taken = instr[3] if registers[instr[2]] else instr[4]
            registers = [registers[r] for r in instr[5]]
            pc = taken
            continue
        elif op == RETURN:
            values = [registers[r] for r in instr[1]]
            if not frames:
                return values
            pc, registers, results = frames.pop()
            for register, value in zip(results, values):
                registers[register] = value
        elif op == PAD_STACK:
            registers.extend([None] * (instr[1] - len(registers)))
        elif op == PUSH:
            registers[instr[1]] = instr[2]
        elif op == SWITCH:
            registers[instr[1]] = registers[instr[3] if registers[instr[2]] else instr[4]]
        elif op == PARTIAL:
            position, bound = registers[instr[2]]
            registers[instr[1]] = (position, bound + tuple(registers[r] for r in instr[3]))
        elif op == PUSH_GRAPH:
            registers[instr[1]] = (instr[2], ())
        elif op == TUPLE:
            registers[instr[1]] = tuple(registers[r] for r in instr[2])
        elif op == TUPLE_GET:
            registers[instr[1]] = registers[instr[2]][instr[3]]
        elif op == CALL:
            position, bound = registers[instr[2]]
            frames.append((pc, registers, instr[1]))
            registers = list(bound) + [registers[r] for r in instr[3]]
            pc = position
            continue
        elif op == TAILCALL:
            position, bound = registers[instr[1]]
            registers = list(bound) + [registers[r] for r in instr[2]]
            pc = position
            continue
        else:
            raise InputError(f"the VM met an unknown instruction {instr!r} at {pc}")
        pc += 1
