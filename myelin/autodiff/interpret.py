"""Gradients on the reference interpreter: run ``f``, then ``gradients/f`` on its values.

::

    grads = myelin.autodiff.run_reference(flow, "f", {"f/x": x}, {"gradients/f/d_y": dy})
    grads["gradients/f/d_x"], grads["gradients/f/d_W"]
"""

import numpy as np

from myelin import reference
from myelin.autodiff import names
from myelin.autodiff.primal import primals
from myelin.errors import FlowError
from myelin.flow import dtypes


def run_reference(flow, func, inputs, adjoints, interpreter=None):
    """Evaluate function ``func`` (a name) of ``flow`` on ``inputs`` and then its gradient
    function on the forward values it reads and on ``adjoints`` (the incoming adjoints
    ``gradients/f/d_y``, by name or variable; the accumulators ``gradients/f/d_w`` start from
    zero unless given there). Returns {name: array} of the gradient function's outputs: the
    gradients of the inputs and of the learnable variables. ``interpreter`` (a
    :class:`myelin.reference.Interpreter` of ``flow``) keeps learnable values across calls."""
    name = names.gradient_function_name(func)
    if name not in flow.funcs:
        raise FlowError(f"flow has no gradient function {name}; build it with "
                        f"myelin.gradient(flow, {func!r})")
    interpreter = interpreter or reference.Interpreter(flow)
    grad = flow.funcs[name]
    links = primals(grad)
    forward = interpreter.run(func, inputs, list({id(v): v for v in links.values()}.values()))
    feed = {ref: forward[var.name] for ref, var in links.items()}
    feed.update(adjoints)
    results = [v for v in grad.variables() if v.is_output]
    given = {flow.var_named(k) if isinstance(k, str) else k for k in adjoints}
    for var in results:
        if var.is_input and var not in given:
            feed[var] = np.zeros(var.shape, dtypes.to_numpy(var.dtype))
    return interpreter.run(grad, feed, results)
