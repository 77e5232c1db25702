"""Advantage estimators over chunked rollouts (``adv_type``), one registered function each.

A rollout of ``T`` policy decisions in ``B`` envs, each decision a chunk of ``C`` actions:

- ``rewards`` float ``[T, B, C]``, ``terminated`` / ``truncated`` bool ``[T, B, C]`` per executed action;
- ``loss_mask`` bool ``[T, B]``: decisions taken inside an episode;
- with a critic: ``values`` ``[T, B]`` (V at each decision), ``last_values`` ``[B]`` (V of the observation after
  the last decision), ``final_values`` ``[T, B]`` (V of the final observation of an episode that ended at
  decision ``t``; truncation bootstraps from it, termination does not).

Every estimator is called with all of these and every hyper-parameter as keywords (``gamma``,
``gae_lambda``, ``reward_type``, ``group_size``, ``reward_bounds``, ``discount_scores``, ``normalize_returns``)
and ignores what it does not use. It
returns :class:`EstimatedAdvantages`. :func:`normalize_advantages` then whitens and masks them the same way
for every estimator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from vla_algos.gae import compute_gae
from vla_algos.granularity import executed_action_mask
from vla_algos.grpo import (
    compute_grpo_advantages,
    first_episode_mask,
    first_episode_scores,
    group_reward_filter,
)
from vla_algos.masked import masked_group_whiten, masked_whiten


@dataclass
class EstimatedAdvantages:
    """What an estimator returns.

    Attributes:
        advantages: ``[T, B]`` (one per decision) or ``[T, B, C]`` (one per action, ``reward_type=action_level``).
        returns: ``[T, B]`` value targets, or None (no critic).
        loss_mask: bool ``[T, B]`` decisions that enter the loss.
        stats: scalar diagnostics (keys without a prefix, e.g. ``scores_mean``).
    """

    advantages: torch.Tensor
    returns: torch.Tensor | None
    loss_mask: torch.Tensor
    stats: dict[str, float] = field(default_factory=dict)


def chunk_done(terminated: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """bool ``[T, B]``: an episode ended during decision ``t`` (any action of the chunk terminated or truncated)."""
    return terminated.any(-1) | truncated.any(-1)


def chunked_gae(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    values: torch.Tensor,
    last_values: torch.Tensor,
    final_values: torch.Tensor,
    *,
    level: str,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over a chunked rollout at the granularity ``level`` (``reward_type``).

    ``chunk_level``: one transition per decision, rewards summed over the chunk, flags OR-ed.
    ``action_level``: one transition per action (time ``t * C + c``); inside a chunk the next state's value is
    the chunk's own value (the critic sees one observation per decision).

    Args:
        rewards: ``[T, B, C]`` (see the module docstring, as for the arguments below).
        terminated: ``[T, B, C]``.
        truncated: ``[T, B, C]``.
        values: ``[T, B]``.
        last_values: ``[B]``.
        final_values: ``[T, B]``.
        level: ``chunk_level`` or ``action_level``.
        gamma: GAE discount.
        lam: GAE trace decay.

    Returns:
        ``(advantages, returns)``: ``[T, B]`` and ``[T, B]`` (chunk level) or ``[T, B, C]`` and ``[T, B]``
        (action level: the return of the chunk's first action, the target of its one value).
    """
    terminated_c, truncated_c = terminated.any(-1), truncated.any(-1)
    done_c = terminated_c | truncated_c
    nxt_decision = torch.cat([values[1:], last_values[None]], dim=0)
    next_values = torch.where(done_c, final_values, nxt_decision)
    if level == "chunk_level":
        return compute_gae(rewards.sum(-1), values, next_values, terminated_c, done_c, gamma=gamma, lam=lam)
    if level != "action_level":
        raise ValueError(f"chunked_gae: unknown `level` {level!r}; valid: action_level, chunk_level")
    t, b, c = rewards.shape
    vals = values[:, None, :].expand(t, c, b).clone()
    nxt = vals.clone()
    nxt[:, -1] = next_values
    term = terminated.permute(0, 2, 1)
    done = term | truncated.permute(0, 2, 1)
    nxt = torch.where(done, final_values[:, None, :].expand(t, c, b), nxt)
    adv, ret = compute_gae(
        rewards.permute(0, 2, 1).reshape(t * c, b),
        vals.reshape(t * c, b),
        nxt.reshape(t * c, b),
        term.reshape(t * c, b),
        done.reshape(t * c, b),
        gamma=gamma,
        lam=lam,
    )
    return adv.reshape(t, c, b).permute(0, 2, 1), ret.reshape(t, c, b)[:, 0]


def gae_estimator(
    *,
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    loss_mask: torch.Tensor,
    values: torch.Tensor | None,
    last_values: torch.Tensor,
    final_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    reward_type: str,
    normalize_returns: bool = False,
    **unused: Any,
) -> EstimatedAdvantages:
    """``adv_type: gae``: GAE with the critic's values (PPO), at ``reward_type`` granularity.

    ``normalize_returns``: the value targets are whitened over ``loss_mask`` (``(r - mean) / (std + 1e-5)``, the
    reference framework's ``normalize_returns``); the advantages are not changed by it."""
    del unused
    if values is None:
        raise ValueError("adv_type 'gae' needs the critic's `values` (a policy with a value head)")
    adv, ret = chunked_gae(
        rewards,
        terminated,
        truncated,
        values,
        last_values,
        final_values,
        level=reward_type,
        gamma=gamma,
        lam=gae_lambda,
    )
    if normalize_returns and loss_mask.any():
        ret = masked_whiten(ret, loss_mask, std_eps=1e-5)
    return EstimatedAdvantages(advantages=adv, returns=ret, loss_mask=loss_mask.clone())


def grpo_estimator(
    *,
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    loss_mask: torch.Tensor,
    gamma: float,
    group_size: int,
    reward_bounds: tuple[float, float] | None = None,
    discount_scores: bool = False,
    **unused: Any,
) -> EstimatedAdvantages:
    """``adv_type: grpo``: each env's first-episode score against its group of ``group_size`` consecutive envs
    that started from the same state; every decision of that episode gets the advantage.

    The score is the episode's summed reward (the reference framework's); ``discount_scores=True`` sums
    ``gamma**t * reward`` instead (over decisions), so that of two successes the faster one scores higher.

    ``reward_bounds=(lower, upper)`` drops the groups whose mean score lies outside (all-fail / all-success
    groups carry no signal; stat ``kept_group_fraction``). Stat ``scores_mean``: mean score.
    """
    del unused
    done = chunk_done(terminated, truncated)
    scores = first_episode_scores(rewards.sum(-1), done, gamma=gamma if discount_scores else 1.0)
    advantages = compute_grpo_advantages(scores, group_size=group_size)
    mask = first_episode_mask(done) & loss_mask
    stats: dict[str, float] = {}
    if reward_bounds is not None:
        keep = group_reward_filter(
            scores, group_size=group_size, lower=reward_bounds[0], upper=reward_bounds[1]
        )
        mask = mask & keep[None, :]
        stats["kept_group_fraction"] = float(keep.float().mean())
    stats["scores_mean"] = float(scores.mean())
    return EstimatedAdvantages(
        advantages=advantages[None, :].expand_as(mask).clone(), returns=None, loss_mask=mask, stats=stats
    )


def normalize_advantages(
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    whiten: bool,
    all_reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    groups: torch.Tensor | None = None,
    num_groups: int | None = None,
    group_mode: str = "whiten",
    std_eps: float | None = None,
) -> torch.Tensor:
    """Whiten (optionally) over the decisions and executed actions that enter the loss, then zero the
    advantages of actions the env never executed (action level).

    Args:
        advantages: ``[T, B]`` or ``[T, B, C]``.
        loss_mask: bool ``[T, B]``.
        action_mask: bool ``[T, B, C]`` (:func:`vla_algos.executed_action_mask` of the done flags).
        whiten: subtract the masked mean and divide by the masked std.
        all_reduce: the rollout is spread over data-parallel ranks: sums a tensor over them, so the whitening
            statistics are those of the whole rollout (:func:`vla_algos.masked_whiten`).
        groups: int64 ``[B]`` in ``[0, num_groups)``: groups of env columns (e.g. one per task) whose advantages
            are normalised apart (:func:`vla_algos.masked_group_whiten`), so that each group's advantages have zero
            mean: a task the critic over- or under-rates does not push the policy as a whole. None: no groups.
        num_groups: the number of groups (needed with ``groups``).
        group_mode: ``whiten``: each group by its own mean and std (``whiten`` is then implied); ``center``: each
            group's mean is subtracted, then ``whiten`` (if set) divides by the std of the whole rollout, so a group
            without signal (all failures, its advantages the critic's noise) is not scaled up to the others'.

    Returns:
        Advantages of the same shape.
    """
    if group_mode not in ("whiten", "center"):
        raise ValueError(f"normalize_advantages: group_mode={group_mode!r} is not one of: whiten, center")
    if groups is not None and num_groups is None:
        raise ValueError("normalize_advantages: `groups` needs `num_groups`")
    if all_reduce is not None or loss_mask.any():
        mask = loss_mask if advantages.ndim == 2 else loss_mask[..., None] & action_mask
        if groups is not None and num_groups is not None:
            per_group_scale = group_mode == "whiten"
            advantages = masked_group_whiten(
                advantages, mask, groups, num_groups, scale=per_group_scale, all_reduce=all_reduce
            )
            whiten = whiten and not per_group_scale
        if whiten:
            advantages = masked_whiten(advantages, mask, all_reduce=all_reduce, std_eps=std_eps)
    if advantages.ndim == 3:  # action level: advantages of unexecuted actions are meaningless
        advantages = advantages * action_mask
    return advantages


def rollout_action_mask(terminated: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """bool ``[T, B, C]``: actions the env executed (an episode that ends inside a chunk skips its rest)."""
    return executed_action_mask(terminated | truncated)
