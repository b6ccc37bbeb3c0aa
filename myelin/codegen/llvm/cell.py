"""Emit the native function of a cell: a call of each step's kernel function.

The function is ``i32 <symbol>(ptr instance)``. Each step's kernel is a function of its own,
in a module of its own (:mod:`myelin.codegen.llvm.kernelfunc`), which the cell function calls
with the addresses of the step's tensors: in the instance, at constant offsets from
``instance``, or globals, through external symbols bound to their addresses when the code is
loaded (:mod:`myelin.codegen.llvm.externals`). Steps with the same kernel call the same
function. The cell function returns 0, or 1 + the position of the step that found bad input at
run time (an index out of range, see :meth:`EmitContext.fail_if`); the runtime turns that into
an InputError naming the step.
A cell with a :class:`~myelin.plan.cell.Repeat` loops: after its last step it copies outputs
over inputs and branches back to its first step while the condition holds.

With profile counters (``Compiler(profile=True)``), the function reads the CPU's cycle
counter on entry, around every step that has code, and before every return, and atomically
adds the elapsed cycles and one call to an int64 array of ``[1 + steps, 2]`` counters (see
:func:`profile_counters`; the external ``("counters", symbol)``); :mod:`myelin.runtime.profile` turns them into a report. Without
counters no such code is emitted.
"""

import llvmlite.ir as ir
import numpy as np

from myelin.codegen.llvm import irutil
from myelin.codegen.llvm.kernelfunc import emit_kernel, kernel_type
from myelin.codegen.llvm.kernels import EmitContext
from myelin.codegen.llvm.kernels.movement import copy
from myelin.errors import CompileError

# Profile counters: row 0 is the whole function, row 1 + i is step i; columns below.
CYCLES = 0
CALLS = 1


def profile_counters(steps):
    """A zeroed int64 array of profile counters for a cell of ``steps``: one row for the whole
    function then one per step (steps without code keep zeros), columns CYCLES and CALLS."""
    return np.zeros((1 + len(steps), 2), np.int64)


def counter_intrinsic(target):
    """The LLVM intrinsic that reads a cycle or time-stamp counter cheaply on ``target``.

    ``llvm.readcyclecounter`` is ``rdtsc`` on x86-64; on AArch64 it reads a PMU register that
    Linux does not let user code read, so there the generic timer (``llvm.readsteadycounter``,
    ``cntvct_el0``) is used instead."""
    if target.triple.startswith(("aarch64", "arm64")):
        return "llvm.readsteadycounter"
    return "llvm.readcyclecounter"


def read_counter(builder, target):
    """Emit a read of the cycle counter (an i64 value)."""
    module = builder.module
    name = counter_intrinsic(target)
    function = module.globals.get(name)
    if function is None:
        function = ir.Function(module, ir.FunctionType(irutil.I64, []), name)
    return builder.call(function, [])


def emit_cell(module, symbol, steps, target, instance_alignment, functions, threads=1,
              externals=None, counters=None, on_step=None, repeat=None):
    """Add the function ``symbol`` computing ``steps`` to ``module``, and the kernel
    functions it calls to ``functions`` (one
    :class:`~myelin.codegen.llvm.kernelfunc.KernelFunctions` for a network's cells); kernels
    may split work over ``threads`` and add the addresses they use (globals, packed weights)
    to ``externals``. ``counters`` (from :func:`profile_counters`) compiles the profiler in;
    ``on_step()`` is called after each step with code is emitted; ``repeat`` (a
    :class:`~myelin.plan.cell.Repeat`) makes the steps a loop."""
    irutil.set_target(module, target)
    function = ir.Function(module, ir.FunctionType(irutil.I32, [irutil.PTR]), symbol)
    instance = function.args[0]
    instance.name = "instance"
    instance.add_attribute("noalias")
    function.attributes.add("nounwind")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    ctx = EmitContext(builder, target, instance, instance_alignment, threads, externals)
    profiler = None
    if counters is not None:
        base = ctx.externals.pointer(builder, ("counters", symbol), counters.ctypes.data, 8)
        profiler = _Profiler(builder, target, counters, base, len(steps))
    head = None
    for position, step in enumerate(steps):
        if repeat is not None and position == repeat.start:
            head = _start_block(builder, "repeat")
        ctx.status = position + 1
        if step.noop:
            continue
        _start_block(builder, _block_name(step.name))  # named after it, for readable dumps
        kernel = emit_kernel(step, target, instance_alignment, threads, ctx.externals,
                             functions)
        start = profiler.read() if profiler else None
        _call(ctx, kernel)
        if profiler:
            profiler.count(1 + position, start)
        if on_step:
            on_step()
    if repeat is not None:
        _emit_repeat(ctx, repeat, head or _start_block(builder, "repeat"))
    builder.ret(ir.Constant(irutil.I32, 0))
    if profiler:
        profiler.count_returns(function)
    return function


def _call(ctx, kernel):
    """Call ``kernel`` (a :class:`~myelin.codegen.llvm.kernelfunc.KernelFunction`) for the
    current step, returning its status if it fails."""
    b = ctx.builder
    function = b.module.globals.get(kernel.symbol)
    if function is None:
        function = ir.Function(b.module, kernel_type(len(kernel.roots)), kernel.symbol)
    table = ir.Constant(irutil.PTR, None)
    if kernel.kept:
        table = irutil.stack_array(b, irutil.PTR, len(kernel.kept), 8)
        for i, array in enumerate(kernel.kept):
            b.store(ctx.keep(array), irutil.element_ptr(b, table, "int64", irutil.i64(i)))
    status = b.call(function, [ctx.pointer(root) for root in kernel.roots] + [table])
    if kernel.fails:
        ctx.fail_if(b.icmp_unsigned("!=", status, ir.Constant(irutil.I32, 0)))


def _start_block(builder, name):
    """Continue in a new block ``name`` (each step starts in one); returns it."""
    block = builder.function.append_basic_block(name)
    builder.branch(block)
    builder.position_at_end(block)
    return block


def _emit_repeat(ctx, repeat, head):
    """Branch back to ``head`` while ``repeat.condition`` is nonzero, after copying each
    feedback output over its input."""
    b = ctx.builder
    condition = repeat.condition
    value = irutil.load(b, ctx.pointer(condition), condition.dtype)
    if irutil.is_float(value.type):
        value = b.fcmp_unordered("!=", value, ir.Constant(value.type, 0))
    elif value.type != irutil.I1:
        value = b.icmp_unsigned("!=", value, ir.Constant(value.type, 0))
    again = b.function.append_basic_block("repeat_again")
    done = b.function.append_basic_block("repeat_done")
    b.cbranch(value, again, done)
    b.position_at_end(again)
    for output, state in repeat.feedback:
        copy(ctx, (output.elements,), ctx.operand(output, (1,)), ctx.operand(state, (1,)))
    b.branch(head)
    b.position_at_end(done)


class _Profiler:
    """Emits the cycle counting of a profiled cell function into ``builder``."""

    def __init__(self, builder, target, counters, base, steps):
        if counters.dtype != np.int64 or counters.shape != (1 + steps, 2):
            raise CompileError(f"profile counters must be int64[{1 + steps}x2], not "
                               f"{counters.dtype}{list(counters.shape)}")
        self.builder = builder
        self.target = target
        self.base = base             # a ptr to the counters
        self.row_bytes = counters.strides[0]
        self.entry = self.read()

    def read(self):
        return read_counter(self.builder, self.target)

    def count(self, row, start):
        """Add the cycles since ``start`` and one call to counter ``row``."""
        b = self.builder
        elapsed = b.sub(self.read(), start, name="cycles")
        for column, value in ((CYCLES, elapsed), (CALLS, irutil.i64(1))):
            pointer = irutil.byte_ptr(b, self.base, row * self.row_bytes + column * 8)
            b.atomic_rmw("add", pointer, value, "monotonic")

    def count_returns(self, function):
        """Count the whole call before every return of ``function``: the normal one and
        those of steps that found bad input (:meth:`EmitContext.fail_if`)."""
        for block in function.blocks:
            if isinstance(block.terminator, ir.Ret):
                self.builder.position_before(block.terminator)
                self.count(0, self.entry)


def _block_name(name):
    return "".join(c if c.isalnum() or c in "_." else "_" for c in name)
