"""The gradient pass: reverse-mode differentiation of a flow function into a new function.

``gradient(flow, f)`` adds the function ``gradients/f`` (flagged TRAINING) and returns it:

* inputs ``gradients/f/d_y``, the incoming adjoint of each float output ``y`` of ``f`` that
  depends on a differentiable value (there is none for other outputs, nor where only ops with
  a zero gradient, such as Floor, read ``y``'s adjoint);
* outputs ``gradients/f/d_x``, the gradient of each float input ``x`` of ``f`` that is not
  NOGRADIENT (zeros if no output depends on it);
* accumulators ``gradients/f/d_w`` for each float learnable variable ``w`` that ``f`` reads and
  an output depends on: instance tensors (flagged IN and OUT, so the memory plan keeps them)
  to which every computation adds its gradient, until ``instance.clear()``; with
  ``accumulate=False`` they are plain outputs, each computation writing its own gradient (no
  zeroing needed between training steps);
* reference inputs ``gradients/f/primal/<base>`` for the forward values the rules read; they
  are bound to the forward instance's tensors (:mod:`myelin.autodiff.primal`), and the forward
  variables they read are flagged OUT so they survive optimization and memory planning.
  Constants and learnable variables are read directly.

The ops of ``f`` are visited in reverse topological order; each op that lies between a
differentiable value and an output calls the ``gradient`` rule of its registry entry (see
:mod:`myelin.autodiff.context`). NOGRADIENT ops and variables stop gradients. A variable's
terms are summed, and terms of broadcast shape are summed back to the variable's shape.
"""

from myelin.autodiff import names
from myelin.autodiff.context import Adjoints, OpContext
from myelin.errors import FlowError, UnsupportedOpError
from myelin.flow import dtypes
from myelin.flow.graph import Function, VarFlags
from myelin.ops import registry


def gradient(flow, func, accumulate=True):
    """Add the gradient function ``gradients/<func>`` of ``func`` (a Function or its name) to
    ``flow`` and return it; ``accumulate`` makes the learnables' gradients accumulators. Raises FlowError if ``func`` does not exist or already has a
    gradient function, and UnsupportedOpError naming every op on a gradient path whose type
    has no gradient rule; the flow is then left as it was (except for the IN/OUT flags
    :meth:`Flow.infer_inputs_and_outputs` adds)."""
    func = _function(flow, func)
    name = names.gradient_function_name(func)
    if name in flow.funcs:
        raise FlowError(f"function {func.name} already has a gradient function {name}")
    flow.infer_inputs_and_outputs()
    order = flow.order(func)
    inputs = [v for v in func.inputs() if _differentiable(v)]
    learnables = [v for v in func.variables() if v.learnable and _differentiable(v)]
    outputs = [v for v in func.outputs() if _differentiable(v)]
    active = _active(order, inputs + learnables, outputs)
    steps = [op for op in reversed(order) if not op.nogradient
             and any(id(v) in active for v in op.inputs)
             and any(id(v) in active for v in op.outputs)]
    _check_rules(steps[::-1])

    mark = flow.mark()
    try:
        grad = flow.func(name)
        grad.training = True
        adjoints = Adjoints(flow, func, grad, active)
        incoming = []
        for y in outputs:
            if id(y) in active:
                incoming.append(flow.var(names.adjoint_name(func, y.name), y.dtype, y.shape))
                incoming[-1].flags |= VarFlags.IN
                adjoints.add(y, incoming[-1])
        for op in steps:
            if any(adjoints.adjoint(v) is not None for v in op.outputs):
                registry.lookup(op.type).gradient(OpContext(adjoints, op))
        for x in inputs:
            total = adjoints.adjoint(x)
            if total is None:
                total = adjoints.zeros(x.dtype, x.shape)
            _result(adjoints.builder, total, names.adjoint_name(func, x.name))
        for w in learnables:
            total = adjoints.adjoint(w)
            if total is not None:
                collect = _accumulate if accumulate else _result
                collect(adjoints.builder, total, names.adjoint_name(func, w.name))
        for var in incoming:
            if not var.consumers:     # only zero-gradient ops read it
                flow.delete_var(var)
    except Exception:
        mark.undo()
        raise
    for var in adjoints.referenced:
        var.flags |= VarFlags.OUT
    return grad


def _function(flow, func):
    if isinstance(func, Function):
        if flow.funcs.get(func.name) is not func:
            raise FlowError(f"function {func.name} is not a function of this flow")
        return func
    if func not in flow.funcs:
        raise FlowError(f"flow has no function named {func}")
    return flow.funcs[func]


def _differentiable(var):
    return dtypes.is_float(var.dtype) and not var.nogradient


def _active(order, sources, outputs):
    """Ids of the variables between a differentiable source and an output: those that depend
    on a source (through ops that are not NOGRADIENT) and that an output depends on."""
    depends = {id(v) for v in sources}
    for op in order:
        if not op.nogradient and any(id(v) in depends for v in op.inputs):
            depends.update(id(v) for v in op.outputs if _differentiable(v))
    active = {id(v) for v in outputs if id(v) in depends}
    for op in reversed(order):
        if not op.nogradient and any(id(v) in active for v in op.outputs):
            active.update(id(v) for v in op.inputs if id(v) in depends)
    return active


def _check_rules(steps):
    """Raise UnsupportedOpError naming every op of ``steps`` whose type has no gradient rule
    (in the order of ``steps``)."""
    missing = {}
    for op in steps:
        opdef = registry.find(op.type)
        if opdef is None or opdef.gradient is None:
            missing.setdefault(op.type, []).append(op.name)
    if missing:
        listed = "; ".join(f"{t} ({', '.join(ops)})" for t, ops in missing.items())
        raise UnsupportedOpError(f"no gradient rule for op types: {listed}",
                                 [name for ops in missing.values() for name in ops])


def _result(b, total, name):
    """Make ``total`` the output variable ``name`` of the gradient function (renamed when it
    is a fresh local, else copied by an Identity op)."""
    if (total.producer is not None and total.producer.func is b.func and not total.consumers
            and not (total.is_input or total.is_output or total.is_global)):
        b.flow.rename_var(total, name)
        out = total
    else:
        out = b.flow.var(name, total.dtype, total.shape)
        b.flow.op(b.opname("Identity"), "Identity", b.func, [total], [out])
    out.flags |= VarFlags.OUT


def _accumulate(b, total, name):
    """``name += total`` for an accumulator ``name`` kept in the gradient's instance."""
    acc = b.flow.var(name, total.dtype, total.shape)
    acc.flags |= VarFlags.IN | VarFlags.OUT
    b.assign(acc, b.add(acc, total))
