"""Forward values for a gradient: which forward variable each reference input of a gradient
function reads, and binding those inputs to a forward instance.

The gradient function ``gradients/f`` reads a forward value of ``f`` through a reference input
(``gradients/f/primal/<base>``, attribute ``primal`` naming the forward variable). Before
computing a gradient instance, bind its reference inputs to the tensors of the forward
instance whose computation it differentiates::

    fwd = net.cell("f").instance(); ...; fwd.compute()
    grad = net.cell("gradients/f").instance()
    myelin.autodiff.bind_primal(grad, fwd)   # no copies: the gradient reads fwd's tensors
    grad["gradients/f/d_y"] = 1.0
    grad.compute()

The binding holds while both instances live: a later ``fwd.compute()`` changes what the next
``grad.compute()`` reads, so binding is needed only once per pair of instances. Both cells must
come from the same compiled network (they share its learnable parameters).
"""

from myelin.errors import InputError

PRIMAL = "primal"   # the attribute of a reference input that names its forward variable


def primals(gradient):
    """{reference input of the gradient function ``gradient``: the forward variable it reads}."""
    flow = gradient.flow
    return {var: flow.var_named(var.attrs[PRIMAL]) for var in gradient.variables()
            if var.ref and PRIMAL in var.attrs}


def bind_primal(gradient_instance, forward_instance):
    """Bind the reference inputs of ``gradient_instance`` (an instance of cell
    ``gradients/f``) to the forward values in ``forward_instance`` (an instance of cell ``f``),
    in place. Raises InputError if the instances are not of such a pair of cells."""
    cell, forward = gradient_instance.cell, forward_instance.cell
    if cell.name != f"gradients/{forward.name}":
        raise InputError(f"cell {cell.name} is not the gradient of cell {forward.name}")
    if cell.network is not forward.network:
        raise InputError(f"cells {cell.name} and {forward.name} are from different networks")
    flow = cell.network.flow
    for spec in cell.tensors:
        if spec.ref:
            var = flow.var_named(spec.name)
            if PRIMAL in var.attrs:
                gradient_instance.bind(spec.name, forward_instance.array(var.attrs[PRIMAL]))
