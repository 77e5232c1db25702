"""The reference framework's `algorithm` options: each one is honoured (it changes what the trainer computes, the
way the reference does) or refused by the config check with a line naming the key and what to set instead."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from train_embodied.advantages import compute_advantages
from train_embodied.config.convert import build_section
from train_embodied.config.sections import AlgorithmSection
from train_embodied.rollout import RolloutBatch


def _errors(**keys) -> list[str]:
    errors: list[str] = []
    build_section(AlgorithmSection, keys, "algorithm", errors)
    return errors


@pytest.mark.parametrize(
    "keys, expected",
    [
        ({"value_type": "action_level"}, "algorithm.value_type='action_level' is not supported"),
        ({"bootstrap_type": "always"}, "algorithm.bootstrap_type='always' is not supported"),
        (
            {"loss_agg_mode": "seq-mean-token-sum"},
            "algorithm.loss_agg_mode='seq-mean-token-sum' is not supported",
        ),
        ({"kl_penalty": "full"}, "algorithm.kl_penalty='full' is not one of"),
        ({"entropy_type": "sample_level"}, "algorithm.entropy_type='sample_level' is not one of"),
        (
            {"clip_log_ratio_min": 1.0, "clip_log_ratio_max": -1.0},
            "algorithm.clip_log_ratio_min=1.0 is invalid",
        ),
        ({"whiten_std_eps": 0.0}, "algorithm.whiten_std_eps=0.0 is invalid"),
    ],
)
def test_reference_options_we_do_not_implement_are_refused_by_name(keys: dict, expected: str) -> None:
    errors = _errors(**keys)
    assert len(errors) == 1 and errors[0].startswith(expected), errors


@pytest.mark.parametrize(
    "keys",
    [
        {"kl_penalty": "kl"},
        {"kl_penalty": "low_var_kl"},
        {"kl_penalty": "mse"},
        {"entropy_type": "action_level"},
        {"entropy_type": "chunk_level"},
        {"value_type": "chunk_level", "bootstrap_type": "standard"},
        {"clip_log_ratio_min": -0.5, "clip_log_ratio_max": 0.5},
        {"normalize_returns": True},
        {"whiten_std_eps": None},
    ],
)
def test_reference_options_we_implement_are_accepted(keys: dict) -> None:
    assert _errors(**keys) == []


def _rollout() -> RolloutBatch:
    """Two chunks of two actions, four envs without auto-reset: env 0 times out at the end of its second chunk,
    env 1 terminates mid-chunk, envs 2 and 3 run on."""
    t, b, c = 2, 4, 2
    g = torch.Generator().manual_seed(0)
    terminated = torch.zeros(t, b, c, dtype=torch.bool)
    truncated = torch.zeros(t, b, c, dtype=torch.bool)
    truncated[1, 0, 1] = True
    terminated[0, 1, 0] = True
    loss_mask = torch.ones(t, b, dtype=torch.bool)
    loss_mask[1, 1] = False
    return RolloutBatch(
        forward_inputs={},
        logprobs=torch.zeros(t, b, c, 1),
        values=torch.rand(t, b, generator=g),
        rewards=torch.rand(t, b, c, generator=g),
        terminated=terminated,
        truncated=truncated,
        final_values=torch.tensor([[0.0, 0.0, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0]]),
        loss_mask=loss_mask,
        last_values=torch.rand(b, generator=g),
    )


def test_bootstrap_truncated_false_ends_a_timed_out_episode_like_a_terminated_one() -> None:
    algo = AlgorithmSection(normalize_advantages=False, gamma=0.9, gae_lambda=1.0)
    batch = _rollout()
    standard = compute_advantages(batch, algo)
    off = compute_advantages(batch, dataclasses.replace(algo, bootstrap_truncated=False))
    # env 0's last decision: its return includes gamma * V(final obs) = 0.9 * 5 only when bootstrapped
    r = float(batch.rewards[1, 0].sum())
    assert float(standard.returns[1, 0]) == pytest.approx(r + 0.9 * 5.0, rel=1e-6)
    assert float(off.returns[1, 0]) == pytest.approx(r, rel=1e-6)
    assert torch.equal(standard.returns[:, 1:], off.returns[:, 1:])  # the other envs do not change


def test_normalize_returns_whitens_the_value_targets_only() -> None:
    algo = AlgorithmSection(normalize_advantages=False)
    batch = _rollout()
    plain = compute_advantages(batch, algo)
    normed = compute_advantages(batch, dataclasses.replace(algo, normalize_returns=True))
    m = batch.loss_mask
    assert float(normed.returns[m].mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(normed.returns[m].std()) == pytest.approx(1.0, abs=1e-3)
    assert torch.equal(plain.advantages, normed.advantages)


def test_grpo_advantages_are_not_whitened_again_and_scores_are_undiscounted() -> None:
    """As in the reference: `normalize_advantages` leaves group advantages alone, and the score is the episode's
    summed reward unless `discount_scores`."""
    batch = _rollout()
    base = dict(adv_type="grpo", loss_type="actor", group_size=2, gamma=0.5)
    on = compute_advantages(batch, AlgorithmSection(**base, normalize_advantages=True))
    off = compute_advantages(batch, AlgorithmSection(**base, normalize_advantages=False))
    assert torch.equal(on.advantages, off.advantages)
    discounted = compute_advantages(batch, AlgorithmSection(**base, discount_scores=True))
    assert on.stats["rollout/scores_mean"] == pytest.approx(float(_first_scores(batch, 1.0).mean()), rel=1e-6)
    assert discounted.stats["rollout/scores_mean"] == pytest.approx(
        float(_first_scores(batch, 0.5).mean()), rel=1e-6
    )


def _first_scores(batch: RolloutBatch, gamma: float) -> torch.Tensor:
    done = (batch.terminated | batch.truncated).any(-1)
    out = []
    for b in range(done.shape[1]):
        total = 0.0
        for t in range(done.shape[0]):
            total += gamma**t * float(batch.rewards[t, b].sum())
            if done[t, b]:
                break
        out.append(total)
    return torch.tensor(out)
