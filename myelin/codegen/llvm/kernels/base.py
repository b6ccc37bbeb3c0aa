"""The kernel interface of the CPU back end and the context kernels emit code into.

A kernel generates the code of one step, inline in the cell function; what the planner asks
of it is :class:`~myelin.plan.kernel.PlannedKernel`'s.

Constants of at most ``INLINE_CONSTANT_BYTES`` are compiled into the code (a private LLVM
constant each) instead of read from the network's memory, so LLVM folds them into the
instructions: ``((x - 2) + 5) + 100`` becomes one ``add 103``; but not those that kernels
take as arguments so that steps differing in them alone share code
(:func:`~.constants.pass_constants`).
"""

import hashlib
import math

import llvmlite.ir as ir
import numpy as np

from myelin.codegen.llvm import irutil, loops, threads
from myelin.codegen.llvm.externals import Externals
from myelin.codegen.llvm.loops import Operand, contiguous_strides
from myelin.flow import dtypes
from myelin.plan.cell import CONSTANT
from myelin.plan.kernel import PlannedKernel


PARALLEL_WORK = 1 << 19    # steps doing less (flops or elements visited) stay on one thread
TASKS_PER_THREAD = 4       # tasks per thread when a step is split: evens out uneven tasks
ELEMENT_WORK = 8           # work counted per element of an element-wise loop (memory-bound)
INLINE_CONSTANT_BYTES = 64  # constants up to this size are compiled into the code


class Kernel(PlannedKernel):
    """Base class of CPU kernels (see :class:`~myelin.plan.kernel.PlannedKernel`).
    Subclasses set ``name`` and implement ``emit``.

    A kernel that sets ``shares_code`` emits the same code for steps with the same
    :func:`~myelin.codegen.llvm.kernelfunc.signature` (it reads the values of no constants but
    those compiled into the code, and of those it keeps only through ``kept``), so such steps
    are emitted once."""

    shares_code = False

    def choices(self, step, target):
        """Options (dicts, read back from ``step.choice`` by ``emit``) among which the
        compiler may choose by timing each on the step's shapes; the first is the default.
        Empty when there is nothing to choose."""
        return []

    def flops(self, step):
        return 0

    def emit(self, ctx, step):
        raise NotImplementedError

    def kept(self, ctx, step):
        """The arrays ``emit(ctx, step)`` keeps (``ctx.keep``), in the order it first keeps
        them: for a step whose code is another's (see ``shares_code``)."""
        return []

    def code_shapes(self, step):
        """What the code emitted for ``step`` depends on of the shapes of its inputs and
        outputs (in order; part of its :func:`~myelin.codegen.llvm.kernelfunc.signature`):
        by default, the shapes."""
        return [tuple(t.shape) for t in step.inputs + step.outputs]

    def loaded_inputs(self, step):
        """Positions of one-element inputs of ``step`` that the kernel only loads as it runs
        (as it would a variable's) and LLVM folds into nothing:
        :func:`~.constants.pass_constants` may pass such a constant as an argument (an int8
        kernel's zero point)."""
        return ()


class EmitContext:
    """Where a kernel emits: the IR builder, the target, the addresses of tensors, the number
    of threads a kernel may split its work over, and the module's external symbols
    (``externals``: globals' data, arrays made at compile time with ``keep``)."""

    def __init__(self, builder, target, instance_ptr, instance_alignment, threads=1,
                 externals=None):
        self.builder = builder
        self.target = target
        self.instance_ptr = instance_ptr
        self.instance_alignment = instance_alignment
        self.threads = threads
        self.externals = Externals() if externals is None else externals
        self.status = 1     # what the cell function returns when the current step fails

    def keep(self, array):
        """Keep ``array`` (made at compile time, such as packed weights) alive as long as the
        code; returns a ptr value addressing its first element."""
        return self.externals.keep(self.builder, array)

    def function(self, key, build):
        """The helper function ``build(module)`` made for ``key`` (one LLVM does not inline),
        built on its module's first use and shared by every cell of the module; in a kernel
        function's module, made once for all kernels in a module of its own and declared
        (:class:`~myelin.codegen.llvm.kernelfunc.Helpers`)."""
        module = self.builder.module
        helpers = getattr(module, "myelin_helpers", None)
        if helpers is not None:
            return helpers.declare(module, key, build)
        functions = module.__dict__.setdefault("_myelin_functions", {})
        if key not in functions:
            functions[key] = build(module)
        return functions[key]

    def chunks(self, units, work):
        """(tasks, units per task) to split ``units`` independent pieces of a step doing
        ``work`` in all: one task unless the work is large and there are threads."""
        tasks = 1
        if self.threads > 1 and work >= PARALLEL_WORK:
            tasks = min(units, self.threads * TASKS_PER_THREAD)
        size = -(-units // max(tasks, 1))
        return -(-units // max(size, 1)), size

    def parallel(self, name, tensors, count, emit_task, outline=False, glue=False):
        """Run ``emit_task(ctx, index)`` for ``index`` in [0, count): inline for one task or
        one thread, else as a function ``void(ptr, i64)`` whose tasks the worker pool and
        the calling thread share. A task reaches only ``tensors``, through ``ctx.pointer``.
        ``outline`` puts the tasks in a function of their own even on one thread: LLVM
        allocates the registers of a large kernel better there than inline in a long cell.
        ``glue`` (with ``outline``) says that the tasks only call the functions doing the
        work (:func:`mark_glue`)."""
        b = self.builder
        if not outline and (count == 1 or self.threads <= 1):
            if count == 1:
                emit_task(self, irutil.i64(0))
                return
            with irutil.for_range(b, 0, count, name=f"{name}.task") as index:
                emit_task(self, index)
            return
        function, roots, kept = self._outline(name, tensors, emit_task, glue)
        # The call: a table of the tensors' and kept arrays' addresses on the stack, then the
        # tasks.
        pointers = [self.pointer(root) for root in roots] + [self.keep(array) for array in kept]
        slots = irutil.stack_array(b, irutil.PTR, len(pointers), 8)
        for i, pointer in enumerate(pointers):
            b.store(pointer, irutil.element_ptr(b, slots, "int64", irutil.i64(i)))
        if count == 1 or self.threads <= 1:
            with irutil.for_range(b, 0, count, name=f"{name}.task") as index:
                b.call(function, [slots, index])
            return
        parallel_for = self.externals.pointer(
            b, ("pool", self.threads), threads.pool(self.threads).parallel_for_address)
        irutil.call_pointer(b, parallel_for, threads.PARALLEL_FOR_TYPE,
                            [function, slots, irutil.i64(count)])

    def _outline(self, name, tensors, emit_task, glue=False):
        """A function ``void(ptr table, i64 index)`` running ``emit_task``, where the table
        holds the addresses of ``tensors``' roots, then those of the arrays the tasks keep:
        returns (the function, the roots and the kept arrays, in table order).

        The tasks' code is a body of its own, inlined into the function, that takes the roots'
        addresses as arguments, ``noalias`` where no other root may overlap (:func:`may_alias`):
        loaded from the table, LLVM would take any store to reach any tensor, and so would not
        hoist a broadcast operand's loads and math out of a loop (an SE block's scale,
        ``sigmoid(s) * x``, ran 6.5x slower split into tasks than inline)."""
        module = self.builder.module
        function = ir.Function(module, threads.TASK_TYPE, module.get_unique_name(name))
        function.linkage = "internal"
        function.attributes.add("nounwind")
        table, index = function.args
        roots = list({id(t.root()): t.root() for t in tensors}.values())
        body_type = ir.FunctionType(ir.VoidType(), [irutil.PTR] * (len(roots) + 1) + [irutil.I64])
        body = ir.Function(module, body_type, module.get_unique_name(f"{name}.body"))
        body.linkage = "internal"
        body.attributes.add("nounwind")
        if glue:
            mark_glue(function)
            mark_glue(body)
        else:
            body.attributes.add("alwaysinline")
        for argument, root in zip(body.args[1:], roots):
            if not may_alias(root, roots):
                argument.add_attribute("noalias")
        call = ir.IRBuilder(function.append_basic_block("entry"))
        addresses = [call.load(irutil.element_ptr(call, table, "int64", irutil.i64(i)),
                               typ=irutil.PTR) for i in range(len(roots))]
        call.call(body, [table] + addresses + [index])
        call.ret_void()
        inner = ir.IRBuilder(body.append_basic_block("entry"))
        pointers = {id(root): argument for root, argument in zip(roots, body.args[1:])}
        sub = ArgumentContext(inner, self.target, pointers, self, threads=1,
                              alignment=self.alignment, table=(body.args[0], len(roots)))
        emit_task(sub, body.args[-1])
        inner.ret_void()
        return function, roots, sub.kept

    def fail_if(self, condition):
        """Return from the cell function with the current step's status if ``condition`` (an
        i1) holds: the runtime raises InputError naming the step (bad input at run time, such
        as an index out of range). Emission continues in the block where it is false."""
        b = self.builder
        fail = b.append_basic_block("fail")
        ok = b.append_basic_block("ok")
        b.cbranch(condition, fail, ok)
        b.position_at_end(fail)
        b.ret(irutil.const(irutil.I32, self.status))
        b.position_at_end(ok)

    def pointer(self, tensor):
        """An ``ptr`` value addressing the first element of ``tensor``."""
        root = tensor.root()
        if inlined(root):
            return inline_constant(self.builder.module, root)
        if root.address is not None:
            return self.externals.pointer(self.builder, ("global", root.name), root.address,
                                          root.alignment)
        slot = irutil.byte_ptr(self.builder, self.instance_ptr, root.offset)
        if root.ref:          # the instance holds the address of the caller's array
            return self.builder.load(slot, typ=irutil.PTR, align=8)
        return slot

    def alignment(self, tensor):
        """Byte alignment guaranteed for the first element of ``tensor``."""
        root = tensor.root()
        if root.address is not None:
            return root.alignment
        if root.ref:
            return tensor.itemsize
        return math.gcd(root.offset, self.instance_alignment) or self.instance_alignment

    def operand(self, tensor, strides=None):
        """A loop operand over ``tensor`` (dense row-major unless ``strides`` are given)."""
        if strides is None:
            strides = contiguous_strides(tensor.shape)
        return Operand(self.pointer(tensor), tensor.dtype, tuple(strides), self.alignment(tensor))


def mark_glue(function):
    """Mark ``function`` (of IR) as glue: code that only calls the functions doing the work,
    a few times each (a blocked convolution's loops over the chunks of register tiles it
    hands its tile function). LLVM leaves it as emitted (``optnone``), and a module of glue
    alone is compiled without its passes (:func:`myelin.codegen.llvm.engine.glue_only`)."""
    function.attributes.add("noinline")
    function.attributes.add("optnone")


def inlined(root):
    """True if the root tensor ``root`` is a constant small enough to be compiled into the
    code, and not one that kernels take as an argument
    (:func:`~.constants.pass_constants`)."""
    return root.kind == CONSTANT and root.size <= INLINE_CONSTANT_BYTES and not root.passed


def inlined_bytes(root):
    """The bytes of the constant tensor ``root`` as compiled into the code; None unless it is
    :func:`inlined`."""
    if not inlined(root):
        return None
    return np.ascontiguousarray(root.var.data, dtypes.to_numpy(root.dtype)).tobytes()


def inline_constant(module, root):
    """The private LLVM constant of ``module`` holding the elements of the constant tensor
    ``root`` (made on first use), named after its bytes and alignment: the code does not
    depend on the tensor's name."""
    data = inlined_bytes(root)
    name = f"myelin.const.{hashlib.sha256(data).hexdigest()[:16]}.{root.alignment}"
    variable = module.globals.get(name)
    if variable is None:
        array_type = ir.ArrayType(irutil.I8, len(data))
        variable = ir.GlobalVariable(module, array_type, name)
        variable.initializer = ir.Constant(array_type, bytearray(data))
        variable.global_constant = True
        variable.linkage = "private"
        variable.unnamed_addr = True
        variable.align = root.alignment
        variable.type = irutil.PTR    # used as an opaque ptr, as kernels expect
    return variable


def task_range(builder, index, size, units):
    """The units [index * size, (index + 1) * size) of task ``index`` (an i64), the last
    task's cut at ``units``: (start, stop) as i64 values."""
    start = builder.mul(index, irutil.i64(size))
    stop = builder.add(start, irutil.i64(size))
    return start, irutil.smin(builder, stop, irutil.i64(units) if isinstance(units, int)
                              else units)


def may_alias(root, roots):
    """Whether the memory of ``root`` may be reached through another of ``roots``: a caller's
    array through another one (it may be the same), an instance tensor through one at an
    overlapping offset. (As the cell function's instance argument is ``noalias``, a caller's
    array is taken to be none of the instance's tensors nor a global.)"""
    if root.ref:
        return any(other is not root and other.ref for other in roots)
    if root.address is not None:
        return False       # a global of its own
    end = root.offset + root.size
    return any(other is not root and other.address is None and not other.ref
               and other.offset < end and root.offset < other.offset + other.size
               for other in roots)


def parallel_elementwise(ctx, name, tensors, shape, operands, body, flops=0):
    """:func:`loops.elementwise` over ``shape``, split over threads along its first (collapsed)
    axis when the loop is large. ``operands(ctx)`` makes the (inputs, outputs) operands in a
    context (a task's, where the tensors' addresses are arguments); ``flops`` is the work per
    element besides moving it."""
    inputs, outputs = operands(ctx)
    whole = tuple(shape)
    shape, strides = loops.collapse(whole, [op.strides for op in inputs + outputs])
    tasks, size = ctx.chunks(shape[0] if shape else 1,
                             math.prod(whole) * (ELEMENT_WORK + flops))
    if tasks == 1:
        loops.elementwise(ctx.builder, ctx.target, whole, inputs, outputs, body)
        return
    if len(shape) == 1:       # whole vectors per task, so each starts aligned
        size = -(-size // 16) * 16
        tasks = -(-shape[0] // size)
    last = shape[0] - (tasks - 1) * size

    def task(sub, index):
        b = sub.builder
        start = b.mul(index, irutil.i64(size))
        parts = []
        for op, own in zip(sum(operands(sub), []), strides):
            offset = b.mul(start, irutil.i64(own[0]))
            align = math.gcd(op.align, size * own[0] * op.itemsize) if own[0] else op.align
            parts.append(Operand(irutil.element_ptr(b, op.ptr, op.dtype, offset), op.dtype,
                                 own, align))
        ins, outs = parts[:len(inputs)], parts[len(inputs):]

        def run(rows):
            loops.elementwise(b, sub.target, (rows,) + shape[1:], ins, outs, body)
        if last == size:
            run(size)
            return
        with b.if_else(b.icmp_unsigned("<", index, irutil.i64(tasks - 1))) as (whole, rest):
            with whole:
                run(size)
            with rest:
                run(last)

    ctx.parallel(name, tensors, tasks, task)


class ArgumentContext(EmitContext):
    """An emit context in a function of its own, whose tensors' addresses are given values
    (``pointers``: id of the root tensor to a ptr value). ``alignment`` tells what their
    addresses are known to be aligned to; by default only to the element size (a function
    shared by several steps). With a ``table`` (a ptr value and the index of its first free
    entry), the arrays the function keeps (``kept``, in order) are read from the table's
    following entries, which its caller fills; without, they are external symbols."""

    def __init__(self, builder, target, pointers, parent, threads, alignment=None,
                 table=None):
        super().__init__(builder, target, None, parent.instance_alignment, threads,
                         parent.externals)
        self.pointers = pointers
        self.known_alignment = alignment
        self.table = table
        self.kept = []
        self._kept_pointers = {}

    def keep(self, array):
        if self.table is None:
            return super().keep(array)
        pointer = self._kept_pointers.get(id(array))
        if pointer is None:
            b = self.builder
            table, first = self.table
            with b.goto_entry_block():
                slot = irutil.element_ptr(b, table, "int64", irutil.i64(first + len(self.kept)))
                pointer = b.load(slot, typ=irutil.PTR)
            self.kept.append(array)
            self._kept_pointers[id(array)] = pointer
        return pointer

    def pointer(self, tensor):
        root = tensor.root()
        if inlined(root):
            return inline_constant(self.builder.module, root)
        return self.pointers[id(root)]

    def alignment(self, tensor):
        return self.known_alignment(tensor) if self.known_alignment else tensor.itemsize
