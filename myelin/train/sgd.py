"""Stochastic gradient descent with momentum, Nesterov momentum and L2 weight decay, with
PyTorch's ``torch.optim.SGD`` update (no dampening)::

    g = grad + weight_decay * p
    b = momentum * b + g                 (b starts at zero, so the first b is g)
    g = g + momentum * b  if nesterov  else  b
    p = p - lr * g
"""

from myelin.errors import FlowError
from myelin.train.optimizer import Optimizer, check_positive


class SGD(Optimizer):
    """SGD: ``lr`` (a number or a schedule), ``momentum``, ``weight_decay`` (L2, added to the
    gradient), ``nesterov``; ``max_norm`` and ``name`` as :class:`Optimizer`. The momentum
    buffer of parameter ``p`` is the state input ``optimizer/<p>/momentum``."""

    def __init__(self, lr, momentum=0.0, weight_decay=0.0, nesterov=False, *, max_norm=None,
                 name="optimizer"):
        super().__init__(lr, max_norm=max_norm, name=name)
        check_positive(momentum, "momentum")
        check_positive(weight_decay, "weight_decay")
        if nesterov and momentum == 0:
            raise FlowError("Nesterov momentum needs a momentum above 0")
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov

    def _update(self, ctx, param, grad):
        b = ctx.builder
        if self.weight_decay:
            grad = b.add(grad, b.mul(param, ctx.const(self.weight_decay)))
        if self.momentum:
            buffer = ctx.state(param, "momentum")
            momentum = ctx.const(self.momentum)
            new = b.add(b.mul(buffer, momentum), grad)
            b.assign(buffer, new)
            grad = b.add(grad, b.mul(new, momentum)) if self.nesterov else new
        b.assign(param, b.sub(param, b.mul(ctx.coefficients["lr"], grad)))
