"""Training: learnable parameters, losses, optimizers and learning-rate schedules.

* :mod:`~myelin.train.parameters`: :func:`parameter` (a learnable variable with an init),
  :func:`initialize` (fill a compiled network's learnables from a seed), :func:`save_parameters`
  and :func:`load_parameters`; :mod:`~myelin.train.init` holds the init kinds.
* :mod:`~myelin.train.losses`: :func:`softmax_cross_entropy`, :func:`mean_squared_error`, each
  with its closed-form adjoint.
* :class:`SGD` and :class:`Adam` (PyTorch's update rules), built into a flow function that
  compiles to one fused kernel per parameter, with optional clipping by global norm.
* :mod:`~myelin.train.schedules`: :class:`Constant`, :class:`StepDecay`, :class:`Cosine`.
* :class:`Trainer`: a model, its gradient, a loss and an optimizer compiled together, a step
  per call.
"""

from myelin.train.adam import Adam
from myelin.train.init import Init
from myelin.train.losses import mean_squared_error, softmax_cross_entropy
from myelin.train.optimizer import Optimizer
from myelin.train.parameters import (initialize, learnables, load_parameters, parameter,
                                     save_parameters)
from myelin.train.schedules import Constant, Cosine, StepDecay
from myelin.train.sgd import SGD
from myelin.train.trainer import Trainer

__all__ = ["Adam", "Constant", "Cosine", "Init", "Optimizer", "SGD", "StepDecay", "Trainer",
           "initialize", "learnables", "load_parameters",
           "mean_squared_error", "parameter", "save_parameters", "softmax_cross_entropy"]
