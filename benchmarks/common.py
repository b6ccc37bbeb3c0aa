"""Shared helpers for the benchmarks: timing loops, the ratio table, ONNX Runtime sessions.

Every benchmark measures myelin and the other systems in the same process, one system after
the other (so the spinning worker threads of one, ONNX Runtime's or myelin's, do not slow the
next), and reports the median over rounds: ratios are meaningful, absolute numbers less so on
shared machines.
"""

import statistics
import time


def time_call(function, min_seconds=0.2, rounds=7):
    """Median seconds per call of ``function`` over ``rounds`` rounds of at least min_seconds/rounds."""
    function()
    count = 1
    per_round = min_seconds / rounds
    while True:
        start = time.perf_counter()
        for _ in range(count):
            function()
        elapsed = time.perf_counter() - start
        if elapsed >= per_round:
            break
        count = max(count * 2, int(count * per_round / max(elapsed, 1e-9)))
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(count):
            function()
        samples.append((time.perf_counter() - start) / count)
    return statistics.median(samples)


def alternating(runs, rounds=7, round_seconds=0.3, pause=0.1):
    """Seconds per call of each of ``runs`` (name -> function) in each of ``rounds`` rounds of
    about ``round_seconds`` per system, their order reversed every other round (name -> list
    of per-round seconds). Each timing starts ``pause`` seconds after the last and after one
    untimed call: another system's threads, which spin for a while after their work, would
    otherwise take a core from its calls (ONNX Runtime's keep one of 2 cores busy for 60 ms
    after its last run; myelin's spin for about a millisecond)."""
    names = list(runs)
    counts = {name: max(1, int(round_seconds / max(_once(runs[name]), 1e-7))) for name in names}
    samples = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            function, count = runs[name], counts[name]
            time.sleep(pause)
            function()
            start = time.perf_counter()
            for _ in range(count):
                function()
            samples[name].append((time.perf_counter() - start) / count)
    return samples


def _once(function):
    """Seconds of one call of ``function``, after a first call."""
    function()
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def compare(title, contenders, reference="myelin", min_seconds=0.5):
    """Time each named callable, print a table with ratios to ``reference``; return the times."""
    times = {name: time_call(fn, min_seconds) for name, fn in contenders.items() if fn is not None}
    base = times[reference]
    print(f"\n{title}")
    print(f"  {'system':<14}{'latency':>14}{'myelin / system':>18}")
    for name, seconds in times.items():
        print(f"  {name:<14}{format_seconds(seconds):>14}{base / seconds:>18.3f}")
    return times


def ort_session(model_bytes, threads=None):
    """An ONNX Runtime CPU session of ``model_bytes`` on ``threads`` threads (default: its own)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def format_seconds(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds:.3f} s"
