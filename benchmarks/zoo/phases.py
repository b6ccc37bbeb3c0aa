"""Compile phases as the compiler reports them: a ``progress`` callback that sums the seconds
spent in each phase.

:class:`myelin.Compiler` calls ``progress(phase, done, total)`` as each phase starts (and as
steps are emitted); :class:`PhaseTimer` charges the time since the previous call to the phase
that was under way, and the time from its creation to the first call to ``import`` (loading
and importing the model). A model compiled more than once (stages, several signatures) sums
each phase over its compiles.
"""

import time


class PhaseTimer:
    """Seconds per compile phase (``phases``), from the compiler's progress calls."""

    def __init__(self):
        self.phases = {}
        self._phase = "import"
        self._since = time.perf_counter()

    def __call__(self, phase, done, total):
        if phase == self._phase:
            return
        now = time.perf_counter()
        if self._phase is not None:
            self.phases[self._phase] = self.phases.get(self._phase, 0.0) + now - self._since
        self._phase = None if phase == "done" else phase
        self._since = now

    def rounded(self, digits=4):
        """The phases with their seconds rounded (for JSON)."""
        return {name: round(seconds, digits) for name, seconds in self.phases.items()}
