"""Compiled models kept by input signature, least recently used first.

myelin's code is specialized to concrete shapes, so an imported model is compiled once per
input signature (shapes, dtypes, and the values of inputs read as values) and the compiled
forms are kept: at most ``max_signatures`` of them, compiling one more dropping the least
recently used. Every compile is recorded in ``compiles`` with its reason and logged, as are the
drops. :class:`SignatureCache` is that bookkeeping for the PyTorch front end
(:class:`myelin.importers.torch.model.TorchModel`); a compile goes through :meth:`lookup`,
which compiles under a lock so that two threads never compile the same signature twice.
"""

import collections
import threading

from myelin.errors import InputError


def check_max_signatures(max_signatures):
    """``max_signatures`` if it is a positive int, else InputError."""
    if isinstance(max_signatures, bool) or not isinstance(max_signatures, int) or \
            max_signatures < 1:
        raise InputError(f"max_signatures must be a positive int, not {max_signatures!r}")
    return max_signatures


class SignatureCache:
    """Compiled forms by signature. ``log`` is the logger compiles and drops are told to;
    ``compiles`` lists (signature, reason, seconds) per compile."""

    def __init__(self, max_signatures, log):
        self.max_signatures = check_max_signatures(max_signatures)
        self.log = log
        self.compiles = []
        self._compiled = collections.OrderedDict()   # least recently used first
        self._lock = threading.Lock()                # held while compiling
        self._order_lock = threading.Lock()          # held while the order changes
        self.last = None                             # the most recently used compiled form

    def __len__(self):
        return len(self._compiled)

    def get(self, signature):
        """The compiled form of ``signature``, now the most recently used; None if there is
        none (never compiled, or dropped)."""
        with self._order_lock:
            compiled = self._compiled.get(signature)
            if compiled is not None:
                self._compiled.move_to_end(signature)
                self.last = compiled
            return compiled

    def lookup(self, signature, compile):
        """The compiled form of ``signature``, compiled by ``compile()`` if need be, which
        returns (compiled form, what was compiled, why, seconds) for the log."""
        compiled = self.get(signature)
        if compiled is not None:
            return compiled
        with self._lock:
            compiled = self.get(signature)
            if compiled is None:
                compiled, what, reason, seconds = compile()
                self.store(signature, compiled, what, reason, seconds)
        return compiled

    def store(self, signature, compiled, what, reason, seconds):
        """Keep ``compiled`` as the form of ``signature`` (most recently used), dropping the
        least recently used beyond ``max_signatures``."""
        self.compiles.append((signature, reason, seconds))
        self.log.info("compiled %s in %.3f s (%s)", what, seconds, reason)
        with self._order_lock:
            self._compiled[signature] = compiled
            self.last = compiled
            while len(self._compiled) > self.max_signatures:
                _, dropped = self._compiled.popitem(last=False)
                self.log.info("dropped a compiled signature (least recently used; "
                              "max_signatures=%d)", self.max_signatures)

    def drop(self, signature):
        """Forget the compiled form of ``signature`` (its values are no longer right)."""
        with self._order_lock:
            dropped = self._compiled.pop(signature, None)
            if dropped is not None and dropped is self.last:
                self.last = None

    def latest(self):
        """The compiled form of the most recent compile; InputError before any."""
        if not self.compiles:
            raise InputError("the model has not been compiled yet")
        compiled = self._compiled.get(self.compiles[-1][0])
        if compiled is None:
            raise InputError("the most recent compile was dropped (max_signatures)")
        return compiled

    def clear(self):
        """Drop every compiled form (``compiles`` keeps its record)."""
        with self._order_lock:
            self._compiled.clear()
            self.last = None
