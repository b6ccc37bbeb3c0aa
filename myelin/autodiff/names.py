"""SLING's names for gradient functions and their variables.

The gradient of function ``f`` is the function ``gradients/f``. A variable's *base* is its name
after ``f/`` (its whole name when it does not start with ``f/``); then the adjoint of ``f/x``
is ``gradients/f/d_x`` (SLING's ``GradientVarName``), and the reference input through which the
gradient reads the forward value of ``f/x`` is ``gradients/f/primal/x``.
"""


def _function_name(func):
    return func if isinstance(func, str) else func.name


def base_name(func, var_name):
    """The name of ``var_name`` without its function's prefix ``<func>/``."""
    prefix = _function_name(func) + "/"
    return var_name[len(prefix):] if var_name.startswith(prefix) else var_name


def gradient_function_name(func):
    """``gradients/<func>``: the name of the gradient function of ``func``."""
    return f"gradients/{_function_name(func)}"


def adjoint_name(func, var_name):
    """``gradients/<func>/d_<base>``: the adjoint of variable ``var_name`` of ``func``."""
    return f"{gradient_function_name(func)}/d_{base_name(func, var_name)}"


def primal_name(func, var_name):
    """``gradients/<func>/primal/<base>``: the gradient's reference to a forward value."""
    return f"{gradient_function_name(func)}/primal/{base_name(func, var_name)}"
