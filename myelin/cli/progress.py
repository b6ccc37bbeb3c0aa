"""A progress bar for long compiles, drawn on one line of a terminal.

:class:`ProgressBar` is the ``progress`` callback the ``myelin`` command gives
:class:`myelin.Compiler`: a :class:`myelin.progress.Reporter` (which waits ``delay`` seconds
before showing anything, and redraws while a phase gives no news) that draws the phase, a bar
of the steps emitted and the seconds so far, and clears its line when a compile is done or the
command ends.
"""

from myelin.progress import Reporter

_SPINNER = "|/-\\"


class ProgressBar(Reporter):
    """Draws compile progress on ``stream`` (a terminal); use it as a context manager."""

    def __init__(self, stream, width=24, interval=0.1, delay=0.5):
        super().__init__(delay, interval)
        self.stream = stream
        self.width = width
        self._drawn = 0             # characters on the line now

    def line(self, phase, done, total, elapsed):
        """The text drawn for ``phase`` with ``done`` of ``total`` steps, ``elapsed`` seconds
        into the compile."""
        if total:
            filled = self.width * done // total
            bar = "#" * filled + "-" * (self.width - filled)
            news = f"[{bar}] {done}/{total} steps"
        else:
            news = _SPINNER[int(elapsed / self.interval) % len(_SPINNER)]
        return f"compiling: {phase:<8} {news} {elapsed:5.1f} s"

    def show(self, phase, done, total, elapsed):
        text = self.line(phase, done, total, elapsed)
        self.stream.write("\r" + text + " " * max(0, self._drawn - len(text)))
        self.stream.flush()
        self._drawn = len(text)

    def clear(self):
        if self._drawn:
            self.stream.write("\r" + " " * self._drawn + "\r")
            self.stream.flush()
            self._drawn = 0
