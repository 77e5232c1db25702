"""Empty inputs give defined results, never NaN or an internal reshape error: GAE over zero steps (or zero envs)
returns empty advantages and returns; a loss over a zero-row minibatch is 0 with zero gradient."""

from __future__ import annotations

import pytest
import torch

from vla_algos import compute_gae, masked_mean, ppo_actor_loss


@pytest.mark.parametrize("shape", [(0, 3), (5, 0), (0,)])
def test_gae_over_no_steps_is_empty(shape: tuple[int, ...]) -> None:
    z = torch.zeros(shape)
    adv, ret = compute_gae(z, z, z, z.bool(), z.bool(), gamma=0.99, lam=0.95)
    assert adv.shape == ret.shape == z.shape and adv.dtype == z.dtype


@pytest.mark.parametrize("with_mask", [False, True])
def test_a_loss_over_zero_rows_is_zero_not_nan(with_mask: bool) -> None:
    logprobs = torch.zeros(0, 2, requires_grad=True)
    mask = torch.zeros(0, 2, dtype=torch.bool) if with_mask else None
    loss, metrics = ppo_actor_loss(
        logprobs, torch.zeros(0, 2), torch.zeros(0), mask, clip_ratio_low=0.2, clip_ratio_high=0.2
    )
    assert float(loss) == 0.0 and all(float(v) == 0.0 for v in metrics.values())
    loss.backward()
    assert logprobs.grad is not None and logprobs.grad.shape == (0, 2)


def test_masked_mean_of_nothing_is_zero_and_of_something_unchanged() -> None:
    assert float(masked_mean(torch.zeros(0))) == 0.0
    assert masked_mean(torch.zeros(0, 4), dim=0).tolist() == [0.0] * 4
    x = torch.tensor([1.0, 2.0, 4.0])
    assert torch.equal(masked_mean(x), x.mean())
