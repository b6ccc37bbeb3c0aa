"""Flows made and checked with the op registry: the :class:`Builder` (SLING's Python API for
adding variables and ops to a function, with its control-flow methods, :mod:`.control`) and
the consistency check of a whole flow (:func:`check`, :mod:`.verify`).

This layer sits between the op registry, whose shape rules and definitions it reads, and the
optimizer; the flow IR below (:mod:`myelin.flow`) knows nothing of either.
"""

from myelin.builder.builder import Builder
from myelin.builder.verify import check

__all__ = ["Builder", "check"]
