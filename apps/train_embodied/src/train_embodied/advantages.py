"""Advantages of a rollout: one `vla_algos.rollout_advantages` call (the `algorithm.adv_type` estimator, the reward
filter per task, whitening, the executed-action mask and the `loss_agg_mode` weights); this module only feeds the
rollout and the `algorithm` settings in, groups the rows by task and names the logged statistics.

`reward_type` says what one transition is: `chunk_level` sums the rewards of a chunk (one transition per
decision); `action_level` keeps one transition per action of the chunk (the chunk's value is reused for
its positions). Output advantages are [T, B] (chunk level) or [T, B, C] (action level).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from train_embodied.batches import SampleBatch
from train_embodied.config.sections import AlgorithmSection
from train_embodied.rollout import RolloutBatch
from vla_algos import rollout_advantages


@dataclass
class Advantages:
    """advantages [T, B] or [T, B, C]; returns [T, B] value targets (None without a critic);
    loss_mask bool [T, B]; action_mask bool [T, B, C]: actions the env executed (an episode that ends inside
    a chunk ignores the chunk's later actions: they get no gradient); stats for logging; sample_weight [T, B]
    the `loss_agg_mode` weight of each loss entry of a decision (None: uniform); stat_weights: how many entries each of `stats`
    averages (to join the stats of a rollout spread over data-parallel ranks)."""

    advantages: torch.Tensor
    returns: torch.Tensor | None
    loss_mask: torch.Tensor
    action_mask: torch.Tensor
    stats: dict[str, float]
    sample_weight: torch.Tensor | None = None
    stat_weights: dict[str, float] = field(default_factory=dict)


def compute_advantages(
    batch: RolloutBatch,
    algo: AlgorithmSection,
    *,
    all_reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    task_groups: tuple[torch.Tensor, int] | None = None,
) -> Advantages:
    """Advantages, value targets and the loss mask of one rollout (see module docstring).

    `all_reduce`: `batch` is one data-parallel rank's whole rows of the rollout; it sums a tensor over the ranks so
    that whitening uses the statistics of the whole rollout (the estimators themselves need only whole rows).
    `task_groups`: (int64 [B] group of each row, number of groups) for `algorithm.per_task_advantages`,
    numbered alike on every rank (`data_parallel.rank_task_groups`); None: from `batch.task_ids` (this process
    holds every row).

    The config check refuses settings that do not fit together (a critic-based estimator without values, a PPO reward
    filter without task groups); `vla_algos.rollout_advantages` raises on them too, naming them."""
    groups, num_groups = (None, None)
    if algo.per_task_advantages != "none":
        groups, num_groups = task_groups if task_groups is not None else _task_groups(batch, algo)
    out = rollout_advantages(
        rewards=batch.rewards,
        terminated=batch.terminated,
        truncated=batch.truncated,
        loss_mask=batch.loss_mask,
        values=batch.values,
        last_values=batch.last_values,
        final_values=batch.final_values,
        adv_type=algo.adv_type,
        gamma=algo.gamma,
        gae_lambda=algo.gae_lambda,
        reward_type=algo.reward_type,
        logprob_type=algo.logprob_type,
        group_size=algo.group_size,
        loss_agg_mode=algo.loss_agg_mode,
        normalize=algo.normalize_advantages,
        whiten_std_eps=algo.whiten_std_eps,
        reward_bounds=(algo.rewards_lower_bound, algo.rewards_upper_bound) if algo.filter_rewards else None,
        groups=groups,
        num_groups=num_groups,
        group_mode=algo.per_task_advantages,
        discount_scores=algo.discount_scores,
        normalize_returns=algo.normalize_returns,
        bootstrap_truncated=algo.bootstrap_truncated,
        all_reduce=all_reduce,
    )
    return Advantages(
        advantages=out.advantages,
        returns=out.returns,
        loss_mask=out.loss_mask,
        action_mask=out.action_mask,
        stats={f"rollout/{k}": v for k, v in out.stats.items()},
        sample_weight=out.sample_weight,
        stat_weights={f"rollout/{k}": v for k, v in out.stat_weights.items()},
    )


def _task_groups(batch: RolloutBatch, algo: AlgorithmSection) -> tuple[torch.Tensor, int]:
    if batch.task_ids is None:
        raise ValueError(
            f"algorithm.per_task_advantages={algo.per_task_advantages!r} needs each env row's task, which this "
            "rollout did not record (RolloutBatch.task_ids)"
        )
    uniq, inverse = torch.unique(batch.task_ids, return_inverse=True)
    return inverse, len(uniq)


def flatten_for_update(batch: RolloutBatch, adv: Any) -> SampleBatch:
    """[T, B, ...] rollout tensors -> [N = T * B, ...] samples for the actor."""
    t, b = adv.loss_mask.shape
    assert batch.logprobs is not None, "the rollout's model-side fields are needed to train on it"
    with_critic = adv.returns is not None and batch.values is not None
    return SampleBatch(
        forward_inputs={k: v.reshape(t * b, *v.shape[2:]) for k, v in batch.forward_inputs.items()},
        old_logprobs=batch.logprobs.reshape(t * b, *batch.logprobs.shape[2:]),
        advantages=adv.advantages.reshape(t * b, *adv.advantages.shape[2:]),
        mask=adv.loss_mask.reshape(-1),
        action_mask=adv.action_mask.reshape(t * b, -1),
        sample_weight=None if adv.sample_weight is None else adv.sample_weight.reshape(-1),
        old_values=batch.values.reshape(-1) if with_critic else None,
        returns=adv.returns.reshape(-1) if with_critic else None,
    )
