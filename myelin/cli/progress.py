"""A progress bar for long compiles, drawn on one line of a terminal.

:class:`ProgressBar` is the ``progress`` callback of :class:`myelin.Compiler`: it shows the
phase, a bar of the steps emitted and the seconds so far, and is redrawn by a thread of its own
while a phase gives no news (LLVM's machine code generation is one long call). It draws
nothing for compiles shorter than ``delay`` seconds, and clears its line when a compile is done
or the command ends.
"""

import threading
import time

_SPINNER = "|/-\\"


class ProgressBar:
    """Draws compile progress on ``stream`` (a terminal); use it as a context manager."""

    def __init__(self, stream, width=24, interval=0.1, delay=0.5):
        self.stream = stream
        self.width = width
        self.interval = interval
        self.delay = delay
        self._state = None          # (phase, done, total, started) of the compile under way
        self._drawn = 0             # characters on the line now
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def __call__(self, phase, done, total):
        with self._lock:
            if phase == "done":
                self._state = None
                self._clear()
                return
            started = self._state[3] if self._state else time.perf_counter()
            self._state = (phase, done, total, started)
            self._draw()
        if self._thread is None:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._clear()

    def line(self):
        """The text drawn for the compile under way ("" when none)."""
        if self._state is None:
            return ""
        phase, done, total, started = self._state
        elapsed = time.perf_counter() - started
        if total:
            filled = self.width * done // total
            bar = "#" * filled + "-" * (self.width - filled)
            news = f"[{bar}] {done}/{total} steps"
        else:
            news = _SPINNER[int(elapsed / self.interval) % len(_SPINNER)]
        return f"compiling: {phase:<8} {news} {elapsed:5.1f} s"

    def _tick(self):
        while not self._stop.wait(self.interval):
            with self._lock:
                self._draw()

    def _draw(self):
        if self._state is None or time.perf_counter() - self._state[3] < self.delay:
            return
        text = self.line()
        self.stream.write("\r" + text + " " * max(0, self._drawn - len(text)))
        self.stream.flush()
        self._drawn = len(text)

    def _clear(self):
        if self._drawn:
            self.stream.write("\r" + " " * self._drawn + "\r")
            self.stream.flush()
            self._drawn = 0
