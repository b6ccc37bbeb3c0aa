"""Gradient clipping by global norm, as ``torch.nn.utils.clip_grad_norm_``.

The L2 norm of all gradients together is one fused reduction per gradient (``Sum(Square)``
over the gradient seen as a vector) and a scalar step that adds them up; the gradients are
not rewritten: the optimizer multiplies each by the returned scale inside its update kernel.
"""

EPSILON = 1e-6     # added to the norm before dividing, as PyTorch does


def clip_scale(builder, grads, max_norm):
    """Add to ``builder``'s function the global norm of ``grads`` (variables of one float
    type), an output named ``<func>/grad_norm``, and return the scalar
    ``min(1, max_norm / (norm + 1e-6))`` that scales them."""
    b = builder
    total = None
    for grad in grads:
        flat = grad if grad.rank == 1 else b.reshape(grad, [grad.elements])
        part = b.sum(b.square(flat))
        total = part if total is None else b.add(total, part)
    norm = b.sqrt(total, name="grad_norm")
    norm.producer.attrs["output"] = True
    return b.minimum(b.div(max_norm, b.add(norm, EPSILON)), 1.0)
