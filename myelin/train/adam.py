"""Adam, with PyTorch's ``torch.optim.Adam`` update (the standard one: SLING's squares the
scaled gradient ``(1 - beta2) g``, this squares ``g``)::

    g = grad + weight_decay * p          (L2, not AdamW's decoupled decay)
    m = beta1 m + (1 - beta1) g
    v = beta2 v + (1 - beta2) g^2
    p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

The bias corrections are computed from the step number ``t`` (1 first) in float64, as PyTorch
computes them in Python, then rounded to the parameters' type.
"""

from myelin.flow.dtypes import DT_DOUBLE
from myelin.errors import FlowError
from myelin.train.optimizer import Optimizer, check_positive


class Adam(Optimizer):
    """Adam: ``lr`` (a number or a schedule), ``beta1``, ``beta2``, ``eps``,
    ``weight_decay``; ``max_norm`` and ``name`` as :class:`Optimizer`. The moments of
    parameter ``p`` are the state inputs ``optimizer/<p>/m`` and ``optimizer/<p>/v``."""

    def __init__(self, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, *,
                 max_norm=None, name="optimizer"):
        super().__init__(lr, max_norm=max_norm, name=name)
        for value, what in ((beta1, "beta1"), (beta2, "beta2")):
            check_positive(value, what)
            if value >= 1:
                raise FlowError(f"{what} must be below 1, not {value}")
        check_positive(eps, "eps", allow_zero=False)
        check_positive(weight_decay, "weight_decay")
        self.beta1, self.beta2, self.eps, self.weight_decay = beta1, beta2, eps, weight_decay

    def _coefficients(self, b, lr):
        t = b.var("t", DT_DOUBLE)
        correction1 = b.sub(1.0, b.pow(self.beta1, t))
        correction2 = b.sub(1.0, b.pow(self.beta2, t))
        return {"step_size": b.div(lr, correction1), "correction2_sqrt": b.sqrt(correction2)}

    def _update(self, ctx, param, grad):
        b = ctx.builder
        if self.weight_decay:
            grad = b.add(grad, b.mul(param, ctx.const(self.weight_decay)))
        m, v = ctx.state(param, "m"), ctx.state(param, "v")
        new_m = b.add(b.mul(m, ctx.const(self.beta1)), b.mul(grad, ctx.const(1 - self.beta1)))
        new_v = b.add(b.mul(v, ctx.const(self.beta2)),
                      b.mul(b.square(grad), ctx.const(1 - self.beta2)))
        denominator = b.add(b.div(b.sqrt(new_v), ctx.coefficients["correction2_sqrt"]),
                            ctx.const(self.eps))
        step = b.mul(ctx.coefficients["step_size"], b.div(new_m, denominator))
        b.assign(m, new_m)
        b.assign(v, new_v)
        b.assign(param, b.sub(param, step))
