"""Critic loss (clip, Huber, masks) and explained variance."""

from __future__ import annotations

import pytest
import torch

from vla_algos import explained_variance, value_loss


def test_squared_error_without_clipping():
    values = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    returns = torch.tensor([2.0, 2.0, 0.0])
    loss, metrics = value_loss(values, values.detach(), returns)
    assert loss.item() == pytest.approx(0.5 * (1 + 0 + 9) / 3)
    assert metrics["value_clip_ratio"].item() == 0.0
    loss.backward()
    torch.testing.assert_close(values.grad, (values.detach() - returns) / 3)


def test_huber_is_linear_beyond_delta():
    values = torch.zeros(2)
    returns = torch.tensor([0.5, 4.0])
    loss, _ = value_loss(values, values, returns, huber_delta=1.0)
    assert loss.item() == pytest.approx((0.5 * 0.25 + 1.0 * (4.0 - 0.5)) / 2)
    big_delta, _ = value_loss(values, values, returns, huber_delta=100.0)
    plain, _ = value_loss(values, values, returns)
    torch.testing.assert_close(big_delta, plain)


def test_value_clip_takes_the_pessimistic_loss():
    old = torch.tensor([0.0, 0.0])
    values = torch.tensor([1.0, 0.1], requires_grad=True)  # first moved beyond clip 0.2, second inside
    returns = torch.tensor([1.0, 0.1])
    loss, metrics = value_loss(values, old, returns, value_clip=0.2)
    # entry 0: unclipped error 0, clipped prediction 0.2 -> error 0.8 dominates; entry 1: both 0
    assert loss.item() == pytest.approx(0.5 * 0.8**2 / 2)
    assert metrics["value_clip_ratio"].item() == pytest.approx(0.5)
    loss.backward()
    assert values.grad[0].item() == 0.0  # the clipped branch carries no gradient to `values`
    # moving toward the target within the clip range is unaffected
    loss_in, metrics_in = value_loss(
        torch.tensor([0.1]), torch.tensor([0.0]), torch.tensor([1.0]), value_clip=0.2
    )
    assert loss_in.item() == pytest.approx(0.5 * 0.9**2) and metrics_in["value_clip_ratio"].item() == 0.0


def test_value_mask_ignores_padding():
    values = torch.tensor([[1.0, 5.0], [2.0, 9e9]])
    returns = torch.tensor([[0.0, 5.0], [0.0, -9e9]])
    mask = torch.tensor([[True, True], [True, False]])
    loss, _ = value_loss(values, values, returns, mask, value_clip=1.0, huber_delta=2.0)
    ref, _ = value_loss(values[mask], values[mask], returns[mask], value_clip=1.0, huber_delta=2.0)
    torch.testing.assert_close(loss, ref)


def test_value_loss_errors():
    with pytest.raises(ValueError, match="`returns` has shape \\(3,\\)"):
        value_loss(torch.zeros(2), torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError, match="`value_clip` must be > 0"):
        value_loss(torch.zeros(2), torch.zeros(2), torch.zeros(2), value_clip=0.0)
    with pytest.raises(ValueError, match="`huber_delta` must be > 0"):
        value_loss(torch.zeros(2), torch.zeros(2), torch.zeros(2), huber_delta=-1.0)
    with pytest.raises(ValueError, match="`returns` holds 1 non-finite"):
        value_loss(torch.zeros(2), torch.zeros(2), torch.tensor([0.0, float("inf")]), check_finite=True)


def test_explained_variance():
    g = torch.Generator().manual_seed(0)
    returns = torch.randn(1000, generator=g, dtype=torch.float64)
    assert explained_variance(returns, returns).item() == pytest.approx(1.0)
    constant = torch.full_like(returns, returns.mean().item())
    assert explained_variance(constant, returns).item() == pytest.approx(0.0, abs=1e-12)
    noisy = returns + 0.5 * torch.randn(1000, generator=g, dtype=torch.float64)
    assert 0.6 < explained_variance(noisy, returns).item() < 0.9
    mask = torch.zeros(1000, dtype=torch.bool)
    mask[:500] = True
    garbage = torch.where(mask, returns, torch.full_like(returns, 1e6))
    assert explained_variance(garbage, returns, mask).item() == pytest.approx(1.0)
    assert torch.isnan(explained_variance(torch.zeros(3), torch.ones(3)))


def test_explained_variance_is_nan_for_returns_constant_up_to_rounding():
    """A rollout without reward: GAE's returns (advantages + values) are 0 up to float32 rounding, which is no
    variance to explain (the plain ratio gives about -1e12)."""
    from vla_algos import compute_gae

    g = torch.Generator().manual_seed(0)
    T, B = 5, 16  # 16 episodes of 5 decisions, every one a failure that ends at its last decision
    values = 0.2 + 0.05 * torch.randn(T, B, generator=g)
    next_values = torch.cat([values[1:], torch.zeros(1, B)])
    ended = torch.zeros(T, B, dtype=torch.bool)
    ended[-1] = True
    _, returns = compute_gae(torch.zeros(T, B), values, next_values, ended, ended, gamma=0.99, lam=1.0)
    assert 0 < returns.var().item() < 1e-12  # rounding left some spread
    assert torch.isnan(explained_variance(values, returns))
    # one success among the 80 decisions is variance to explain
    returns[-1, 7] = 1.0
    assert explained_variance(values, returns).item() < 0.1
