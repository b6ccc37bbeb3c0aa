"""Loss functions built into a flow function, each with its closed-form adjoint.

Each loss adds to a :class:`~myelin.Builder`'s function the mean loss over the batch (a scalar
``<func>/<name>``) and the derivative of that loss with respect to the predictions
(``<func>/d_<predictions' base name>``, their shape), as SLING's CrossEntropyLoss does. The
adjoint is what the model's gradient cell takes as the adjoint of its output, so a training
step is: forward cell, loss cell, gradient cell (fed the adjoint), optimizer. A loss in a
function of its own reads the model's output in place through a reference input::

    l = myelin.Builder(flow, "loss")
    logits = l.var("logits", myelin.DT_FLOAT, [batch, classes])
    logits.ref = True                    # bound to the forward instance's logits, no copy
    labels = l.var("labels", myelin.DT_INT32, [batch])
    loss, d_logits = train.softmax_cross_entropy(l, logits, labels)

The losses follow PyTorch's ``cross_entropy`` and ``mse_loss`` with mean reduction.
"""

from myelin.errors import ShapeError
from myelin.flow import dtypes
from myelin.flow.graph import atomic


@atomic
def softmax_cross_entropy(builder, logits, labels, name="loss"):
    """Mean softmax cross-entropy of ``logits`` [batch, classes] (float) against integer
    ``labels`` [batch]: ``mean(logsumexp(logits) - logits[label])``, computed from
    ``logits - max`` so it does not overflow. Returns (loss, d_logits) with
    ``d_logits = (softmax(logits) - onehot(labels)) / batch``.

    A label outside [-classes, classes) raises InputError at run time; a negative one counts
    from the end."""
    _check_float(logits, "logits")
    if logits.rank != 2:
        raise ShapeError(f"logits {logits.name} must be [batch, classes], not "
                         f"{list(logits.shape)}")
    batch, classes = logits.shape
    if not dtypes.is_integer(labels.dtype) or tuple(labels.shape) != (batch,):
        raise ShapeError(f"labels {labels.name} must be integers of shape [{batch}], not "
                         f"{labels.type_string()}")
    b = builder
    shifted = b.sub(logits, b.max(logits, axis=1, keepdims=True))
    exp = b.exp(shifted)
    total = b.sum(exp, axis=1, keepdims=True)
    picked = b.op("GatherElements", [shifted, b.reshape(labels, [batch, 1])], attrs={"axis": 1})
    loss = b.mean(b.sub(b.log(total), picked), name=name)
    onehot = b.op("OneHot", [labels, b.const([0, 1], logits.dtype)], attrs={"depth": classes})
    softmax = b.mul(exp, b.rcp(total))
    d_logits = b.mul(b.sub(softmax, onehot), 1.0 / batch, name=_adjoint_name(logits))
    return loss, d_logits


@atomic
def mean_squared_error(builder, predictions, targets, name="loss"):
    """Mean of ``(predictions - targets)**2`` over all elements (float tensors of one shape).
    Returns (loss, d_predictions) with ``d_predictions = 2 (predictions - targets) / n``."""
    _check_float(predictions, "predictions")
    if (targets.dtype, tuple(targets.shape)) != (predictions.dtype, tuple(predictions.shape)):
        raise ShapeError(f"targets {targets.name} must be {predictions.type_string()} like "
                         f"the predictions, not {targets.type_string()}")
    b = builder
    difference = b.sub(predictions, targets)
    loss = b.mean(b.square(difference), name=name)
    d_predictions = b.mul(difference, 2.0 / predictions.elements,
                          name=_adjoint_name(predictions))
    return loss, d_predictions


def _check_float(var, what):
    if not dtypes.is_float(var.dtype) or not var.shape_defined:
        raise ShapeError(f"{what} {var.name} must be a float tensor of a known shape, not "
                         f"{var.type_string()}")


def _adjoint_name(var):
    return "d_" + var.name.rsplit("/", 1)[-1]
