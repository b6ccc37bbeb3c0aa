"""The optimizer base class: a flow function that updates learnable parameters from their
gradients, one fused kernel per parameter, and the run-time side that feeds it.

:meth:`Optimizer.build` adds function ``optimizer`` (its ``name``) to the model's flow. For
each parameter ``p`` it reads the gradient through a reference input ``optimizer/<p>/grad``,
bound at each step to the gradient array in place (no copy), and its state (momentum, Adam's
moments) lives in inputs of the optimizer cell such as ``optimizer/<p>/m``: zero at first,
kept by the optimizer's instance from step to step, and set to zero again by :meth:`reset`.
Scalar inputs ``optimizer/lr`` (and ``optimizer/t``, the step number from 1, where the rule
uses it) are float64 and set at every step, so a schedule changes them without recompiling.

The update of a parameter is element-wise: the compiler fuses it into one ``Calculate`` that
reads the parameter, its gradient and its state once and writes the new parameter and state
in place (the Assigns fold into it, see :mod:`myelin.plan.assign`). With ``max_norm`` the
gradients are first scaled as ``torch.nn.utils.clip_grad_norm_`` does
(:mod:`myelin.train.clipping`): a fused norm reduction per gradient, one scalar step, and the
scale folded into each update.

A training step::

    opt = train.Adam(lr=1e-3, max_norm=1.0)
    opt.build(flow)                  # before compiling: every learnable of the flow
    net = myelin.Compiler().compile(flow)
    opt.attach(net)
    ...                              # forward, loss and gradient cells
    opt.step(gradient_instance)      # update, then zero the gradients it read

The gradients are found in the given instances of gradient cells under the names
``myelin.gradient`` gives them (``gradients/f/d_W`` for ``f/W`` in ``gradients/f``), or given
as a mapping from parameters to arrays.
All parameters of one optimizer share one float type.
"""

import math
import numbers

from myelin.autodiff.names import adjoint_name, gradient_function_name
from myelin.builder import Builder
from myelin.errors import FlowError, InputError
from myelin.flow.dtypes import DT_DOUBLE, is_float
from myelin.flow.graph import Variable
from myelin.runtime.network import Instance
from myelin.train.clipping import clip_scale
from myelin.train.schedules import Constant


def gradient_in(cell, param):
    """The name of the gradient of ``param`` in ``cell`` if it is a gradient cell
    (``gradients/f/d_W`` for ``f/W`` in ``gradients/f``, see :mod:`myelin.autodiff.names`),
    else None."""
    func = cell.name.partition("/")[2]
    if gradient_function_name(func) != cell.name:
        return None
    return adjoint_name(func, param.name)


def check_positive(value, what, allow_zero=True):
    """Raise FlowError unless ``value`` is a finite number at least 0 (above 0 if not
    ``allow_zero``)."""
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = "0 or more" if allow_zero else "above 0"
        raise FlowError(f"{what} must be a number {bound}, not {value!r}")


class UpdateContext:
    """What an update rule builds with: the builder, the parameters' float type, shared
    constants, the coefficients (scalars of that type) and the state inputs."""

    def __init__(self, builder, dtype, coefficients):
        self.builder = builder
        self.dtype = dtype
        self.coefficients = coefficients
        self._constants = {}

    def const(self, value):
        """A scalar constant of the parameters' type (one per value)."""
        if value not in self._constants:
            self._constants[value] = self.builder.const(value, self.dtype)
        return self._constants[value]

    def state(self, param, role):
        """A state input ``<func>/<param>/<role>`` shaped like ``param``."""
        return self.builder.var(f"{param.name}/{role}", param.dtype, param.shape)


class Optimizer:
    """Base class of optimizers: ``lr`` is a number or a schedule (a callable from the step
    number, 0 first, to the rate); ``max_norm`` clips the gradients by their global norm;
    ``name`` is the optimizer's function. Subclasses give the update rule
    (:meth:`_update`) and the scalars it needs from lr and t (:meth:`_coefficients`)."""

    def __init__(self, lr, *, max_norm=None, name="optimizer"):
        self.schedule = lr if callable(lr) else Constant(lr)
        if max_norm is not None:
            check_positive(max_norm, "max_norm", allow_zero=False)
        self.max_norm = max_norm
        self.name = name
        self.params = []
        self.steps = 0
        self.instance = None
        self._found = (None, None)     # (gradient instances, their arrays) of the last step

    # Building.
    def build(self, flow, params=None):
        """Add the optimizer function to ``flow`` updating ``params`` (learnable variables or
        their names; default: every learnable of the flow). Returns the Function; on an
        error the flow is left as it was."""
        if self.name in flow.funcs:
            raise FlowError(f"flow already has a function {self.name}")
        params = self._parameters(flow, params)
        mark = flow.mark()
        try:
            function = self._build(Builder(flow, self.name), params)
        except Exception:
            mark.undo()
            raise
        self.params = params
        return function

    def _build(self, b, params):
        dtype = params[0].dtype
        grads = []
        for param in params:
            grad = b.var(f"{param.name}/grad", param.dtype, param.shape)
            grad.ref = True
            grads.append(grad)
        lr = b.var("lr", DT_DOUBLE)
        coefficients = {key: value if value.dtype == dtype else b.cast(value, dtype)
                        for key, value in self._coefficients(b, lr).items()}
        ctx = UpdateContext(b, dtype, coefficients)
        scale = clip_scale(b, grads, self.max_norm) if self.max_norm is not None else None
        for param, grad in zip(params, grads):
            self._update(ctx, param, grad if scale is None else b.mul(grad, scale))
        return b.func

    def _parameters(self, flow, params):
        if params is None:
            params = [var for var in flow.vars.values() if var.learnable]
        found = []
        for key in params:
            var = key if isinstance(key, Variable) else flow.var_named(key)
            if var is None or var.flow is not flow or not var.learnable:
                raise FlowError(f"{getattr(key, 'name', key)} is not a learnable variable of "
                                f"the flow")
            if not is_float(var.dtype) or not var.shape_defined:
                raise FlowError(f"parameter {var.name} must be a float tensor of known shape, "
                                f"not {var.type_string()}")
            found.append(var)
        if not found:
            raise FlowError("the optimizer has no learnable parameters to update")
        dtypes = sorted({var.dtype for var in found})
        if len(dtypes) > 1:
            raise FlowError(f"the parameters of one optimizer must share one float type, not "
                            f"{', '.join(dtypes)}: build one optimizer per type")
        return found

    def _coefficients(self, b, lr):
        """Float64 scalars the update uses, by name, computed from the float64 input ``lr``
        (and, where needed, ``t``); the base gives ``{"lr": lr}``."""
        return {"lr": lr}

    def _update(self, ctx, param, grad):
        """Add the ops that update ``param`` from ``grad`` (already clipped)."""
        raise NotImplementedError

    # Running.
    def attach(self, network):
        """Make the instance of the optimizer's cell in ``network`` (compiled from the flow
        the optimizer was built into) that :meth:`step` runs."""
        self.instance = network.cell(self.name).instance()
        self.steps = 0
        self._found = (None, None)

    def reset(self):
        """Set the state (momentum, moments) and the step count back to zero."""
        self._attached().clear()
        self.steps = 0

    def step(self, gradients, zero_grad=True):
        """Update every parameter from its gradient; returns the learning rate used.

        ``gradients`` is an Instance of a gradient cell, a list of them, or a mapping from
        parameters (Variables or names) to arrays (C-contiguous, of the parameter's type and
        shape). With ``zero_grad`` the gradient arrays are set to zero afterwards, ready to
        accumulate the next batch. Raises InputError for a missing or ill-shaped gradient."""
        data = self._attached()
        arrays = self._gradients(gradients)
        if arrays is not self._found[1]:
            for param, array in zip(self.params, arrays):
                data.bind(f"{self.name}/{param.name}/grad", array)
            if isinstance(gradients, Instance):      # the same next time
                self._found = (gradients, arrays)
            elif isinstance(gradients, (list, tuple)):
                self._found = (tuple(gradients), arrays)
        lr = float(self.schedule(self.steps))
        data[f"{self.name}/lr"] = lr
        if f"{self.name}/t" in data.cell:
            data[f"{self.name}/t"] = self.steps + 1
        data.compute()
        self.steps += 1
        if zero_grad:
            for array in arrays:
                array.fill(0)
        return lr

    @property
    def grad_norm(self):
        """The global gradient norm of the last step (before clipping), or None without
        ``max_norm``."""
        if self.max_norm is None:
            return None
        return self._attached()[f"{self.name}/grad_norm"]

    def _attached(self):
        if self.instance is None:
            raise InputError(f"optimizer {self.name} is not attached to a network: call "
                             f"attach(network) after compiling")
        return self.instance

    def _gradients(self, gradients):
        """The gradient array of each parameter, in order (those of the last step when
        ``gradients`` are its instances again: an instance's arrays do not move)."""
        found, arrays = self._found
        if found is not None and (gradients is found or (
                isinstance(gradients, (list, tuple)) and len(gradients) == len(found)
                and all(a is b for a, b in zip(gradients, found)))):
            return arrays
        if isinstance(gradients, (Instance, list, tuple)):
            instances = [gradients] if isinstance(gradients, Instance) else list(gradients)
            found = {}
            for param in self.params:
                for data in instances:
                    name = gradient_in(data.cell, param)
                    if name is not None and name in data.cell:
                        found[param.name] = data.array(name)
                        break
            where = "the gradient instances"
        else:
            found = {key.name if isinstance(key, Variable) else key: value
                     for key, value in gradients.items()}
            unknown = sorted(set(found) - {param.name for param in self.params})
            if unknown:
                raise InputError(f"optimizer {self.name} updates no parameters "
                                 f"{', '.join(unknown)}")
            where = "the mapping"
        missing = [param.name for param in self.params if param.name not in found]
        if missing:
            raise InputError(f"optimizer {self.name}: no gradients in {where} for "
                             f"{', '.join(missing)}")
        return [found[param.name] for param in self.params]
