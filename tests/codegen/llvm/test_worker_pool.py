"""The worker pool's parallel_for, driven directly with Python tasks: every task runs once,
and callers run their tasks alone while other work holds the cores up (what shared calls
cost over running alone, once it outweighs what they saved by a limit, sends them alone for
a while)."""

import ctypes
import threading
import time

import pytest

from myelin.codegen.llvm import threads

TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
PARALLEL_FOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


@pytest.fixture(autouse=True)
def every_call_judged():
    """The pool judges every shared call (not a sample), for the tests to see each verdict."""
    mask = threads.pool(2)._field(threads.JUDGE_MASK, ctypes.c_int64)
    mask.value = 0
    yield
    mask.value = threads.SAMPLED_JUDGE_MASK


@pytest.fixture
def pool():
    pool = threads.pool(2)
    fields = [pool._field(threads.ALONE_LEFT, ctypes.c_int64),
              pool._field(threads.BACKOFF, ctypes.c_int64),
              pool._field(threads.DEBT_US, ctypes.c_int32),
              pool._field(threads.SHARED_NS, ctypes.c_int64)]
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
    """For the calls' time that a verdict gave them (not the clock's: a pause between calls
    does not use it up)."""
    alone_left = pool._field(threads.ALONE_LEFT, ctypes.c_int64)
    alone_left.value = left = 50_000_000
    for _ in range(2):
        start = now_ns()
        ran_on = run(pool, 16, lambda index: time.sleep(0.001))
        took = now_ns() - start
        assert set(ran_on) == {threading.get_ident()}
        assert left - took <= alone_left.value < left
        left = alone_left.value
        time.sleep(0.05)
        assert alone_left.value == left


def test_a_straggling_worker_sends_callers_alone():
    """Two calls whose worker straggles (a tenth of a second, where the caller's tasks take
    a millisecond) in a row send callers alone; one alone would not (see below)."""
    pool = threads.pool(2)
    caller = threading.get_ident()
    alone_left = pool._field(threads.ALONE_LEFT, ctypes.c_int64)
    backoff = pool._field(threads.BACKOFF, ctypes.c_int64)
    debt = pool._field(threads.DEBT_US, ctypes.c_int32)
    shared = pool._field(threads.SHARED_NS, ctypes.c_int64)

    def straggling():
        return run(pool, 16, lambda index: time.sleep(
            0.001 if threading.get_ident() == caller else 0.1))
    try:
        for _ in range(5):      # until a worker has taken a task, awake when it was published
            # A call that wakes the workers is not judged: this one keeps them busy till they
            # are up, and they spin (awake) when the next one publishes its tasks.
            run(pool, 16, lambda index: time.sleep(0.002))
            # (no shared time since a verdict: the next one doubles this backoff)
            alone_left.value, backoff.value, debt.value, shared.value = 0, 10 ** 9, 0, 0
            if set(straggling()) != {caller} and set(straggling()) != {caller} \
                    and alone_left.value:
                break
        else:
            pytest.skip("no worker took a task while awake")
        assert alone_left.value == 10 ** 9
        assert backoff.value == min(threads.BACKOFF_GROWTH * 10 ** 9, threads.MAX_BACKOFF_NS)
        assert set(run(pool, 16, lambda index: None)) == {caller}
    finally:
        alone_left.value = backoff.value = debt.value = shared.value = 0


def test_backoff_starts_anew_only_after_shared_calls_long_without_a_verdict(pool):
    """A lasting load that costs a little per call takes a while to judge each time: the
    backoff grows through such verdicts and starts anew only once shared calls have taken
    ``CALM_NS`` without one."""
    shared = pool._field(threads.SHARED_NS, ctypes.c_int64)
    backoff = pool._field(threads.BACKOFF, ctypes.c_int64)
    for before, kept in ((threads.CALM_NS // 2, 10 ** 9), (threads.CALM_NS, threads.BACKOFF_NS)):
        shared.value, backoff.value = before, 10 ** 9
        run(pool, 16, lambda index: None)
        assert backoff.value == kept, before
        assert shared.value > before


def test_waking_sleeping_workers_is_not_straggling():
    """Workers asleep after an idle spell take a while to wake (milliseconds on a virtual
    machine): the call that wakes them does not send callers alone, however late they are."""
    pool = threads.pool(2)
    caller = threading.get_ident()
    alone_left = pool._field(threads.ALONE_LEFT, ctypes.c_int64)
    backoff = pool._field(threads.BACKOFF, ctypes.c_int64)
    try:
        alone_left.value, backoff.value = 0, 10 ** 9
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
        assert alone_left.value == 0
    finally:
        alone_left.value = backoff.value = 0


def test_a_loss_is_a_debt_that_sends_callers_alone_only_once_too_high(pool):
    """A worker late by a millisecond, as a virtual machine's host makes one now and then,
    adds at most half the limit to the debt, however late; the callers run alone only once
    the debt passes the limit."""
    caller = threading.get_ident()
    alone_left = pool._field(threads.ALONE_LEFT, ctypes.c_int64)
    debt = pool._field(threads.DEBT_US, ctypes.c_int32)
    sleepers = pool._field(threads.SLEEPERS, ctypes.c_int32)
    limit_us = threads.DEBT_LIMIT_NS // 1000

    def late_call(debt_before):
        """A call whose worker (awake) takes a task and sleeps 1 ms in it, with the debt at
        ``debt_before`` microseconds: (alone_left, debt after it), or None where no worker
        took a task or the call woke sleeping ones (such calls are not judged). The caller's
        tasks wait till the worker has one (else the caller would claim them all)."""
        run(pool, 16, lambda index: time.sleep(0.002))        # wake the workers
        # (its caller slept in its tasks, off its core: a verdict that this call undoes)
        alone_left.value, debt.value = 0, debt_before
        if sleepers.value:
            return None
        taken = threading.Event()

        def task(index):
            if threading.get_ident() == caller:
                taken.wait(1.0)
            else:
                taken.set()
                time.sleep(0.001)

        ran_on = run(pool, 16, task)
        return (alone_left.value, debt.value) if set(ran_on) != {caller} else None

    def outcome(debt_before):
        for _ in range(5):
            found = late_call(debt_before)
            if found:
                return found
        pytest.skip("no worker took a task while awake")

    alone, owed = outcome(0)
    assert alone == 0 and 0 < owed <= limit_us // 2, (alone, owed)
    alone, owed = outcome(limit_us - 300)
    assert alone > 0 and owed == 0, (alone, owed)


def test_only_the_judged_calls_count(pool):
    """Reading the caller's processor time is a system call, so the pool judges a sample of
    the calls (by default, 1 in 8): a call it does not judge adds nothing to the debt,
    however late its worker."""
    caller = threading.get_ident()
    mask = pool._field(threads.JUDGE_MASK, ctypes.c_int64)
    debt = pool._field(threads.DEBT_US, ctypes.c_int32)
    alone_left = pool._field(threads.ALONE_LEFT, ctypes.c_int64)
    # No start is a multiple of 2^30 units (18 minutes) in practice; judged, the late call
    # would count 2^30 times (capped at half the limit).
    mask.value = (1 << 30) - 1
    for _ in range(5):
        run(pool, 16, lambda index: time.sleep(0.002))        # wake the workers
        alone_left.value = debt.value = 0
        ran_on = run(pool, 16, lambda index: time.sleep(
            0.0001 if threading.get_ident() == caller else 0.01))
        if set(ran_on) != {caller}:
            break
    else:
        pytest.skip("no worker took a task while awake")
    assert (alone_left.value, debt.value) == (0, 0)
