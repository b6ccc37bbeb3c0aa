"""The worker pool's parallel_for, driven directly with Python tasks: every task runs once,
and callers run their tasks alone while other work holds the cores up (time lost waiting on
workers, once it outweighs the time shared calls take, sends them alone for a while)."""

import ctypes
import threading
import time

import pytest

from myelin.codegen.llvm import threads

TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
PARALLEL_FOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


@pytest.fixture
def pool():
    pool = threads.pool(2)
    fields = [pool._field(threads.ALONE_UNTIL, ctypes.c_int64),
              pool._field(threads.BACKOFF, ctypes.c_int64),
              pool._field(threads.DEBT_US, ctypes.c_int32)]
    for field in fields:
        field.value = 0
    yield pool
    for field in fields:
        field.value = 0


def run(pool, count, body):
    """Call parallel_for with ``count`` tasks running ``body(index)``; returns the thread
    each task ran on."""
    ran_on = [None] * count

    def task(_, index):
        ran_on[index] = threading.get_ident()
        body(index)

    callback = TASK(task)
    PARALLEL_FOR(pool.parallel_for_address)(ctypes.cast(callback, ctypes.c_void_p), None, count)
    return ran_on


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def test_every_task_runs_once(pool):
    seen = []
    ran_on = run(pool, 50, lambda index: seen.append(index))
    assert sorted(seen) == list(range(50))
    assert None not in ran_on


def test_callers_run_alone_while_the_cores_are_busy(pool):
    pool._field(threads.ALONE_UNTIL, ctypes.c_int64).value = now_ns() + 10 ** 10
    ran_on = run(pool, 16, lambda index: time.sleep(0.001))
    assert set(ran_on) == {threading.get_ident()}


def test_a_straggling_worker_sends_callers_alone():
    pool = threads.pool(2)
    caller = threading.get_ident()
    alone_until = pool._field(threads.ALONE_UNTIL, ctypes.c_int64)
    backoff = pool._field(threads.BACKOFF, ctypes.c_int64)
    try:
        for _ in range(5):      # until a worker has taken a task, awake when it was published
            # A call that wakes the workers is not judged: this one keeps them busy till they
            # are up, and they spin (awake) when the next one publishes its tasks.
            run(pool, 16, lambda index: time.sleep(0.002))
            alone_until.value, backoff.value = 0, 10 ** 9
            ran_on = run(pool, 16, lambda index: time.sleep(
                0.001 if threading.get_ident() == caller else 0.1))
            if set(ran_on) != {caller} and alone_until.value:
                break
        else:
            pytest.skip("no worker took a task while awake")
        assert alone_until.value > now_ns()
        assert backoff.value == min(threads.BACKOFF_GROWTH * 10 ** 9, threads.MAX_BACKOFF_NS)
        assert set(run(pool, 16, lambda index: None)) == {caller}
    finally:
        alone_until.value = backoff.value = 0


def test_waking_sleeping_workers_is_not_straggling():
    """Workers asleep after an idle spell take a while to wake (milliseconds on a virtual
    machine): the call that wakes them does not send callers alone, however late they are."""
    pool = threads.pool(2)
    caller = threading.get_ident()
    alone_until = pool._field(threads.ALONE_UNTIL, ctypes.c_int64)
    backoff = pool._field(threads.BACKOFF, ctypes.c_int64)
    try:
        alone_until.value, backoff.value = 0, 10 ** 9
        # The workers stop spinning and sleep (on a busy machine their spinning, which yields
        # the core, may take a while).
        sleepers = pool._field(threads.SLEEPERS, ctypes.c_int32)
        deadline = time.monotonic() + 10
        while not sleepers.value and time.monotonic() < deadline:
            time.sleep(0.01)
        if not sleepers.value:
            pytest.skip("the workers did not fall asleep")
        run(pool, 16, lambda index: time.sleep(
            0.001 if threading.get_ident() == caller else 0.1))
        assert alone_until.value == 0
    finally:
        alone_until.value = backoff.value = 0


def test_a_short_loss_is_a_debt_that_sends_callers_alone_only_once_too_high(pool):
    """A worker late by a millisecond, as a virtual machine's host makes one now and then,
    adds to the debt; the callers run alone only once the debt passes the limit."""
    caller = threading.get_ident()
    alone_until = pool._field(threads.ALONE_UNTIL, ctypes.c_int64)
    debt = pool._field(threads.DEBT_US, ctypes.c_int32)
    sleepers = pool._field(threads.SLEEPERS, ctypes.c_int32)
    limit_us = threads.DEBT_LIMIT_NS // 1000

    def late_call(debt_before):
        """A call whose worker (awake) takes a task and sleeps 1 ms in it, with the debt at
        ``debt_before`` microseconds: (its seconds, alone_until, debt after it), or None where
        no worker took a task or the call woke sleeping ones (such calls are not judged). The
        caller's tasks wait till the worker has one (else the caller would claim them all)."""
        run(pool, 16, lambda index: time.sleep(0.002))        # wake the workers
        # (its caller slept in its tasks, off its core: a verdict that this call undoes)
        alone_until.value, debt.value = 0, debt_before
        if sleepers.value:
            return None
        taken = threading.Event()

        def task(index):
            if threading.get_ident() == caller:
                taken.wait(1.0)
            else:
                taken.set()
                time.sleep(0.001)

        start = time.perf_counter()
        ran_on = run(pool, 16, task)
        seconds = time.perf_counter() - start
        return (seconds, alone_until.value, debt.value) if set(ran_on) != {caller} else None

    # A call can lose no more than its time: one shorter than the limit leaves a debt and no
    # verdict. (A busy machine may stretch every call past it.)
    short = [(alone, owed) for seconds, alone, owed in filter(None, (
        late_call(0) for _ in range(5))) if seconds * 1e6 < limit_us]
    if not short:
        pytest.skip("no call of a worker's task shorter than the limit")
    assert all(alone == 0 and 0 < owed < limit_us for alone, owed in short), short
    for _ in range(5):
        outcome = late_call(limit_us - 300)
        if outcome:
            break
    else:
        pytest.skip("no worker took a task while awake")
    _, alone, owed = outcome
    assert alone > 0 and owed == 0, outcome
