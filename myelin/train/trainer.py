"""A training loop in one object: a model function, its gradient, a loss and an optimizer
compiled into one network, and the instances that run them.

::

    flow = myelin.Flow()
    f = myelin.Builder(flow, "mlp")
    x = f.var("x", myelin.DT_FLOAT, [32, 64])
    W = train.parameter(f, "W", [64, 10])
    b = train.parameter(f, "b", [10], "zeros")
    logits = f.add(f.matmul(x, W), b, name="logits")
    trainer = train.Trainer(flow, "mlp", x, logits, train.Adam(1e-3))
    for images, labels in batches:
        loss = trainer.step(images, labels)
    classes = trainer.predict(test_images).argmax(1)

The trainer adds to the flow the gradient function of the model (``myelin.gradient``; the
model's inputs get no gradient, and the parameters' gradients are written, not accumulated), a loss function ``loss`` reading the model's output in place
and the optimizer's function, compiles the flow and fills the parameters from ``seed``. A step
is four native calls, no copies between them: the forward cell, the loss cell (its adjoint is
bound as the gradient's incoming adjoint), the gradient cell (reading the forward values in
place) and the optimizer's update.
"""

import numpy as np

from myelin import autodiff
from myelin.builder import Builder
from myelin.compiler import Compiler
from myelin.errors import FlowError, InputError
from myelin.flow import dtypes
from myelin.flow.graph import Variable
from myelin.train.losses import mean_squared_error, softmax_cross_entropy
from myelin.train.parameters import initialize

# The losses by name: a Trainer takes one of these functions or its name.
LOSSES = {"softmax_cross_entropy": softmax_cross_entropy, "cross_entropy": softmax_cross_entropy,
          "mean_squared_error": mean_squared_error}
LOSS_FUNCTION = "loss"


class Trainer:
    """Trains the model function ``model`` of ``flow`` (a name) from its inputs ``inputs`` (a
    Variable or name, or a list of them) to its output ``output`` under ``loss`` (a loss of
    :mod:`myelin.train.losses` or its name in :data:`LOSSES`: integer class targets of shape
    [batch] for ``softmax_cross_entropy``, targets like the output for
    ``mean_squared_error``) with ``optimizer`` (an unbuilt
    :class:`~myelin.train.optimizer.Optimizer`). ``compiler`` compiles the flow (default
    ``Compiler()``); ``seed`` initializes the parameters. Raises FlowError for a flow that
    cannot be trained so (unknown names, a loss function already there, no parameters)."""

    def __init__(self, flow, model, inputs, output, optimizer, loss=softmax_cross_entropy,
                 compiler=None, seed=0):
        if model not in flow.funcs:
            raise FlowError(f"flow has no function named {model}")
        loss = _loss(loss)
        if LOSS_FUNCTION in flow.funcs:
            raise FlowError(f"flow already has a function {LOSS_FUNCTION}")
        self.inputs = [_variable(flow, v) for v in (inputs if isinstance(inputs, (list, tuple))
                                                     else [inputs])]
        self.output = _variable(flow, output)
        for var in self.inputs:
            var.nogradient = True
        gradient = autodiff.gradient(flow, model, accumulate=False)
        incoming = flow.var_named(autodiff.adjoint_name(model, self.output.name))
        if incoming is None:
            raise FlowError(f"output {self.output.name} of {model} depends on no parameter")
        incoming.ref = True
        b = Builder(flow, LOSS_FUNCTION)
        predictions = b.var("predictions", self.output.dtype, self.output.shape)
        predictions.ref = True
        if loss is softmax_cross_entropy:
            targets = b.var("targets", dtypes.DT_INT32, self.output.shape[:1])
        else:
            targets = b.var("targets", self.output.dtype, self.output.shape)
        self._loss, adjoint = loss(b, predictions, targets)
        self._targets = targets.name
        optimizer.build(flow)
        self.optimizer = optimizer

        self.network = (compiler or Compiler()).compile(flow)
        initialize(self.network, seed)
        optimizer.attach(self.network)
        self.forward = self.network.cell(model).instance()
        self.loss = self.network.cell(LOSS_FUNCTION).instance()
        self.gradient = self.network.cell(gradient.name).instance()
        self.loss.bind(predictions.name, self.forward.array(self.output.name))
        autodiff.bind_primal(self.gradient, self.forward)
        self.gradient.bind(incoming.name, self.loss.array(adjoint.name))

    @property
    def batch_size(self):
        """The rows of a batch: the first dimension of the model's first input."""
        return self.inputs[0].shape[0]

    def step(self, inputs, targets):
        """One training step on a batch: ``inputs`` (an array, or a list of arrays for a model
        of several inputs) and ``targets``; returns the batch's loss before the update."""
        self._feed(inputs)
        self.loss[self._targets] = targets
        self.forward.compute()
        self.loss.compute()
        self.gradient.compute()
        self.optimizer.step(self.gradient, zero_grad=False)   # (written afresh each step)
        return self.loss[self._loss.name]

    def predict(self, inputs):
        """The model's output for ``inputs`` (an array of any number of rows for a model of
        one input, computed a batch at a time; the last batch is padded with zeros)."""
        if len(self.inputs) != 1:
            raise InputError("predict takes models of one input; compute with trainer.forward")
        inputs = np.asarray(inputs)
        batch = self.batch_size
        if inputs.shape[1:] != tuple(self.inputs[0].shape[1:]):
            raise InputError(f"predict takes rows of shape {list(self.inputs[0].shape[1:])}, "
                             f"not {list(inputs.shape[1:])}")
        rows = []
        for start in range(0, len(inputs), batch):
            chunk = inputs[start:start + batch]
            if len(chunk) < batch:
                chunk = np.concatenate([chunk, np.zeros((batch - len(chunk),) + chunk.shape[1:],
                                                        chunk.dtype)])
            self._feed(chunk)
            self.forward.compute()
            rows.append(np.array(self.forward[self.output.name]))
        return np.concatenate(rows)[:len(inputs)]

    def _feed(self, inputs):
        arrays = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        if len(arrays) != len(self.inputs):
            raise InputError(f"the model takes {len(self.inputs)} inputs, not {len(arrays)}")
        for var, array in zip(self.inputs, arrays):
            self.forward[var.name] = array


def _variable(flow, key):
    var = key if isinstance(key, Variable) else flow.var_named(key)
    if var is None or var.flow is not flow:
        raise FlowError(f"{getattr(key, 'name', key)} is not a variable of the flow")
    return var


def _loss(loss):
    """The loss function ``loss`` stands for (one of :data:`LOSSES` or its name)."""
    if isinstance(loss, str) and loss in LOSSES:
        return LOSSES[loss]
    if callable(loss) and loss in LOSSES.values():
        return loss
    raise FlowError(f"unknown loss {loss!r}; losses: train.softmax_cross_entropy and "
                    f"train.mean_squared_error, or their names")
