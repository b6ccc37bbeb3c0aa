"""Per-step profiles of cells compiled with ``Compiler(profile=True)``.

A profiled cell adds the cycles each step takes, and the cycles of the whole call, to int64
counters (see :mod:`myelin.codegen.llvm.cell`), summed over every call of every instance.
:class:`Profile` turns a snapshot of them into rows: time per call, share of the total,
cumulative share and GFLOP/s per step, plus the overhead (the cell's entry and exit and the
profiler's own counting: whole call minus its steps). ``str(profile)`` is a table in the manner
of SLING Myelin's profiler; :meth:`Profile.rows` gives the same numbers as data.

Cycles become seconds at the counter's rate, measured once per process against
``time.perf_counter`` (:func:`cycles_per_second`).
"""

import ctypes
import dataclasses
import threading
import time

import llvmlite.ir as ir

from myelin.codegen.llvm import engine, irutil
from myelin.codegen.llvm import target as targets
from myelin.codegen.llvm.cell import CALLS, CYCLES, read_counter

_rate = None
_rate_lock = threading.Lock()
_CALIBRATION_SECONDS = 0.02


def _counter_reader():
    """A compiled function ``i64 ()`` returning the cycle counter, and the code keeping it."""
    target = targets.host()
    module = ir.Module(name="myelin_cycle_counter")
    function = ir.Function(module, ir.FunctionType(irutil.I64, []), "myelin_read_counter")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    builder.ret(read_counter(builder, target))
    code = engine.compile_module(module, target)
    reader = ctypes.CFUNCTYPE(ctypes.c_int64)(code.address("myelin_read_counter"))
    return reader, code


def _sample(reader):
    """(seconds, cycles) read together: the counter between two clock reads."""
    before = time.perf_counter()
    cycles = reader()
    after = time.perf_counter()
    return (before + after) / 2, cycles


def cycles_per_second():
    """The rate of the counter the profiler reads (Hz), measured on first use and cached."""
    global _rate
    with _rate_lock:
        if _rate is None:
            reader, code = _counter_reader()
            start_time, start_cycles = _sample(reader)
            time.sleep(_CALIBRATION_SECONDS)
            end_time, end_cycles = _sample(reader)
            del code
            if end_cycles <= start_cycles or end_time <= start_time:
                raise RuntimeError("the cycle counter does not advance; cannot time steps")
            _rate = (end_cycles - start_cycles) / (end_time - start_time)
        return _rate


@dataclasses.dataclass
class ProfileRow:
    """One line of a profile: a step, the overhead, or the total.

    ``kind`` is "step", "overhead" or "total"; ``index`` the step's position in
    ``cell.steps`` (None for the others). ``seconds`` is summed over all ``calls``;
    ``us_per_call`` is the mean per call. ``percent`` and ``cumulative`` are shares of the
    total (every step plus the overhead, so the step rows and the overhead row add up to
    100). ``flops`` is per call; ``gflops`` is 0 where the kernel does not count its
    operations."""

    kind: str
    index: int | None
    step: str
    type: str
    kernel: str
    expr: str
    calls: int
    cycles: int
    seconds: float
    us_per_call: float
    percent: float
    cumulative: float
    flops: int
    gflops: float


class Profile:
    """The profile of one cell: its steps' rows, the overhead and the total, from a snapshot
    of the counters. ``calls`` is how many times the cell ran and ``call_cycles`` the cycles
    of those calls as the cell measured them from entry to return; ``steps``, ``overhead`` and
    ``total`` are :class:`ProfileRow`\\ s; ``rate`` is the counter's rate in Hz."""

    def __init__(self, cell, counters, rate=None):
        self.cell = cell.name
        self.rate = cycles_per_second() if rate is None else rate
        self.calls = int(counters[0, CALLS])
        self.call_cycles = whole = int(counters[0, CYCLES])
        measured = []
        for index, step in enumerate(cell.steps):
            if not step.noop:
                measured.append((index, step, int(counters[1 + index, CYCLES]),
                                 int(counters[1 + index, CALLS])))
        step_cycles = sum(cycles for _, _, cycles, _ in measured)
        # A call cut short by bad input may have counted steps but not ended: never negative.
        overhead = max(whole - step_cycles, 0)
        self.total_cycles = step_cycles + overhead
        self.steps = []
        cumulative = 0.0
        for index, step, cycles, calls in measured:
            percent = self._percent(cycles)
            cumulative += percent
            variant = f"[{step.variant}]" if step.variant else ""
            self.steps.append(self._row(
                "step", index, step.name, step.type, step.kernel.kernel_name(step) + variant,
                str(step.attrs.get("expr", "")), calls, cycles, percent, cumulative,
                int(step.kernel.flops(step))))
        self.overhead = self._row("overhead", None, "entry & exit", "", "", "", self.calls,
                                  overhead, self._percent(overhead),
                                  100.0 if self.total_cycles else 0.0, 0)
        flops = sum(row.flops for row in self.steps)
        share = 100.0 if self.total_cycles else 0.0
        self.total = self._row("total", None, "", "", "TOTAL", "", self.calls,
                               self.total_cycles, share, share, flops)
        # The total's rate counts the operations of the steps that ran, as each row does.
        done = sum(row.flops * row.calls for row in self.steps)
        self.total.gflops = done / self.total.seconds / 1e9 if self.total.seconds else 0.0

    def _percent(self, cycles):
        return 100.0 * cycles / self.total_cycles if self.total_cycles else 0.0

    def _row(self, kind, index, step, type_, kernel, expr, calls, cycles, percent, cumulative,
             flops):
        seconds = cycles / self.rate
        per_call = seconds / calls * 1e6 if calls else 0.0
        gflops = flops * calls / seconds / 1e9 if flops and seconds else 0.0
        return ProfileRow(kind, index, step, type_, kernel, expr, calls, cycles, seconds,
                          per_call, percent, cumulative, flops, gflops)

    def rows(self):
        """Every row as data: the steps in order, then the overhead, then the total."""
        return self.steps + [self.overhead, self.total]

    def as_dicts(self):
        """:meth:`rows` as plain dicts (for JSON or a table of one's own)."""
        return [dataclasses.asdict(row) for row in self.rows()]

    def __str__(self):
        kernel_width = max([len(row.kernel) for row in self.steps] + [24])
        divider = ("+---------+---------+---------------+----------+-"
                   + "-" * kernel_width + "-+------------------------")
        header = (f"| percent |  accum% |     time/call |  GFLOP/s | {'kernel':{kernel_width}} "
                  f"| step")
        lines = [f"Profile of cell {self.cell}: {self.calls} calls, "
                 f"{_time(self.total.us_per_call).strip()} per call, "
                 f"{self.total.gflops:.3f} GFLOP/s "
                 f"(counter at {self.rate / 1e9:.3f} GHz)",
                 divider, header, divider]

        def line(row, label):
            gflops = f"{row.gflops:8.3f}" if row.gflops else " " * 8
            return (f"| {row.percent:6.2f}% | {row.cumulative:6.2f}% | "
                    f"{_time(row.us_per_call)} | {gflops} | {row.kernel:{kernel_width}} "
                    f"| {label}").rstrip()

        for row in self.steps:
            label = f"{row.step} ({row.type})"
            if row.expr:
                label += f" [{row.expr}]"
            lines.append(line(row, label))
        lines.append(line(self.overhead, self.overhead.step))
        lines.append(divider)
        lines.append(line(self.total, ""))
        lines.append(divider)
        return "\n".join(lines) + "\n"

    def __repr__(self):
        return (f"<Profile of cell {self.cell}: {self.calls} calls, "
                f"{self.total.us_per_call:.3f} us per call>")


def _time(us):
    """A time in microseconds as 13 characters, in ms or s when large."""
    if us >= 1e6:
        return f"{us / 1e6:10.3f} s "
    if us >= 1e4:
        return f"{us / 1e3:10.3f} ms"
    return f"{us:10.3f} us"
