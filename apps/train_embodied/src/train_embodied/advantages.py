"""Advantages of a rollout: GAE (PPO, with a critic) or group-relative scores (GRPO), via vla_algos.

`reward_type` says what one transition is: `chunk_level` sums the rewards of a chunk (one transition per
decision); `action_level` keeps one transition per action of the chunk (the chunk's value is reused for
its positions). Output advantages are [T, B] (chunk level) or [T, B, C] (action level).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from train_embodied.config.sections import AlgorithmSection
from train_embodied.rollout import RolloutBatch
from vla_algos import (
    compute_gae,
    compute_grpo_advantages,
    executed_action_mask,
    first_episode_mask,
    first_episode_scores,
    group_reward_filter,
    masked_whiten,
)


@dataclass
class Advantages:
    """advantages [T, B] or [T, B, C]; returns [T, B] value targets (None without a critic);
    loss_mask bool [T, B]; action_mask bool [T, B, C]: actions the env executed (an episode that ends inside
    a chunk ignores the chunk's later actions: they get no gradient); stats for logging."""

    advantages: torch.Tensor
    returns: torch.Tensor | None
    loss_mask: torch.Tensor
    action_mask: torch.Tensor
    stats: dict[str, float]
    sample_weight: torch.Tensor | None = None


def episode_mean_weights(loss_mask: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
    """Per-decision loss weights [T, B] that give every episode (segment of a column up to a `done`) the same
    total weight: 1 / its number of masked decisions, scaled so the weights average 1 over the mask.

    With the default token-mean, a failed 50-decision episode outweighs a successful 18-decision one almost 3:1
    (`algorithm.loss_agg_mode=seq-mean-token-mean` removes that length bias).
    """
    b = loss_mask.shape[1]
    seg = torch.cumsum(done.to(torch.int64), dim=0) - done.to(torch.int64)  # episode index within its column
    ids = seg + (seg.max() + 1) * torch.arange(b)[None, :]
    mask = loss_mask.to(torch.float32)
    counts = torch.zeros(int(ids.max()) + 1).index_add_(0, ids.reshape(-1), mask.reshape(-1))
    per = counts[ids]
    weights = torch.where(per > 0, mask / per.clamp(min=1), torch.zeros_like(mask))
    total = weights.sum()
    return weights * (mask.sum() / total) if total > 0 else weights


def _next_values(batch: RolloutBatch, done: torch.Tensor) -> torch.Tensor:
    """V of the state after each decision: the next decision's value, V(final obs) where an episode ended."""
    assert batch.values is not None
    nxt = torch.cat([batch.values[1:], batch.last_values[None]], dim=0)
    return torch.where(done, batch.final_values, nxt)


def gae_advantages(batch: RolloutBatch, algo: AlgorithmSection) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over the rollout; returns (advantages, returns) at the granularity of `algo.reward_type`."""
    if batch.values is None:
        raise ValueError("algorithm.adv_type='gae' needs values: set actor.model.add_value_head=true")
    terminated_c, truncated_c = batch.terminated.any(-1), batch.truncated.any(-1)
    done_c = terminated_c | truncated_c
    next_values = _next_values(batch, done_c)
    if algo.reward_type == "chunk_level":
        return compute_gae(
            batch.rewards.sum(-1),
            batch.values,
            next_values,
            terminated_c,
            done_c,
            gamma=algo.gamma,
            lam=algo.gae_lambda,
        )
    # action_level: time index t * C + c; inside a chunk the next state's value is the chunk's own value.
    t, b, c = batch.rewards.shape
    values = batch.values[:, None, :].expand(t, c, b).clone()
    nxt = values.clone()
    nxt[:, -1] = next_values
    term = batch.terminated.permute(0, 2, 1)
    done = term | batch.truncated.permute(0, 2, 1)
    nxt = torch.where(done, batch.final_values[:, None, :].expand(t, c, b), nxt)
    adv, ret = compute_gae(
        batch.rewards.permute(0, 2, 1).reshape(t * c, b),
        values.reshape(t * c, b),
        nxt.reshape(t * c, b),
        term.reshape(t * c, b),
        done.reshape(t * c, b),
        gamma=algo.gamma,
        lam=algo.gae_lambda,
    )
    return adv.reshape(t, c, b).permute(0, 2, 1), ret.reshape(t, c, b)[:, 0]


def compute_advantages(batch: RolloutBatch, algo: AlgorithmSection) -> Advantages:
    """Advantages, value targets and the loss mask of one rollout (see module docstring)."""
    done = batch.terminated.any(-1) | batch.truncated.any(-1)
    stats: dict[str, float] = {}
    if algo.adv_type == "gae":
        advantages, returns = gae_advantages(batch, algo)
        loss_mask = batch.loss_mask.clone()
    else:
        scores = first_episode_scores(batch.rewards.sum(-1), done, gamma=algo.gamma)
        advantages = compute_grpo_advantages(scores, group_size=algo.group_size)
        loss_mask = first_episode_mask(done) & batch.loss_mask
        if algo.filter_rewards:
            keep = group_reward_filter(
                scores,
                group_size=algo.group_size,
                lower=algo.rewards_lower_bound,
                upper=algo.rewards_upper_bound,
            )
            loss_mask = loss_mask & keep[None, :]
            stats["rollout/kept_group_fraction"] = float(keep.float().mean())
        advantages = advantages[None, :].expand_as(loss_mask).clone()
        returns = None
        stats["rollout/scores_mean"] = float(scores.mean())
    action_mask = executed_action_mask(batch.terminated | batch.truncated)
    if algo.normalize_advantages and loss_mask.any():
        mask = loss_mask if advantages.ndim == 2 else loss_mask[..., None] & action_mask
        advantages = masked_whiten(advantages, mask)
    if advantages.ndim == 3:  # action level: advantages of unexecuted actions are meaningless
        advantages = advantages * action_mask
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
    if returns is not None:
        r = returns[loss_mask]
        stats.update(
            {
                "rollout/returns_mean": float(r.mean()),
                "rollout/returns_max": float(r.max()),
                "rollout/returns_min": float(r.min()),
            }
        )
    weight = episode_mean_weights(loss_mask, done) if algo.loss_agg_mode == "seq-mean-token-mean" else None
    return Advantages(
        advantages=advantages,
        returns=returns,
        loss_mask=loss_mask,
        action_mask=action_mask,
        stats=stats,
        sample_weight=weight,
    )
