"""Progress of long compiles: the default ``progress`` callback of :class:`myelin.Compiler`.

The compiler calls ``progress(phase, done, total)`` as each phase starts and as steps are
emitted, and ``progress("done", 0, 0)`` at the end. A :class:`Reporter` is such a callback that
shows nothing until the compile has run for ``delay`` seconds, then shows the phase (and the
steps emitted) and redraws it every ``interval`` seconds on a thread of its own, as a phase may
be one long call (LLVM's code generation); it is closed, its thread stopped and what it showed
cleared, on "done" or when the outermost ``with reporter:`` ends (the compiler wraps each
compile in one, so a compile that fails clears it too).

:func:`callback` turns the compiler's ``progress`` option into the callback it calls: by
default (None) a :class:`TqdmBar` where tqdm is installed and stderr is a terminal or the code
runs in a Jupyter kernel, else :class:`LogLines` (an INFO line per phase on the
``myelin.progress`` logger, silent unless logging is configured to show it); False shows
nothing; a callable is called as given. The ``myelin`` command draws its own bar
(:class:`myelin.cli.progress.ProgressBar`).
"""

import logging
import sys
import threading
import time

from myelin.errors import CompileError

DELAY = 1.0          # seconds a compile runs before the default callback shows anything

log = logging.getLogger(__name__)


class Reporter:
    """A ``progress`` callback that shows a compile's phase once it has run for ``delay``
    seconds, through :meth:`show`, and clears it (:meth:`clear`) when closed; subclasses say
    how. A context manager, re-entrant: the outermost ``with`` closes it."""

    def __init__(self, delay=None, interval=0.1):
        self.delay = DELAY if delay is None else delay
        self.interval = interval
        self._state = None          # (phase, done, total, started) of the compile under way
        self._shown = False         # whether show() has been called since the last clear
        self._depth = 0             # the ``with`` blocks entered
        self._lock = threading.Lock()
        self._thread = None
        self._stop = None           # set to end the thread

    def show(self, phase, done, total, elapsed):
        """Show ``phase`` (with ``done`` of ``total`` steps when total > 0), ``elapsed``
        seconds into the compile; called again as it changes and every ``interval``."""
        raise NotImplementedError

    def clear(self):
        """Remove what :meth:`show` showed."""
        raise NotImplementedError

    def __call__(self, phase, done, total):
        if phase == "done":
            self.close()
            return
        with self._lock:
            started = self._state[3] if self._state else time.perf_counter()
            self._state = (phase, done, total, started)
            self._show()
        if self._thread is None:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._tick, args=(self._stop,), daemon=True,
                                            name="myelin-progress")
            self._thread.start()

    def close(self):
        """Stop redrawing and clear what was shown; a later call starts a new compile."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        with self._lock:
            self._state = None
            if self._shown:
                self._shown = False
                self.clear()

    def __enter__(self):
        self._depth += 1
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if not self._depth:
            self.close()

    def _tick(self, stop):
        while not stop.wait(self.interval):
            with self._lock:
                self._show()

    def _show(self):
        if self._state is None:
            return
        phase, done, total, started = self._state
        elapsed = time.perf_counter() - started
        if elapsed >= self.delay:
            self.show(phase, done, total, elapsed)
            self._shown = True


class TqdmBar(Reporter):
    """Shows each phase as a tqdm bar on stderr (``tqdm_class``: tqdm.auto's, a widget in a
    notebook), with the steps emitted and the seconds since the compile started."""

    _STEPS = "{desc} {bar} {n_fmt}/{total_fmt} steps{postfix}"
    _PHASE = "{desc}{postfix}"

    def __init__(self, tqdm_class, delay=None, interval=0.1):
        super().__init__(delay, interval)
        self._tqdm = tqdm_class
        self._bar = None
        self._phase = None

    def show(self, phase, done, total, elapsed):
        if phase != self._phase:
            self.clear()
            self._phase = phase
            self._bar = self._tqdm(total=total or None, desc=f"compiling: {phase}",
                                   bar_format=self._STEPS if total else self._PHASE,
                                   file=sys.stderr, leave=False, dynamic_ncols=True)
        self._bar.n = done
        self._bar.set_postfix_str(f"{elapsed:.1f} s", refresh=False)
        self._bar.refresh()

    def clear(self):
        if self._bar is not None:
            self._bar.close()
        self._bar = self._phase = None


class LogLines(Reporter):
    """Logs an INFO line on the ``myelin.progress`` logger as each phase shows."""

    def __init__(self, delay=None, interval=0.1):
        super().__init__(delay, interval)
        self._phase = None

    def show(self, phase, done, total, elapsed):
        if phase == self._phase:
            return
        self._phase = phase
        steps = f", {total} steps" if total else ""
        log.info("compiling: %s%s (%.1f s so far)", phase, steps, elapsed)

    def clear(self):
        self._phase = None


def callback(progress):
    """The callback the compiler calls for its ``progress`` option: ``None`` (the default)
    gives :func:`default`'s choice, ``False`` one that does nothing, a callable itself."""
    if progress is None:
        return default()
    if progress is False:
        return _quiet
    if callable(progress):
        return progress
    raise CompileError(f"progress must be a callable, None or False, not {progress!r}")


def default():
    """A :class:`TqdmBar` when tqdm is installed and stderr is a terminal or this runs in a
    Jupyter kernel, else :class:`LogLines`."""
    if _on_terminal(sys.stderr) or _in_kernel():
        try:
            from tqdm.auto import tqdm
        except ImportError:
            pass
        else:
            return TqdmBar(tqdm)
    return LogLines()


def _quiet(phase, done, total):
    pass


def _on_terminal(stream):
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):      # no isatty, or closed
        return False


def _in_kernel():
    """Whether this runs in a Jupyter (IPython) kernel, where tqdm draws a widget."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if hasattr(ipython, "get_ipython") else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})
