"""Automatic differentiation: the gradient function of a flow function.

``myelin.gradient(flow, f)`` adds ``gradients/f`` to the flow (see :mod:`.reverse` for its
inputs, outputs and accumulators); it compiles like any other function. Each op type's rule is
the ``gradient`` of its registry entry (see :mod:`.context`)::

    grad = myelin.gradient(flow, "f")
    net = myelin.Compiler().compile(flow)
    fwd = net.cell("f").instance()
    fwd["f/x"] = x
    fwd.compute()
    g = net.cell("gradients/f").instance()
    myelin.autodiff.bind_primal(g, fwd)       # the gradient reads fwd's tensors in place
    g["gradients/f/d_y"] = dy
    g.compute()
    g["gradients/f/d_x"], g["gradients/f/d_W"]  # d_W accumulates until g.clear()

:func:`run_reference` computes the same on the reference interpreter.
"""

from myelin.autodiff.reverse import gradient
from myelin.autodiff.interpret import run_reference
from myelin.autodiff.names import (adjoint_name, base_name, gradient_function_name,
                                   primal_name)
from myelin.autodiff.primal import bind_primal, primals

__all__ = ["adjoint_name", "base_name", "bind_primal", "gradient", "gradient_function_name",
           "primal_name", "primals", "run_reference"]
