"""What the fuzz scripts (``fuzz_flow.py``, ``fuzz_onnx.py``) share: worker processes that run
cases under a time and a memory limit, the outcome of each case, the tally and the folder of
cases to replay.

A case is the bytes of a file (a mutated ``.flow`` file or ONNX model) and a description of its
mutation. It runs in one of a few long-lived worker processes (started with ``spawn``, so the
parent's imports do not leak into them), each with ``RLIMIT_AS`` set to its size after start-up
plus a budget, and ``MYELIN_MAX_TENSOR_BYTES`` below that budget: myelin must refuse anything
over its limit with a ``LimitError`` before the process runs out of memory. A worker that dies
is a crash, one that does not answer in time a hang (it is killed); either way a new worker
takes its place. Workers are also replaced every ``RECYCLE`` cases, so that memory a compile
keeps for good (JIT code) does not add up into false "over the limit" outcomes.

Outcomes: ``ok``; ``myelin`` (a documented error, by class); ``foreign`` (any other exception:
its type, message and the mutation are saved for replay); ``limit`` (MemoryError: something
allocated past the memory limit without myelin's check); ``crash``; ``hang``; and
``endless``: a program (a flow with control flow) whose run did not end within
``ENDLESS_SECONDS``, which a mutated loop or recursion may well ask for (an exit test
reversed): the case marks its run with :func:`running_program`, so such a run is told apart
from a hang of myelin itself.
"""

import argparse
import collections
import contextlib
import dataclasses
import importlib
import json
import multiprocessing
import os
import queue
import resource
import signal
import threading
import time
import traceback

OUTCOMES = ("ok", "myelin", "endless", "foreign", "limit", "crash", "hang")
DEFECTS = ("foreign", "limit", "crash", "hang")
ENDLESS_SECONDS = 2.0         # a program's run may take this long
RECYCLE = 250                 # cases a worker runs before it is replaced
MEMORY_BUDGET = 3 << 30       # address space a worker may add to its size after start-up
MAX_TENSOR_BYTES = 256 << 20  # myelin's limit in the workers (MYELIN_MAX_TENSOR_BYTES)
WORKER_ENVIRONMENT = {"MYELIN_THREADS": "1", "MYELIN_CACHE": "off", "MALLOC_ARENA_MAX": "2",
                      "OMP_NUM_THREADS": "1", "MYELIN_MAX_TENSOR_BYTES": str(MAX_TENSOR_BYTES)}


@dataclasses.dataclass
class Case:
    """One input to run: ``data`` (the file's bytes), what was done to it (``mutation``) and
    its number in the run (the seed of its random inputs)."""

    index: int
    data: bytes
    mutation: str


@dataclasses.dataclass
class Result:
    """The outcome of a case (one of :data:`OUTCOMES`), the exception's class (for myelin and
    foreign errors) and a message or traceback."""

    case: Case
    outcome: str
    kind: str = ""
    detail: str = ""


class Endless(BaseException):
    """A program's run went on past its time (a BaseException: no handler of myelin's
    turns it into anything else)."""


_running = None     # in a worker: a shared flag, set while a case's program runs


@contextlib.contextmanager
def running_program(seconds=ENDLESS_SECONDS):
    """Mark the code inside as running the case's program: past ``seconds`` it is
    interrupted (Endless) where it runs Python, and a worker killed meanwhile for not
    answering counts as ``endless``, not as a hang."""
    def expire(signum, frame):
        raise Endless(f"the program ran for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    if _running is not None:
        _running.value = 1
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if _running is not None:
            _running.value = 0


def classify(run, case):
    """Run ``run(data, seed)`` in this process: (outcome, exception class, detail)."""
    from myelin.errors import MyelinError

    try:
        run(case.data, case.index)
    except Endless as error:
        return "endless", "", str(error)
    except MyelinError as error:
        return "myelin", type(error).__name__, str(error)[:300]
    except MemoryError as error:
        return "limit", type(error).__name__, traceback.format_exc()[-3000:]
    except Exception as error:  # noqa: BLE001: the point is to see every other type
        return "foreign", type(error).__name__, traceback.format_exc()[-3000:]
    return "ok", "", ""


def _serve(connection, runner, environment, running):
    """A worker: set the environment and the memory limit, then run cases until told to
    stop (None)."""
    global _running
    _running = running
    os.environ.update(environment)
    module, name = runner.split(":")
    run = getattr(importlib.import_module(module), name)
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * resource.getpagesize()
    limit = size + MEMORY_BUDGET
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    connection.send("ready")
    while True:
        case = connection.recv()
        if case is None:
            return
        connection.send(classify(run, case))


class _Worker:
    """One worker process and the pipe to it."""

    def __init__(self, runner, environment):
        context = multiprocessing.get_context("spawn")
        self.connection, child = context.Pipe()
        self.running = context.Value("i", 0, lock=False)
        self.process = context.Process(target=_serve,
                                       args=(child, runner, environment, self.running),
                                       daemon=True)
        self.process.start()
        child.close()
        self.cases = 0
        if not self.connection.poll(120) or self.connection.recv() != "ready":
            self.kill()
            raise RuntimeError("a fuzz worker did not start")

    def run(self, case, timeout):
        """(outcome, kind, detail) of ``case``; a crash or hang leaves the worker dead."""
        self.cases += 1
        try:
            self.connection.send(case)
            if self.connection.poll(timeout):
                return self.connection.recv()
        except (EOFError, OSError):
            pass
        if self.process.is_alive():
            self.kill()
            if self.running.value:
                return "endless", "", f"its program ran for more than {timeout} s"
            return "hang", "", f"no answer in {timeout} s"
        self.process.join()
        return "crash", "", f"the worker died (exit code {self.process.exitcode})"

    @property
    def alive(self):
        return self.process.is_alive()

    def stop(self):
        try:
            self.connection.send(None)
        except OSError:
            pass
        self.process.join(10)
        if self.process.is_alive():
            self.kill()

    def kill(self):
        self.process.kill()
        self.process.join()


def run_cases(cases, runner, workers=2, timeout=60.0, environment=None, progress=None):
    """Run the ``cases`` (an iterable of :class:`Case`) with ``runner`` (``"module:function"``
    taking the bytes and a seed) in ``workers`` processes; returns the :class:`Result`s in
    the order of the cases. ``progress(result)`` is called after each case."""
    environment = {**WORKER_ENVIRONMENT, **(environment or {})}
    pending = queue.Queue()
    for case in cases:
        pending.put(case)
    results, lock = {}, threading.Lock()

    def work():
        worker = None
        while True:
            try:
                case = pending.get_nowait()
            except queue.Empty:
                break
            if worker is None or not worker.alive or worker.cases >= RECYCLE:
                if worker is not None:
                    worker.stop()
                worker = _Worker(runner, environment)
            result = Result(case, *worker.run(case, timeout))
            with lock:
                results[case.index] = result
                if progress:
                    progress(result)
        if worker is not None:
            worker.stop()

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[index] for index in sorted(results)]


class Tally:
    """Counts of outcomes (myelin and foreign errors by class) over a run."""

    def __init__(self):
        self.outcomes = collections.Counter()
        self.kinds = {outcome: collections.Counter() for outcome in OUTCOMES}

    def add(self, result):
        self.outcomes[result.outcome] += 1
        if result.kind:
            self.kinds[result.outcome][result.kind] += 1

    @property
    def defects(self):
        return sum(self.outcomes[outcome] for outcome in DEFECTS)

    def report(self, title, seconds):
        total = sum(self.outcomes.values())
        lines = [f"{title}: {total} cases in {seconds:.0f} s"]
        for outcome in OUTCOMES:
            kinds = ", ".join(f"{kind} {n}" for kind, n in self.kinds[outcome].most_common())
            lines.append(f"  {outcome:8} {self.outcomes[outcome]:6}" + (f"  ({kinds})"
                                                                       if kinds else ""))
        return "\n".join(lines)


def save(result, folder, suffix):
    """Write a defect's (or an endless program's) case as ``<index>-<outcome>-<kind><suffix>``
    and what happened (the same name with ``.json``) into ``folder``, for replay."""
    os.makedirs(folder, exist_ok=True)
    stem = os.path.join(folder, f"{result.case.index}-{result.outcome}"
                        + (f"-{result.kind}" if result.kind else ""))
    with open(stem + suffix, "wb") as file:
        file.write(result.case.data)
    with open(stem + ".json", "w") as file:
        json.dump({"index": result.case.index, "mutation": result.case.mutation,
                   "outcome": result.outcome, "kind": result.kind,
                   "detail": result.detail}, file, indent=1)


def describe(result):
    """A case's outcome as text: its index, mutation, outcome, kind and detail."""
    return (f"case {result.case.index} ({result.case.mutation}): {result.outcome} "
            f"{result.kind}\n{result.detail}")


def sample(cases, runner, workers=2, timeout=60.0):
    """Run a seeded sample of ``cases`` (the test suite's): (results, their Tally, the
    description of each defect)."""
    results = run_cases(cases, runner, workers, timeout)
    tally = Tally()
    for result in results:
        tally.add(result)
    return results, tally, [describe(r) for r in results if r.outcome in DEFECTS]


def arguments(description, cases, out):
    """The command line every fuzz script takes (its own options added by the caller):
    ``cases`` by default, defects saved under ``out``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cases", type=int, default=cases)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--out", default=out, help="where defects are saved")
    parser.add_argument("--replay", help="run one saved case here, showing its traceback")
    parser.add_argument("--verbose", action="store_true", help="print each defect")
    return parser


def campaign(title, cases, runner, suffix, workers, timeout, folder, verbose=False):
    """Run ``cases``, print progress and the tally, save every defect into ``folder``;
    returns the Tally."""
    tally = Tally()
    start = time.perf_counter()

    def progress(result):
        tally.add(result)
        if result.outcome in DEFECTS + ("endless",):
            if folder:
                save(result, folder, suffix)
            if verbose:
                print(describe(result), flush=True)
        done = sum(tally.outcomes.values())
        if done % 500 == 0:
            print(f"  {done} cases, {tally.defects} defects, "
                  f"{time.perf_counter() - start:.0f} s", flush=True)

    run_cases(cases, runner, workers, timeout, progress=progress)
    print(tally.report(title, time.perf_counter() - start))
    return tally


def replay(run, path):
    """Run one saved case in this process (its traceback shows), with the workers' limits."""
    os.environ.update({k: v for k, v in WORKER_ENVIRONMENT.items() if k not in os.environ})
    with open(path, "rb") as file:
        data = file.read()
    number = os.path.basename(path).split("-")[0]
    run(data, int(number) if number.isdigit() else 0)
    print("ran without an exception")
