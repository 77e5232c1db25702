"""Advantages of a rollout: the `algorithm.adv_type` estimator registered in vla_algos, then whitening, the
executed-action mask and the `loss_agg_mode` weights (all from vla_algos); this module only feeds the rollout
in and names the logged statistics.

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
from vla_algos import (
    chunk_done,
    first_episode_scores,
    get_advantage_estimator,
    get_loss_agg_mode,
    labelled_reward_filter,
    normalize_advantages,
    rollout_action_mask,
)


@dataclass
class Advantages:
    """advantages [T, B] or [T, B, C]; returns [T, B] value targets (None without a critic);
    loss_mask bool [T, B]; action_mask bool [T, B, C]: actions the env executed (an episode that ends inside
    a chunk ignores the chunk's later actions: they get no gradient); stats for logging; sample_weight [T, B]
    per-decision loss weights of `loss_agg_mode` (None: uniform); stat_weights: how many entries each of `stats`
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
    numbered alike on every rank (`sharding.rank_task_groups`); None: from `batch.task_ids` (this process holds
    every row)."""
    estimator = get_advantage_estimator(algo.adv_type)
    if estimator.needs_values and batch.values is None:
        raise ValueError(
            f"algorithm.adv_type={algo.adv_type!r} needs values: set actor.model.add_value_head=true"
        )
    # bootstrap_truncated=false: a timed-out episode ends like a terminated one (no value after it)
    terminated = batch.terminated if algo.bootstrap_truncated else batch.terminated | batch.truncated
    est = estimator(
        rewards=batch.rewards,
        terminated=terminated,
        truncated=batch.truncated,
        loss_mask=batch.loss_mask,
        values=batch.values,
        last_values=batch.last_values,
        final_values=batch.final_values,
        gamma=algo.gamma,
        gae_lambda=algo.gae_lambda,
        reward_type=algo.reward_type,
        group_size=algo.group_size,
        reward_bounds=(algo.rewards_lower_bound, algo.rewards_upper_bound) if algo.filter_rewards else None,
        discount_scores=algo.discount_scores,
        normalize_returns=algo.normalize_returns,
    )
    loss_mask = est.loss_mask
    stats = {f"rollout/{k}": v for k, v in est.stats.items()}
    action_mask = rollout_action_mask(batch.terminated, batch.truncated)
    groups, num_groups = (None, None)
    if algo.per_task_advantages != "none":
        groups, num_groups = task_groups if task_groups is not None else _task_groups(batch, algo)
    # PPO's filter_rewards (per_task_advantages set, checked by the config): a task whose episodes in this rollout
    # all failed (or all succeeded) leaves the policy alone; its rows still train the critic (loss_mask unchanged)
    keep_rows = None
    if algo.filter_rewards and not estimator.grouped_starts:
        if groups is None or num_groups is None:
            raise ValueError(
                f"algorithm.filter_rewards=True with algorithm.adv_type={algo.adv_type!r} needs the rows grouped by "
                "task: set algorithm.per_task_advantages to center or whiten"
            )
        scores = first_episode_scores(
            batch.rewards.sum(-1),
            chunk_done(batch.terminated, batch.truncated),
            gamma=algo.gamma if algo.discount_scores else 1.0,
        )
        keep_rows = labelled_reward_filter(
            scores,
            groups,
            num_groups,
            lower=algo.rewards_lower_bound,
            upper=algo.rewards_upper_bound,
            all_reduce=all_reduce,
        )
        stats["rollout/kept_group_fraction"] = float(keep_rows.float().mean())
        stats["rollout/scores_mean"] = float(scores.mean())
    advantages = normalize_advantages(
        est.advantages,
        loss_mask if keep_rows is None else loss_mask & keep_rows[None, :],
        action_mask,
        # advantages normalised within their group already (GRPO) are not whitened again, as in the reference
        whiten=algo.normalize_advantages and not estimator.group_normalized,
        all_reduce=all_reduce,
        groups=groups,
        num_groups=num_groups,
        group_mode="whiten" if algo.per_task_advantages == "none" else algo.per_task_advantages,
        std_eps=algo.whiten_std_eps,
    )
    if keep_rows is not None:
        advantages = advantages * keep_rows.view((1, -1) + (1,) * (advantages.ndim - 2)).to(advantages.dtype)
    sel_mask = loss_mask if advantages.ndim == 2 else loss_mask[..., None] & action_mask
    sel = advantages[sel_mask] if sel_mask.any() else advantages.reshape(-1)[:1] * 0
    stats.update(
        {
            "rollout/advantages_mean": float(sel.mean()),
            "rollout/advantages_max": float(sel.max()),
            "rollout/advantages_min": float(sel.min()),
            "rollout/rewards": float(batch.rewards.sum(-1)[batch.loss_mask].mean()),
            "rollout/num_samples": float(loss_mask.sum()),
        }
    )
    rows = float(batch.rewards.shape[1])
    weights = {k: rows for k in stats}  # the estimator's own statistics: per env row
    weights.update(
        {
            "rollout/advantages_mean": float(sel_mask.sum()),
            "rollout/advantages_max": float(sel_mask.sum()),
            "rollout/advantages_min": float(sel_mask.sum()),
            "rollout/rewards": float(batch.loss_mask.sum()),
        }
    )
    if est.returns is not None:
        weights.update({f"rollout/returns_{k}": float(loss_mask.sum()) for k in ("mean", "max", "min")})
        r = est.returns[loss_mask]
        stats.update(
            {
                "rollout/returns_mean": float(r.mean()),
                "rollout/returns_max": float(r.max()),
                "rollout/returns_min": float(r.min()),
            }
        )
    done = chunk_done(batch.terminated, batch.truncated)
    # a ratio per action or per token has one loss entry per executed action (times the action's tokens, the same
    # for every action): an episode's weight is spread over those, not over its decisions
    entries = None if algo.logprob_type == "chunk_level" else action_mask.sum(-1)
    weight = get_loss_agg_mode(algo.loss_agg_mode)(loss_mask, done, entries=entries)
    return Advantages(
        advantages=advantages,
        returns=est.returns,
        loss_mask=loss_mask,
        action_mask=action_mask,
        stats=stats,
        sample_weight=weight,
        stat_weights=weights,
    )


def _task_groups(batch: RolloutBatch, algo: AlgorithmSection) -> tuple[torch.Tensor, int]:
    if batch.task_ids is None:
        raise ValueError(
            f"algorithm.per_task_advantages={algo.per_task_advantages!r} needs each env row's task, which this "
            "rollout did not record (RolloutBatch.task_ids)"
        )
    uniq, inverse = torch.unique(batch.task_ids, return_inverse=True)
    return inverse, len(uniq)


def task_groups(local_ids: torch.Tensor, all_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(group of each of `local_ids` [b], number of groups), the groups numbered by the sorted distinct task ids of
    `all_ids` (every rank's rows): the same numbering on every data-parallel rank."""
    uniq = torch.unique(all_ids)
    return torch.searchsorted(uniq, local_ids), len(uniq)


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
