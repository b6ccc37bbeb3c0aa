"""The worker pool that compiled cells split their large kernels over, in native code.

A kernel that runs in parallel calls ``myelin_parallel_for(task, context, count)``: the calling
thread and the pool's workers claim task indices 0..count-1 (``task(context, index)`` each)
until none is left, and the call returns when all have finished. No Python runs on this path,
and the GIL is not involved: a cell's ``compute()`` stays one native call.

The pool is one LLVM module compiled once per process. Its state is a global record::

    word      generation << 32 | next task index, claimed with compare-and-swap
    done      tasks finished in this generation
    task, context, count   the current work
    alone_left, backoff    (nanoseconds) how much longer callers run their calls alone (the
                           calls' time, not the clock's), and for how long the next
                           verdict sends them alone
    sequence, sleepers     futex word and the number of workers waiting on it
    lock      held by the thread whose work the pool runs; others run their tasks alone
    stop, workers
    debt_us   (microseconds) what shared calls cost over running alone, less what they saved
    shared_ns the shared calls' time since the last verdict
    judge_mask  which calls are judged (below)

Workers spin (with ``pause``) for a while after their last task, so consecutive parallel steps
start without a system call, then sleep on a futex until the next generation. A claim is a
compare-and-swap on ``word`` that checks the generation, so a worker that read the work of an
old generation can never run a task of a new one. Publishing new work first closes the old
generation (its index set to ``CLOSED``), so a worker that read the old word and then the new
work cannot claim either: it would run a new task under the old generation's count, and the
caller could return before that task finished. The caller always takes tasks too: a pool
without workers (1 thread, after ``fork``, or while another thread holds it) just runs them
all in the caller.

Cores busy with other work: a worker the system preempts in the middle of a task keeps the
caller waiting for a whole time slice of the other program (milliseconds, for a task of
microseconds), a worker sharing the caller's core halves the caller's speed, and a network
makes dozens of parallel calls per compute. So the caller judges each shared call against
running it alone: what it cost is its time less the caller's processor time per task (its
own tasks, on the thread's CPU clock, so that time it was off its core counts as lost) times
the tasks, negative where the workers helped. That clock is a system call (0.7 us on the
2-core VM, twice per call: a tenth of the MLP at batch 1's time), so only a sample of the
calls is judged: those whose start (in units of 1024 ns) has none of the record's
``judge_mask`` bits set (``SAMPLED_JUDGE_MASK``, 7: 1 call in 8; the tests set 0 to judge
every call), each judged call's cost counting for ``judge_mask + 1`` calls. The costs add up
to a debt that the gains pay off; one call's cost counts up to half of ``DEBT_LIMIT_NS`` (a
virtual machine's host takes its cores away for a millisecond now and then: on the 2-core VM
of the benchmarks, otherwise idle, such single calls sent MobileNetV2 alone 6 times in 500
computes before this cap; one such call is not a load). When the debt reaches
``DEBT_LIMIT_NS`` the cores are busy with other work, and calls run alone (as with
``threads=1``) for ``backoff`` nanoseconds of their own time (a program that computes in
bursts, with pauses between, stays alone across the pauses, where a clock's deadline would
pass in each and every burst would pay to be judged again), multiplied by
``BACKOFF_GROWTH`` at each such verdict up to ``MAX_BACKOFF_NS`` and reset once shared calls
have taken ``CALM_NS`` without one (a lasting load that costs a little per call, as one core
busy does to MobileNetV3-Small's many small calls, takes a few computes to judge each time,
and must not reset the backoff). A call that had to wake sleeping workers is not judged:
the system takes a while to run them again (milliseconds on a virtual machine whose idle
cores the hypervisor parks), which, judged, sent every call after an idle spell alone.

Spinning threads must not take a core from a thread with work: while waiting, the caller
yields its core after every ``YIELD_SPINS`` pauses, so a worker waiting for that core runs,
and so does a spinning worker, so the caller's steps between parallel calls keep their core
when another program holds the other (without it, MobileNetV3-Small's calls with one core
busy took twice their time alone: their caller ran half the time). While the shared calls are
in debt, workers spin a tenth as long (``SPINS_IN_DEBT``) before they sleep: a worker that
yields still takes a share of the core the caller's steps between parallel calls run on,
which no judged call sees (with one core busy, MobileNetV3-Small's pool took 1.03-1.04 of one
thread's time spinning the full while, 0.98-1.01 spinning less).
"""

import atexit
import ctypes
import functools
import os
import platform
import threading

import llvmlite.ir as ir

from myelin.codegen.llvm import engine, irutil
from myelin.codegen.llvm import target as targets

I32, I64, PTR = irutil.I32, irutil.I64, irutil.PTR
TASK_TYPE = ir.FunctionType(ir.VoidType(), [PTR, I64])
PARALLEL_FOR_TYPE = ir.FunctionType(ir.VoidType(), [PTR, PTR, I64])
SPINS = 200_000                 # pause loops before a worker sleeps (about a millisecond)
SPINS_IN_DEBT = 20_000          # ... while shared calls cost more than they saved
YIELD_SPINS = 2_000             # pause loops before a waiting thread yields its core
DEBT_LIMIT_NS = 1_000_000       # shared calls' costs beyond their gains that send callers alone
BACKOFF_NS = 16_000_000         # first time callers run alone once the debt is too high
BACKOFF_GROWTH = 2              # each verdict before CALM_NS of shared calls multiplies it
MAX_BACKOFF_NS = 256_000_000    # longest (a lasting load is judged again every 1/4 s of calls)
CALM_NS = 1_000_000_000         # shared calls this long without a verdict: backoff anew
# Bytes of a worker's stack: kernels keep buffers of up to about 1.3 MiB there (Winograd's
# transformed patches), more than some systems give a thread by default (musl: 128 KiB).
WORKER_STACK = 8 << 20
_ATTR_BYTES = 128               # room for a pthread_attr_t (56 or 64 bytes on Linux)
CLOCK_MONOTONIC = 1
SAMPLED_JUDGE_MASK = 7          # calls judged: 1 in SAMPLED_JUDGE_MASK + 1 (see above)
# A thread's processor time (CLOCK_THREAD_CPUTIME_ID), or the wall's where the system has none.
OWN_CLOCK = {"Linux": 3, "Darwin": 16}.get(platform.system(), CLOCK_MONOTONIC)
_FUTEX = {"x86_64": 202, "aarch64": 98, "riscv64": 98}   # SYS_futex by machine
# The symbols of the pool's module (a library exported with a C API links and starts it:
# myelin.aot).
POOL_RECORD, WORKER, PARALLEL_FOR, WAKE = ("myelin_pool", "myelin_worker", "myelin_parallel_for",
                                           "myelin_wake")
_FUTEX_WAIT, _FUTEX_WAKE = 128, 129                       # the *_PRIVATE operations
# Fields of the pool record.
(WORD, DONE, TASK, CONTEXT, COUNT, ALONE_LEFT, BACKOFF, SEQUENCE, SLEEPERS, LOCK, STOP,
 WORKERS, DEBT_US, SHARED_NS, JUDGE_MASK) = range(15)
_POOL_TYPE = ir.LiteralStructType([I64, I64, PTR, PTR, I64, I64, I64, I32, I32, I32, I32, I32,
                                   I32, I64, I64])
_FIELD_SIZES = [8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 8, 8]
CLOSED = 0xFFFFFFFF             # the task index of a generation whose work is being replaced


def default_threads():
    """The number of cores this process may run on ($MYELIN_THREADS overrides it)."""
    value = os.environ.get("MYELIN_THREADS")
    if value:
        return max(1, int(value))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def field_offset(index):
    """The byte offset of field ``index`` (WORKERS, STOP, ...) in the pool record."""
    return sum(_FIELD_SIZES[:index])


def _larger(b, x, y):
    """The larger of two signed integers."""
    return b.select(b.icmp_signed(">", x, y), x, y)


class _Emitter:
    """Builds the pool module: the claim loop, the worker's main function, parallel_for;
    for ``machine`` (this one's by default: ``platform.machine()``'s names)."""

    def __init__(self, module, machine=None):
        machine = machine or platform.machine()
        self.module = module
        self.pool = ir.GlobalVariable(module, _POOL_TYPE, POOL_RECORD)
        self.pool.initializer = ir.Constant(_POOL_TYPE, [
            ir.Constant(typ, None) for typ in _POOL_TYPE.elements[:JUDGE_MASK]] + [
            irutil.i64(SAMPLED_JUDGE_MASK)])
        self.pool.align = 64
        futex = _FUTEX.get(machine)
        self.futex = futex
        if futex is not None:
            self.syscall = ir.Function(module, ir.FunctionType(I64, [I64], var_arg=True),
                                       "syscall")
        self.clock_gettime = ir.Function(module, ir.FunctionType(I32, [I32, PTR]),
                                         "clock_gettime")
        self.sched_yield = ir.Function(module, ir.FunctionType(I32, []), "sched_yield")
        self.pause = None
        if machine in ("x86_64", "AMD64"):
            self.pause = ir.Function(module, ir.FunctionType(ir.VoidType(), []),
                                     "llvm.x86.sse2.pause")

    def field(self, b, index):
        return b.gep(self.pool, [ir.Constant(I32, 0), ir.Constant(I32, index)], inbounds=True)

    def load(self, b, index, ordering="seq_cst"):
        typ = _POOL_TYPE.elements[index]
        return b.load_atomic(self.field(b, index), ordering, _FIELD_SIZES[index], typ=typ)

    def store(self, b, index, value, ordering="seq_cst"):
        # IRBuilder.store_atomic insists on typed pointers; build the instruction directly.
        b._insert(ir.instructions.StoreAtomicInstr(b.block, value, self.field(b, index),
                                                   ordering, _FIELD_SIZES[index]))

    def spin(self, b):
        if self.pause is not None:
            b.call(self.pause, [])

    def now(self, b, timespec, clock=CLOCK_MONOTONIC):
        """A clock in nanoseconds (``timespec``: two i64 on the stack)."""
        b.call(self.clock_gettime, [ir.Constant(I32, clock), timespec])
        seconds = b.load(timespec, typ=I64)
        nanoseconds = b.load(irutil.element_ptr(b, timespec, "int64", irutil.i64(1)), typ=I64)
        return b.add(b.mul(seconds, irutil.i64(1_000_000_000)), nanoseconds)

    def futex_call(self, b, operation, value):
        if self.futex is None:
            return
        b.call(self.syscall, [irutil.i64(self.futex), self.field(b, SEQUENCE),
                              ir.Constant(I32, operation), ir.Constant(I32, value),
                              ir.Constant(PTR, None)])

    @staticmethod
    def run_alone(b, task, context, count):
        """Every task of a call in this thread."""
        with irutil.for_range(b, 0, count, name="t") as index:
            irutil.call_pointer(b, task, TASK_TYPE, [context, index])

    def function(self, name, ftype, linkage=None):
        function = ir.Function(self.module, ftype, name)
        function.attributes.add("nounwind")
        if linkage:
            function.linkage = linkage
        return function, ir.IRBuilder(function.append_basic_block("entry"))

    def run_tasks(self):
        """``run(generation)``: claim and run tasks of ``generation`` until none is left;
        returns how many this thread ran."""
        function, b = self.function("myelin_run_tasks", ir.FunctionType(I64, [I64]),
                                    "internal")
        generation = function.args[0]
        entry = b.block
        loop, claim, run, finish = (function.append_basic_block(n)
                                    for n in ("loop", "claim", "run", "finish"))
        b.branch(loop)
        b.position_at_end(loop)
        ran = b.phi(I64, "ran")
        ran.add_incoming(irutil.i64(0), entry)
        word = self.load(b, WORD)
        current = b.icmp_unsigned("==", b.lshr(word, irutil.i64(32)), generation)
        index = b.and_(word, irutil.i64(0xFFFFFFFF))
        count = self.load(b, COUNT, "acquire")
        b.cbranch(b.and_(current, b.icmp_unsigned("<", index, count)), claim, finish)
        b.position_at_end(claim)
        task = self.load(b, TASK, "acquire")
        context = self.load(b, CONTEXT, "acquire")
        swap = b.cmpxchg(self.field(b, WORD), word, b.add(word, irutil.i64(1)), "seq_cst",
                         "seq_cst")
        ran.add_incoming(ran, claim)
        b.cbranch(b.extract_value(swap, 1), run, loop)
        b.position_at_end(run)
        irutil.call_pointer(b, task, TASK_TYPE, [context, index])
        b.atomic_rmw("add", self.field(b, DONE), irutil.i64(1), "seq_cst")
        ran.add_incoming(b.add(ran, irutil.i64(1)), run)
        b.branch(loop)
        b.position_at_end(finish)
        b.ret(ran)
        return function

    def worker(self, run_tasks):
        """``ptr myelin_worker(ptr)``, a thread's start routine: wait for work, run it."""
        function, b = self.function(WORKER, ir.FunctionType(PTR, [PTR]))
        entry = b.block
        wait, check, sleep, work, leave = (function.append_basic_block(n)
                                           for n in ("wait", "check", "sleep", "work", "leave"))
        seen0 = b.lshr(self.load(b, WORD), irutil.i64(32))
        b.branch(wait)
        # wait: spins counts down; seen is the last generation worked on.
        b.position_at_end(wait)
        seen = b.phi(I64, "seen")
        spins = b.phi(I64, "spins")
        seen.add_incoming(seen0, entry)
        spins.add_incoming(irutil.i64(SPINS), entry)
        stop = b.icmp_unsigned("!=", self.load(b, STOP, "monotonic"), ir.Constant(I32, 0))
        b.cbranch(stop, leave, check)
        b.position_at_end(check)
        generation = b.lshr(self.load(b, WORD), irutil.i64(32))
        new = b.icmp_unsigned("!=", generation, seen)
        b.cbranch(new, work, sleep)
        b.position_at_end(work)
        b.call(run_tasks, [generation])
        in_debt = b.icmp_unsigned("!=", self.load(b, DEBT_US, "monotonic"), ir.Constant(I32, 0))
        seen.add_incoming(generation, b.block)
        spins.add_incoming(b.select(in_debt, irutil.i64(SPINS_IN_DEBT), irutil.i64(SPINS)),
                           b.block)
        b.branch(wait)
        b.position_at_end(sleep)
        self.spin(b)
        left = b.sub(spins, irutil.i64(1))
        with b.if_then(b.icmp_unsigned("==", b.urem(left, irutil.i64(YIELD_SPINS)),
                                       irutil.i64(0))):
            b.call(self.sched_yield, [])
        with b.if_then(b.icmp_signed("<=", left, irutil.i64(0))):
            sequence = self.load(b, SEQUENCE)
            b.atomic_rmw("add", self.field(b, SLEEPERS), ir.Constant(I32, 1), "seq_cst")
            idle = b.icmp_unsigned("==", b.lshr(self.load(b, WORD), irutil.i64(32)), seen)
            awake = b.icmp_unsigned("==", self.load(b, STOP), ir.Constant(I32, 0))
            with b.if_then(b.and_(idle, awake)):
                if self.futex is not None:
                    b.call(self.syscall, [irutil.i64(self.futex), self.field(b, SEQUENCE),
                                          ir.Constant(I32, _FUTEX_WAIT), sequence,
                                          ir.Constant(PTR, None)])
            b.atomic_rmw("sub", self.field(b, SLEEPERS), ir.Constant(I32, 1), "seq_cst")
        after = b.block
        spins.add_incoming(b.select(b.icmp_signed("<=", left, irutil.i64(0)),
                                    irutil.i64(SPINS), left), after)
        seen.add_incoming(seen, after)
        b.branch(wait)
        b.position_at_end(leave)
        b.ret(ir.Constant(PTR, None))

    def parallel_for(self, run_tasks):
        """``myelin_parallel_for(task, context, count)``: run tasks 0..count-1, return when done."""
        function, b = self.function(PARALLEL_FOR, PARALLEL_FOR_TYPE)
        task, context, count = function.args
        alone, share, check, judged_alone, publish, wait, spin, done, unlock = (
            function.append_basic_block(n)
            for n in ("alone", "share", "check", "judged_alone", "publish", "wait", "spin",
                      "done", "unlock"))
        timespec = b.alloca(ir.ArrayType(I64, 2))
        own_time = b.alloca(I64)
        workers = self.load(b, WORKERS, "monotonic")
        few = b.or_(b.icmp_signed("<=", count, irutil.i64(1)),
                    b.icmp_unsigned("==", workers, ir.Constant(I32, 0)))
        b.cbranch(few, alone, share)
        # Alone: every task in this thread.
        b.position_at_end(alone)
        self.run_alone(b, task, context, count)
        b.ret_void()
        b.position_at_end(share)
        locked = b.cmpxchg(self.field(b, LOCK), ir.Constant(I32, 0), ir.Constant(I32, 1),
                           "acquire", "monotonic")
        b.cbranch(b.extract_value(locked, 1), check, alone)
        # Check: alone too while a verdict says the cores are busy with other work, for the
        # time it gave calls to run alone.
        b.position_at_end(check)
        start = self.now(b, timespec)
        busy = b.icmp_signed(">", self.load(b, ALONE_LEFT, "monotonic"), irutil.i64(0))
        with b.if_then(busy):
            self.store(b, LOCK, ir.Constant(I32, 0), "release")
        b.cbranch(busy, judged_alone, publish)
        b.position_at_end(judged_alone)
        self.run_alone(b, task, context, count)
        b.atomic_rmw("sub", self.field(b, ALONE_LEFT), b.sub(self.now(b, timespec), start),
                     "monotonic")
        b.ret_void()
        b.position_at_end(publish)
        # Close the last generation first: a worker that read its word (all tasks claimed)
        # and then this call's count, task and context must fail its compare-and-swap.
        old = b.lshr(self.load(b, WORD), irutil.i64(32))
        self.store(b, WORD, b.or_(b.shl(old, irutil.i64(32)), irutil.i64(CLOSED)))
        self.store(b, TASK, task, "release")
        self.store(b, CONTEXT, context, "release")
        self.store(b, COUNT, count, "release")
        self.store(b, DONE, irutil.i64(0))
        generation = b.and_(b.add(old, irutil.i64(1)), irutil.i64(0xFFFFFFFF))
        self.store(b, WORD, b.shl(generation, irutil.i64(32)))
        b.atomic_rmw("add", self.field(b, SEQUENCE), ir.Constant(I32, 1), "seq_cst")
        sleeping = b.icmp_unsigned("!=", self.load(b, SLEEPERS), ir.Constant(I32, 0))
        with b.if_then(sleeping):
            self.futex_call(b, _FUTEX_WAKE, 0x7FFFFFFF)
        # This thread's processor time in its tasks (its wall time where there is no such
        # clock), read once the workers have their work, in the calls judged (it is a system
        # call).
        mask = self.load(b, JUDGE_MASK, "monotonic")
        judged = b.icmp_unsigned("==", b.and_(b.lshr(start, irutil.i64(10)), mask),
                                 irutil.i64(0))
        b.store(irutil.i64(0), own_time)
        with b.if_then(judged):
            b.store(self.now(b, timespec, OWN_CLOCK), own_time)
        ran = b.call(run_tasks, [generation])
        with b.if_then(judged):
            b.store(b.sub(self.now(b, timespec, OWN_CLOCK), b.load(own_time)), own_time)
        own = b.load(own_time)
        before_wait = b.block
        b.branch(wait)
        b.position_at_end(wait)
        spins = b.phi(I64, "spins")
        spins.add_incoming(irutil.i64(0), before_wait)
        finished = b.icmp_signed(">=", self.load(b, DONE), count)
        b.cbranch(finished, done, spin)
        b.position_at_end(spin)
        self.spin(b)
        with b.if_then(b.icmp_unsigned(">=", spins, irutil.i64(YIELD_SPINS))):
            b.call(self.sched_yield, [])
        spins.add_incoming(b.add(spins, irutil.i64(1)), b.block)
        b.branch(wait)
        # Done: what sharing the call cost over running it alone: its time less this
        # thread's time per task times the tasks (negative where the workers helped), for
        # the calls the judged one stands for.
        b.position_at_end(done)
        end = self.now(b, timespec)
        wall = b.sub(end, start)
        per_task = b.sdiv(own, b.select(
            b.icmp_signed(">", ran, irutil.i64(0)), ran, irutil.i64(1)))
        zero = irutil.i64(0)
        lost = b.select(b.and_(judged, b.icmp_signed(">", ran, zero)),
                        b.mul(b.sub(wall, b.mul(per_task, count)), b.add(mask, irutil.i64(1))),
                        zero)
        # Waking sleeping workers takes the system a while (milliseconds on a virtual machine,
        # after the caller was idle): that is not other work on the cores.
        lost = b.select(sleeping, zero, lost)
        # One call's loss counts up to half the limit: one hiccup of the host is not a load.
        lost = b.select(b.icmp_signed(">", lost, irutil.i64(DEBT_LIMIT_NS // 2)),
                        irutil.i64(DEBT_LIMIT_NS // 2), lost)
        # The debt: what sharing cost, less what it saved (only the holder of the lock gets
        # here: no atomic update).
        debt = b.mul(b.zext(self.load(b, DEBT_US, "monotonic"), I64), irutil.i64(1000))
        debt = _larger(b, b.add(debt, lost), zero)
        overdrawn = b.icmp_signed(">=", debt, irutil.i64(DEBT_LIMIT_NS))
        self.store(b, DEBT_US, b.trunc(b.select(overdrawn, zero, b.sdiv(debt, irutil.i64(1000))),
                                       I32), "monotonic")
        backoff = self.load(b, BACKOFF, "monotonic")
        backoff = b.select(b.icmp_signed("<", backoff, irutil.i64(BACKOFF_NS)),
                           irutil.i64(BACKOFF_NS), backoff)
        with b.if_else(overdrawn) as (busy_cores, calm):
            with busy_cores:
                self.store(b, ALONE_LEFT, backoff, "monotonic")
                self.store(b, SHARED_NS, zero, "monotonic")
                longer = b.mul(backoff, irutil.i64(BACKOFF_GROWTH))
                self.store(b, BACKOFF, b.select(
                    b.icmp_signed(">", longer, irutil.i64(MAX_BACKOFF_NS)),
                    irutil.i64(MAX_BACKOFF_NS), longer), "monotonic")
            with calm:
                # Shared calls long without a verdict: the next backoff is the first.
                shared = b.add(self.load(b, SHARED_NS, "monotonic"), wall)
                self.store(b, SHARED_NS, shared, "monotonic")
                with b.if_then(b.icmp_signed(">", shared, irutil.i64(CALM_NS))):
                    self.store(b, BACKOFF, irutil.i64(BACKOFF_NS), "monotonic")
        b.branch(unlock)
        b.position_at_end(unlock)
        self.store(b, LOCK, ir.Constant(I32, 0), "release")
        b.ret_void()

    def wake(self):
        """``myelin_wake()``: wake every sleeping worker (to see ``stop``)."""
        _, b = self.function(WAKE, ir.FunctionType(ir.VoidType(), []))
        b.atomic_rmw("add", self.field(b, SEQUENCE), ir.Constant(I32, 1), "seq_cst")
        self.futex_call(b, _FUTEX_WAKE, 0x7FFFFFFF)
        b.ret_void()


def _module(machine=None):
    """The pool's LLVM module (for ``machine``, as :class:`_Emitter` takes it)."""
    module = ir.Module(name="myelin_threads")
    emitter = _Emitter(module, machine)
    run_tasks = emitter.run_tasks()
    emitter.worker(run_tasks)
    emitter.parallel_for(run_tasks)
    emitter.wake()
    return module


def module_text(target):
    """The LLVM IR of the pool's module for ``target`` (any Linux target: a library exported
    for it links the pool, :mod:`myelin.aot`)."""
    module = _module(target.triple.split("-")[0])
    irutil.set_target(module, target)
    return str(module)


@functools.cache
def object_code(target):
    """The pool's module compiled for ``target`` (this machine's kind, with features this CPU
    or another may have): the object file :func:`pool` may load rather than compile, in a
    process that loads a saved network (:mod:`myelin.runtime.serialize`)."""
    return engine.compile_object(_module(), target)[0]


class Pool:
    """The process's worker pool: its compiled code, its record and its threads. ``code`` is
    its module compiled and loaded already (from :func:`object_code`); by default it is
    compiled here."""

    def __init__(self, code=None):
        self._code = code or engine.compile_module(_module(), targets.host())
        self.parallel_for_address = self._code.address("myelin_parallel_for")
        self._record = self._code.global_address("myelin_pool")
        self._threads = []
        self._lock = threading.Lock()
        self._libc = ctypes.CDLL(None, use_errno=True)

    def _field(self, index, ctype):
        offset = sum(_FIELD_SIZES[:index])
        return ctype.from_address(self._record + offset)

    def ensure(self, threads):
        """Make sure ``threads - 1`` workers are running (the caller is the last thread)."""
        with self._lock:
            worker = ctypes.c_void_p(self._code.address("myelin_worker"))
            attr = ctypes.create_string_buffer(_ATTR_BYTES)
            self._libc.pthread_attr_init(attr)
            self._libc.pthread_attr_setstacksize(attr, ctypes.c_size_t(WORKER_STACK))
            while len(self._threads) < threads - 1:
                handle = ctypes.c_ulong()
                status = self._libc.pthread_create(ctypes.byref(handle), attr, worker,
                                                   ctypes.c_void_p(self._record))
                if status != 0:
                    break                    # fewer workers: tasks still all run
                self._threads.append(handle)
            self._libc.pthread_attr_destroy(attr)
            self._field(WORKERS, ctypes.c_int32).value = len(self._threads)

    def shutdown(self):
        """Stop and join the workers (at exit, before the code they run is freed)."""
        with self._lock:
            self._field(STOP, ctypes.c_int32).value = 1
            ctypes.CFUNCTYPE(None)(self._code.address("myelin_wake"))()
            for handle in self._threads:
                self._libc.pthread_join(handle, None)
            self._threads = []
            self._field(WORKERS, ctypes.c_int32).value = 0
            self._field(STOP, ctypes.c_int32).value = 0


_pool = None
_pool_lock = threading.Lock()


def pool(threads, object_file=None):
    """The process's pool with at least ``threads - 1`` workers started. A process without a
    pool yet makes it from ``object_file`` (from :func:`object_code`, for a target this CPU
    runs) where given, rather than compiling it."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = Pool(object_file and engine.load_object(object_file, targets.host()))
            atexit.register(_pool.shutdown)
    _pool.ensure(threads)
    return _pool
