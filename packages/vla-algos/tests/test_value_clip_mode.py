"""`value_clip_mode`: the pessimistic clipped value loss (PPO2, verl, the reference framework) or Stable-Baselines3's
(the clipped prediction's error alone), in `value_loss` and through `LossSettings` in `actor_critic_loss`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vla_algos import VALUE_CLIP_MODES, LossInputs, LossSettings, actor_critic_loss, value_loss


def _inputs(seed: int = 0, n: int = 64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(n, generator=g)
    values = (old + 0.3 * torch.randn(n, generator=g)).requires_grad_()
    returns = torch.randn(n, generator=g)
    return values, old, returns


def test_clipped_mode_is_sb3s_value_loss():
    """SB3: `F.mse_loss(returns, old + clamp(values - old, -eps, eps))`; here half of it (f(e) = e**2 / 2)."""
    values, old, returns = _inputs()
    eps = 0.1
    loss, metrics = value_loss(values, old, returns, value_clip=eps, value_clip_mode="clipped")
    ref = 0.5 * F.mse_loss(returns, old + torch.clamp(values - old, -eps, eps))
    torch.testing.assert_close(loss, ref)
    (grad,) = torch.autograd.grad(loss, values)
    outside = (values - old).abs() > eps
    assert bool(outside.any()) and bool((~outside).any())
    assert bool((grad[outside] == 0).all()) and bool((grad[~outside] != 0).all())
    torch.testing.assert_close(metrics["value_clip_ratio"], outside.float().mean())


def test_pessimistic_mode_is_the_default_and_differs():
    values, old, returns = _inputs(1)
    default, _ = value_loss(values, old, returns, value_clip=0.1)
    pessimistic, _ = value_loss(values, old, returns, value_clip=0.1, value_clip_mode="pessimistic")
    clipped, _ = value_loss(values, old, returns, value_clip=0.1, value_clip_mode="clipped")
    assert VALUE_CLIP_MODES == ("pessimistic", "clipped")
    torch.testing.assert_close(default, pessimistic)
    assert float(pessimistic.detach()) > float(clipped.detach())  # the larger of two errors, entry by entry
    unclipped, _ = value_loss(values, old, returns, value_clip_mode="clipped")  # no value_clip: no clipping
    torch.testing.assert_close(unclipped, 0.5 * F.mse_loss(values, returns))


def test_unknown_mode_is_refused_by_name():
    values, old, returns = _inputs()
    with pytest.raises(ValueError, match="value_clip_mode"):
        value_loss(values, old, returns, value_clip=0.1, value_clip_mode="max")


def test_the_setting_reaches_the_critic_term_of_actor_critic_loss():
    values, old, returns = _inputs(2)
    n = values.shape[0]
    inputs = LossInputs(
        logprobs=torch.zeros(n),
        old_logprobs=torch.zeros(n),
        advantages=torch.zeros(n),
        values=values,
        old_values=old,
        returns=returns,
    )
    for mode in VALUE_CLIP_MODES:
        loss, metrics = actor_critic_loss(
            inputs, LossSettings(value_clip=0.1, value_clip_mode=mode, value_loss_coef=1.0)
        )
        expected, _ = value_loss(values, old, returns, value_clip=0.1, value_clip_mode=mode)
        torch.testing.assert_close(metrics["critic/value_loss"], expected.detach())
        torch.testing.assert_close(loss, expected)  # zero advantages, no entropy: the critic term alone
