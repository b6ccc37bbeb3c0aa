"""Learning-rate schedules against PyTorch's schedulers, and their bad arguments."""

import pytest
import torch

import myelin
from myelin import train


def torch_rates(make_scheduler, lr, steps):
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    scheduler = make_scheduler(optimizer)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize("schedule, make_scheduler", [
    (train.StepDecay(0.3, 4, 0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, 4, 0.5)),
    (train.Cosine(0.3, 17, 0.01),
     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 17, 0.01)),
    (train.Constant(0.3), lambda o: torch.optim.lr_scheduler.ConstantLR(o, 1.0)),
])
def test_rates_match_pytorch(schedule, make_scheduler):
    expected = torch_rates(make_scheduler, 0.3, 18)
    assert [schedule(step) for step in range(18)] == pytest.approx(expected, rel=1e-12)


def test_cosine_stays_at_its_minimum_after_the_last_step():
    schedule = train.Cosine(1.0, 10, 0.1)
    assert schedule(0) == 1.0 and schedule(5) == pytest.approx(0.55)
    assert schedule(10) == schedule(25) == pytest.approx(0.1)


@pytest.mark.parametrize("make, message", [
    (lambda: train.Constant(-1), "must not be negative"),
    (lambda: train.StepDecay(0.1, 0), "step_size must be at least 1"),
    (lambda: train.StepDecay(0.1, 3, -0.5), "gamma must not be negative"),
    (lambda: train.Cosine(0.1, 10, 0.2), "lr >= min_lr >= 0"),
    (lambda: train.Cosine(0.1, 0), "total_steps must be at least 1"),
])
def test_bad_arguments_raise_input_error(make, message):
    with pytest.raises(myelin.InputError, match=message):
        make()
