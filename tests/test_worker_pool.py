"""The worker pool's parallel_for, driven directly with Python tasks: every task runs once,
and callers run their tasks alone while other work holds the cores up (a worker that
straggles sends them alone for a while)."""

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
    alone_until = pool._field(threads.ALONE_UNTIL, ctypes.c_int64)
    backoff = pool._field(threads.BACKOFF, ctypes.c_int64)
    alone_until.value = backoff.value = 0
    yield pool
    alone_until.value = backoff.value = 0


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
        time.sleep(0.1)                          # the workers stop spinning and sleep
        run(pool, 16, lambda index: time.sleep(
            0.001 if threading.get_ident() == caller else 0.1))
        assert alone_until.value == 0
    finally:
        alone_until.value = backoff.value = 0
