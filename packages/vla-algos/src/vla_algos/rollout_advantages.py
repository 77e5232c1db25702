"""The advantage side of one update in one call: estimator, reward filter per group of rows, normalisation, the
executed-action mask and the ``loss_agg_mode`` weights, with the statistics a trainer logs.

A trainer hands in a chunked rollout (shapes of :mod:`vla_algos.estimators`) and the ``algorithm`` settings as
keywords; nothing here knows about configs, envs or models. This is the arithmetic the parity tests hold against the
reference framework's actor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from vla_algos.estimators import chunk_done, normalize_advantages, rollout_action_mask
from vla_algos.grpo import first_episode_scores, labelled_reward_filter
from vla_algos.registry import get_advantage_estimator, get_loss_agg_mode

GROUP_MODES = ("none", "center", "whiten")


@dataclass
class RolloutAdvantages:
    """What :func:`rollout_advantages` returns.

    Attributes:
        advantages: ``[T, B]`` (chunk level) or ``[T, B, C]`` (action level), normalised and masked.
        returns: ``[T, B]`` value targets, or None (no critic).
        loss_mask: bool ``[T, B]`` decisions that enter the loss.
        action_mask: bool ``[T, B, C]`` actions the env executed.
        sample_weight: ``[T, B]`` weight of each loss entry of a decision (``loss_agg_mode``), or None (uniform).
        stats: scalar diagnostics, keys without a prefix (``advantages_mean``, ``scores_mean``, ...).
        stat_weights: how many entries each of ``stats`` averages (to join the stats of several ranks).
    """

    advantages: torch.Tensor
    returns: torch.Tensor | None
    loss_mask: torch.Tensor
    action_mask: torch.Tensor
    sample_weight: torch.Tensor | None
    stats: dict[str, float] = field(default_factory=dict)
    stat_weights: dict[str, float] = field(default_factory=dict)


def rollout_advantages(
    *,
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    loss_mask: torch.Tensor,
    values: torch.Tensor | None,
    last_values: torch.Tensor,
    final_values: torch.Tensor,
    adv_type: str,
    gamma: float,
    gae_lambda: float,
    reward_type: str,
    logprob_type: str,
    group_size: int,
    loss_agg_mode: str,
    normalize: bool,
    whiten_std_eps: float | None = 1e-5,
    reward_bounds: tuple[float, float] | None = None,
    groups: torch.Tensor | None = None,
    num_groups: int | None = None,
    group_mode: str = "none",
    discount_scores: bool = False,
    normalize_returns: bool = False,
    bootstrap_truncated: bool = True,
    all_reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> RolloutAdvantages:
    """Advantages, value targets, masks and loss weights of one rollout.

    Args:
        rewards, terminated, truncated, loss_mask, values, last_values, final_values: the chunked rollout
            (:mod:`vla_algos.estimators`); ``values`` None without a critic.
        adv_type: the registered estimator (``gae``, ``grpo``).
        gamma, gae_lambda, reward_type, group_size: the estimator's settings.
        logprob_type: where the ratio is taken (``token_level``, ``action_level``, ``chunk_level``): with a ratio
            per action or token an episode's ``loss_agg_mode`` weight is spread over its executed actions.
        loss_agg_mode: the registered aggregation mode.
        normalize: whiten the advantages over the rollout (not those of a ``group_normalized`` estimator, GRPO,
            as in the reference framework).
        whiten_std_eps: divide by ``std + whiten_std_eps`` (None: by ``sqrt(var + 1e-8)``).
        reward_bounds: ``(lower, upper)`` of the reward filter, or None. A grouped-starts estimator (GRPO) drops its
            groups of ``group_size`` envs itself; otherwise (PPO) the rows are grouped by ``groups`` (e.g. by task)
            and a group whose mean first-episode score is outside the bounds gets zero advantages (its rows still
            train the critic).
        groups, num_groups: int64 ``[B]`` group of each env row (numbered alike on every rank) and how many, for
            ``group_mode`` and the PPO reward filter; None: no groups.
        group_mode: ``none``, ``center`` (subtract each group's mean; ``normalize`` then divides by the rollout's std)
            or ``whiten`` (each group by its own mean and std).
        discount_scores: the filter's (and GRPO's) episode score is ``sum(gamma**t * reward)`` instead of the sum.
        normalize_returns: whiten the value targets.
        bootstrap_truncated: False: a timed-out episode is not bootstrapped from its final observation's value.
        all_reduce: the rollout is one data-parallel rank's whole rows; sums a tensor over the ranks (whitening and
            the group filter then use the whole rollout's statistics).

    Raises:
        ValueError: unknown names, a critic-based estimator without ``values``, a PPO reward filter or a
            ``group_mode`` without ``groups``.
    """
    if group_mode not in GROUP_MODES:
        raise ValueError(
            f"rollout_advantages: group_mode={group_mode!r} is not one of: {', '.join(GROUP_MODES)}"
        )
    estimator = get_advantage_estimator(adv_type)
    if estimator.needs_values and values is None:
        raise ValueError(f"rollout_advantages: adv_type={adv_type!r} needs `values` (a critic)")
    if group_mode != "none" and (groups is None or num_groups is None):
        raise ValueError(f"rollout_advantages: group_mode={group_mode!r} needs `groups` and `num_groups`")
    est = estimator(
        rewards=rewards,
        # a timed-out episode that is not bootstrapped ends like a terminated one
        terminated=terminated if bootstrap_truncated else terminated | truncated,
        truncated=truncated,
        loss_mask=loss_mask,
        values=values,
        last_values=last_values,
        final_values=final_values,
        gamma=gamma,
        gae_lambda=gae_lambda,
        reward_type=reward_type,
        group_size=group_size,
        reward_bounds=reward_bounds,
        discount_scores=discount_scores,
        normalize_returns=normalize_returns,
    )
    mask = est.loss_mask
    stats = dict(est.stats)
    action_mask = rollout_action_mask(terminated, truncated)
    done = chunk_done(terminated, truncated)
    keep_rows = None
    if reward_bounds is not None and not estimator.grouped_starts:
        if groups is None or num_groups is None:
            raise ValueError(
                f"rollout_advantages: a reward filter with adv_type={adv_type!r} needs the rows grouped (`groups`)"
            )
        scores = first_episode_scores(rewards.sum(-1), done, gamma=gamma if discount_scores else 1.0)
        keep_rows = labelled_reward_filter(
            scores, groups, num_groups, lower=reward_bounds[0], upper=reward_bounds[1], all_reduce=all_reduce
        )
        stats["kept_group_fraction"] = float(keep_rows.float().mean())
        stats["scores_mean"] = float(scores.mean())
    use_groups = group_mode != "none"
    advantages = normalize_advantages(
        est.advantages,
        mask if keep_rows is None else mask & keep_rows[None, :],
        action_mask,
        whiten=normalize and not estimator.group_normalized,
        all_reduce=all_reduce,
        groups=groups if use_groups else None,
        num_groups=num_groups if use_groups else None,
        group_mode="whiten" if not use_groups else group_mode,
        std_eps=whiten_std_eps,
    )
    if keep_rows is not None:
        advantages = advantages * keep_rows.view((1, -1) + (1,) * (advantages.ndim - 2)).to(advantages.dtype)
    rows = float(rewards.shape[1])
    weights = {k: rows for k in stats}  # the estimator's and the filter's statistics: per env row
    sel_mask = mask if advantages.ndim == 2 else mask[..., None] & action_mask
    sel = advantages[sel_mask] if sel_mask.any() else advantages.reshape(-1)[:1] * 0
    n_sel = float(sel_mask.sum())
    stats.update(
        {
            "advantages_mean": float(sel.mean()),
            "advantages_max": float(sel.max()),
            "advantages_min": float(sel.min()),
            "rewards": float(rewards.sum(-1)[loss_mask].mean()),
            "num_samples": float(mask.sum()),
        }
    )
    weights.update(
        {
            "advantages_mean": n_sel,
            "advantages_max": n_sel,
            "advantages_min": n_sel,
            "rewards": float(loss_mask.sum()),
            "num_samples": rows,
        }
    )
    if est.returns is not None:
        r = est.returns[mask]
        stats.update(
            {"returns_mean": float(r.mean()), "returns_max": float(r.max()), "returns_min": float(r.min())}
        )
        weights.update({f"returns_{k}": float(mask.sum()) for k in ("mean", "max", "min")})
    # a ratio per action or per token has one loss entry per executed action (times the action's tokens, the same
    # for every action): an episode's weight is spread over those, not over its decisions
    entries = None if logprob_type == "chunk_level" else action_mask.sum(-1)
    sample_weight = get_loss_agg_mode(loss_agg_mode)(mask, done, entries=entries)
    return RolloutAdvantages(
        advantages=advantages,
        returns=est.returns,
        loss_mask=mask,
        action_mask=action_mask,
        sample_weight=sample_weight,
        stats=stats,
        stat_weights=weights,
    )
