"""`algorithm.rollout_epoch`: several rollouts of one iteration joined side by side (`concat_rollouts`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from train_embodied.advantages import compute_advantages
from train_embodied.config.sections import AlgorithmSection
from train_embodied.rollout import RolloutBatch, concat_rollouts
from train_embodied.testing import GRPO_TINY, read_metrics, run_train


def _rollout(t: int, b: int, c: int, seed: int, *, prompt: int = 5, all_end: bool = False) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(t, b, c, generator=g) < 0.1
    if all_end:  # every episode ends by the last decision (a rollout with grouped starts that stopped early)
        done[-1, :, -1] = True
    return RolloutBatch(
        forward_inputs={"input_ids": torch.randint(0, 9, (t, b, prompt), generator=g)},
        logprobs=torch.randn(t, b, c, 2, generator=g),
        values=torch.randn(t, b, generator=g),
        rewards=torch.rand(t, b, c, generator=g),
        terminated=done & (torch.rand(t, b, c, generator=g) < 0.5),
        truncated=done,
        final_values=torch.randn(t, b, generator=g),
        loss_mask=torch.ones(t, b, dtype=torch.bool),
        last_values=torch.randn(b, generator=g),
        episodes={"success_once": np.ones(seed + 1, np.float32)},
        first_scores=torch.randn(b, generator=g),
        env_steps=t * b * c,
        task_ids=torch.arange(b) + 10 * seed,
    )


@pytest.mark.parametrize("adv_type", ["gae", "grpo"])
def test_joined_rollouts_give_each_rollout_its_own_advantages(adv_type: str) -> None:
    # GRPO's rollouts stop once every episode ended: the second is shorter; GAE's run their full length
    parts = [_rollout(6, 4, 3, 0), _rollout(4 if adv_type == "grpo" else 6, 4, 3, 1, all_end=True)]
    joined = concat_rollouts(parts)
    assert joined.logprobs.shape[:2] == (6, 8) and joined.env_steps == sum(p.env_steps for p in parts)
    assert not joined.loss_mask[parts[1].logprobs.shape[0] :, 4:].any()  # padding never enters the loss
    assert len(joined.episodes["success_once"]) == 3
    assert torch.equal(joined.task_ids, torch.cat([p.task_ids for p in parts]))
    algo = AlgorithmSection(adv_type=adv_type, group_size=2, normalize_advantages=False, filter_rewards=False)
    together = compute_advantages(joined, algo)
    for k, part in enumerate(parts):
        alone = compute_advantages(part, algo)
        t = part.logprobs.shape[0]
        cols = slice(4 * k, 4 * k + 4)
        mask = alone.loss_mask
        assert torch.equal(together.loss_mask[:t, cols], mask)
        torch.testing.assert_close(together.advantages[:t, cols][mask], alone.advantages[mask])


def test_rollouts_of_different_prompt_widths_join_left_padded() -> None:
    """Rollouts of tasks with instructions of different lengths (prompt_length: null) join: the narrower prompts
    are left-padded (the policy masks the padding out)."""
    narrow, wide = _rollout(3, 2, 1, 0, prompt=5), _rollout(2, 2, 1, 1, prompt=7, all_end=True)
    joined = concat_rollouts([narrow, wide])
    ids = joined.forward_inputs["input_ids"]
    assert ids.shape == (3, 4, 7)
    assert torch.equal(ids[:, :2, 2:], narrow.forward_inputs["input_ids"]) and not ids[:, :2, :2].any()
    assert torch.equal(ids[:2, 2:], wide.forward_inputs["input_ids"]) and not ids[2:, 2:].any()


def test_a_shorter_rollout_with_unfinished_episodes_is_refused() -> None:
    short = _rollout(2, 2, 1, 1)
    short.terminated[:] = False
    short.truncated[:] = False
    with pytest.raises(ValueError, match="never ended"):
        concat_rollouts([_rollout(3, 2, 1, 0), short])


@pytest.mark.slow
def test_rollout_epoch_collects_that_many_rollouts_per_iteration(tmp_path: Path) -> None:
    overrides = [
        *GRPO_TINY,
        "runner.max_epochs=1",
        "runner.eval_after_train=false",
        "runner.eval_before_train=false",
    ]
    run_train("metaworld_grpo_tiny_cpu", [*overrides, "algorithm.rollout_epoch=2"], tmp_path / "two")
    (row,) = [r for r in read_metrics(tmp_path / "two") if "train/actor/num_samples" in r]
    assert row["env/num_trajectories"] == 2 * 4  # 2 rollouts of 4 envs, one episode each
