"""Control flow: flows whose functions call each other, branch and loop, compiled into cells
for their straight-line parts and run by a small VM, after Myia's pipeline.

Build such a flow with the Builder's control-flow methods (:mod:`myelin.builder.control`:
``param``, ``ret``, ``call``, ``function``, ``partial``, ``tuple``, ``if_else``,
``while_loop``), then::

    program = myelin.control.compile(flow)
    y = program.run("fact", 5.0)

:mod:`myelin.reference` interprets the same flows (the test oracle). The pipeline is in
:mod:`myelin.control.program`, its steps in :mod:`.lower`, :mod:`.peephole` and :mod:`.link`,
the VM in :mod:`.vm`.
"""

from myelin.control.program import Program, compile

__all__ = ["Program", "compile"]
