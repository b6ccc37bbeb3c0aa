"""A whole training loop: forward cell, loss cell, a hand-written gradient cell (standing in
for myelin.gradient) and the optimizer, all sharing the learnable parameters, against the same
model trained by PyTorch: the loss curves agree within 1e-4."""

import numpy as np
import torch

import myelin
from myelin import train

BATCH, FEATURES, CLASSES, STEPS = 16, 10, 5, 30


def training_flow():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    W = train.parameter(f, "W", [FEATURES, CLASSES], "orthogonal")
    b = train.parameter(f, "b", [CLASSES], "uniform", 0.1)
    x = f.var("x", myelin.DT_FLOAT, [BATCH, FEATURES])
    f.add(f.matmul(x, W), b, name="logits")

    loss = myelin.Builder(flow, "loss")
    logits = loss.var("logits", myelin.DT_FLOAT, [BATCH, CLASSES])
    logits.ref = True
    labels = loss.var("labels", myelin.DT_INT32, [BATCH])
    train.softmax_cross_entropy(loss, logits, labels)

    # gradients/f, as the gradient pass makes it: d_W and d_b accumulate until cleared.
    g = myelin.Builder(flow, "gradients/f")
    primal_x = g.var("x", myelin.DT_FLOAT, [BATCH, FEATURES])
    d_logits = g.var("d_logits", myelin.DT_FLOAT, [BATCH, CLASSES])
    primal_x.ref = d_logits.ref = True
    d_W = g.var("d_W", myelin.DT_FLOAT, [FEATURES, CLASSES])
    d_b = g.var("d_b", myelin.DT_FLOAT, [CLASSES])
    g.assign(d_W, g.add(d_W, g.matmul(primal_x, d_logits, transpose_a=True)))
    g.assign(d_b, g.add(d_b, g.sum(d_logits, axis=0)))
    return flow


def test_training_loop_matches_pytorch():
    rng = np.random.default_rng(0)
    inputs = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
    targets = rng.integers(0, CLASSES, BATCH).astype(np.int32)

    flow = training_flow()
    optimizer = train.Adam(lr=train.Cosine(0.05, STEPS), weight_decay=1e-3, max_norm=0.5)
    optimizer.build(flow)
    net = myelin.Compiler().compile(flow)
    train.initialize(net, 7)
    optimizer.attach(net)
    forward = net.cell("f").instance()
    loss = net.cell("loss").instance()
    gradient = net.cell("gradients/f").instance()
    forward["f/x"] = inputs
    loss.bind("loss/logits", forward.array("f/logits"))
    loss["loss/labels"] = targets
    gradient.bind("gradients/f/x", forward.array("f/x"))
    gradient.bind("gradients/f/d_logits", loss.array("loss/d_logits"))

    W = torch.tensor(np.array(net["f/W"]), requires_grad=True)
    b = torch.tensor(np.array(net["f/b"]), requires_grad=True)
    reference = torch.optim.Adam([W, b], lr=0.05, weight_decay=1e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(reference, STEPS)
    x, y = torch.tensor(inputs), torch.tensor(targets, dtype=torch.long)

    ours, theirs = [], []
    for _ in range(STEPS):
        forward.compute()
        loss.compute()
        gradient.compute()
        optimizer.step(gradient)
        ours.append(loss["loss/loss"])

        reference.zero_grad()
        value = torch.nn.functional.cross_entropy(x @ W + b, y)
        value.backward()
        torch.nn.utils.clip_grad_norm_([W, b], 0.5)
        reference.step()
        schedule.step()
        theirs.append(value.item())

    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    assert ours[-1] < 0.5 * ours[0]
    np.testing.assert_allclose(net["f/W"], W.detach().numpy(), rtol=1e-4, atol=1e-5)
