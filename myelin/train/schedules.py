"""Learning-rate schedules: plain objects giving the learning rate of step ``n`` (0 for the
first step) as ``schedule(n)``.

An optimizer takes a schedule, or a number for a constant rate, and feeds ``schedule(n)`` to
its cell as an input at every step, so changing the rate never recompiles. Any callable from
a step number to a rate works as a schedule. The formulas are those of PyTorch's ``StepLR``
and ``CosineAnnealingLR`` (closed form) at epoch ``n``.
"""

import math

from myelin.errors import InputError


def _check(condition, message):
    if not condition:
        raise InputError(message)


class Constant:
    """The same rate ``lr`` at every step."""

    def __init__(self, lr):
        _check(lr >= 0, f"learning rate must not be negative, not {lr}")
        self.lr = float(lr)

    def __call__(self, step):
        return self.lr

    def __repr__(self):
        return f"Constant({self.lr})"


class StepDecay:
    """``lr * gamma ** (step // step_size)``: the rate falls by ``gamma`` every ``step_size``
    steps."""

    def __init__(self, lr, step_size, gamma=0.1):
        _check(lr >= 0, f"learning rate must not be negative, not {lr}")
        _check(step_size >= 1, f"step_size must be at least 1, not {step_size}")
        _check(gamma >= 0, f"gamma must not be negative, not {gamma}")
        self.lr, self.step_size, self.gamma = float(lr), int(step_size), float(gamma)

    def __call__(self, step):
        return self.lr * self.gamma ** (step // self.step_size)

    def __repr__(self):
        return f"StepDecay({self.lr}, step_size={self.step_size}, gamma={self.gamma})"


class Cosine:
    """Cosine annealing from ``lr`` at step 0 to ``min_lr`` at ``total_steps`` (and after):
    ``min_lr + (lr - min_lr) * (1 + cos(pi * step / total_steps)) / 2``."""

    def __init__(self, lr, total_steps, min_lr=0.0):
        _check(lr >= min_lr >= 0, f"rates must satisfy lr >= min_lr >= 0, not lr={lr}, "
                                  f"min_lr={min_lr}")
        _check(total_steps >= 1, f"total_steps must be at least 1, not {total_steps}")
        self.lr, self.total_steps, self.min_lr = float(lr), int(total_steps), float(min_lr)

    def __call__(self, step):
        progress = min(step, self.total_steps) / self.total_steps
        return self.min_lr + (self.lr - self.min_lr) * (1 + math.cos(math.pi * progress)) / 2

    def __repr__(self):
        return f"Cosine({self.lr}, total_steps={self.total_steps}, min_lr={self.min_lr})"
