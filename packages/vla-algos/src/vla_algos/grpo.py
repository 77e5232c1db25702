"""Group-relative advantages (GRPO, Shao et al. 2024, arXiv:2402.03300) and group filtering.

A *group* is ``group_size`` consecutive entries of a flat batch of trajectory scores: the envs that were
reset to the same initial state (``reset_state_ids`` repeated ``group_size`` times).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from vla_algos._checks import check_bool, check_finite, check_float, check_same_shape


def _grouped(
    fn: str, scores: torch.Tensor, group_size: int, check_finite_values: bool = False
) -> torch.Tensor:
    check_float(fn, "scores", scores)
    if scores.ndim != 1:
        raise ValueError(
            f"{fn}: `scores` must have shape [N] (one score per trajectory), got {tuple(scores.shape)}"
        )
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"{fn}: `group_size` must be a positive int, got {group_size!r}")
    if scores.shape[0] % group_size != 0:
        raise ValueError(
            f"{fn}: `group_size`={group_size} does not divide the batch: `scores` has {scores.shape[0]} entries"
        )
    if check_finite_values:
        check_finite(fn, scores=scores)
    return scores.view(-1, group_size)


def compute_grpo_advantages(
    scores: torch.Tensor,
    *,
    group_size: int,
    eps: float = 1e-6,
    normalize_by_std: bool = True,
    check_finite: bool = False,
) -> torch.Tensor:
    """Advantage of each trajectory relative to its group.

    ``adv = (score - mean(group)) / (std(group) + eps)`` with the unbiased (Bessel-corrected) std, as in
    verl's and RLinf's GRPO; ``normalize_by_std=False`` gives ``score - mean(group)`` (Dr. GRPO).

    Args:
        scores: ``[N]`` float, one score per trajectory, ``N = num_groups * group_size``; group ``g`` is
            ``scores[g * group_size:(g + 1) * group_size]``.
        group_size: trajectories per group (>= 2 when ``normalize_by_std``: one sample has no std).
        eps: added to the std (a group of equal scores gets advantage 0, not NaN).
        normalize_by_std: divide by the group std.
        check_finite: raise ``ValueError`` if ``scores`` holds NaN or infinity.

    Returns:
        ``[N]`` advantages, same dtype as ``scores``. Broadcast it over each trajectory's steps (with a loss
        mask) yourself: e.g. ``adv[None, :].expand(T, N)`` for time-major data.

    Raises:
        ValueError: ``scores`` not 1-d, ``group_size`` not dividing ``N`` or < 2 with ``normalize_by_std``.
    """
    fn = "compute_grpo_advantages"
    groups = _grouped(fn, scores, group_size, check_finite)
    if normalize_by_std and group_size < 2:
        raise ValueError(f"{fn}: `group_size` must be >= 2 when normalize_by_std=True, got {group_size}")
    centered = groups - groups.mean(dim=1, keepdim=True)
    if normalize_by_std:
        centered = centered / (groups.std(dim=1, keepdim=True) + eps)
    return centered.reshape(-1)


def group_reward_filter(scores: torch.Tensor, *, group_size: int, lower: float, upper: float) -> torch.Tensor:
    """Keep mask of groups whose mean score lies in ``[lower, upper]`` (inclusive).

    Drops groups with no learning signal, e.g. all-fail (mean 0) and all-success (mean = max) groups with
    bounds just inside them (RLinf's ``filter_rewards`` with ``rewards_lower_bound/upper_bound``,
    SimpleVLA-RL's ``filter_accuracy``).

    Args:
        scores: ``[N]`` float, ``N = num_groups * group_size``, consecutive groups.
        group_size: trajectories per group.
        lower: smallest kept group mean.
        upper: largest kept group mean (>= ``lower``).

    Returns:
        ``[N]`` bool, the same value for every member of a group.
    """
    fn = "group_reward_filter"
    groups = _grouped(fn, scores, group_size)
    if not lower <= upper:
        raise ValueError(f"{fn}: `lower` ({lower!r}) must be <= `upper` ({upper!r})")
    means = groups.mean(dim=1, keepdim=True)
    keep = (means >= lower) & (means <= upper)
    return keep.expand_as(groups).reshape(-1)


def labelled_reward_filter(
    scores: torch.Tensor,
    groups: torch.Tensor,
    num_groups: int,
    *,
    lower: float,
    upper: float,
    all_reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Keep mask of entries whose group's mean score lies in ``[lower, upper]`` (inclusive), the groups given by a
    label per entry instead of by position: :func:`group_reward_filter` for groups such as "the episodes of one
    task in this rollout" (PPO's ``filter_rewards`` with ``per_task_advantages``), where a group whose episodes all
    failed has no outcome contrast and its advantages come from the critic alone.

    Args:
        scores: ``[N]`` float, one score per trajectory.
        groups: int64 ``[N]`` in ``[0, num_groups)``: the group of each trajectory.
        num_groups: how many groups there are (on every process, when ``all_reduce`` is given).
        lower: smallest kept group mean.
        upper: largest kept group mean (>= ``lower``).
        all_reduce: the trajectories are spread over data-parallel processes: sums a tensor over them, so a
            group's mean is that of all its trajectories.

    Returns:
        ``[N]`` bool. A group without an entry anywhere is not kept (there is nothing to keep).
    """
    fn = "labelled_reward_filter"
    check_float(fn, "scores", scores)
    if scores.ndim != 1 or groups.shape != scores.shape:
        raise ValueError(
            f"{fn}: `scores` and `groups` must both have shape [N], got {tuple(scores.shape)} and {tuple(groups.shape)}"
        )
    if groups.numel() and (int(groups.min()) < 0 or int(groups.max()) >= num_groups):
        raise ValueError(f"{fn}: `groups` must lie in [0, num_groups={num_groups})")
    if not lower <= upper:
        raise ValueError(f"{fn}: `lower` ({lower!r}) must be <= `upper` ({upper!r})")
    idx = groups.to(device=scores.device, dtype=torch.long)
    sums = torch.zeros(2, num_groups, dtype=torch.float64, device=scores.device)
    sums[0].index_add_(0, idx, scores.double())
    sums[1].index_add_(0, idx, torch.ones_like(scores, dtype=torch.float64))
    if all_reduce is not None:
        sums = all_reduce(sums)
    means = sums[0] / sums[1].clamp_min(1.0)
    keep = (sums[1] > 0) & (means >= lower) & (means <= upper)
    return keep[idx]


def first_episode_mask(done: torch.Tensor) -> torch.Tensor:
    """Mask of the steps of each column's first episode (up to and including its first ``done``).

    For rollouts without auto-reset, where everything after the first end is padding.

    Args:
        done: ``[T, B]`` bool.

    Returns:
        ``[T, B]`` bool, True for ``t <= first t with done[t]`` (all True in a column that never ends).
    """
    check_bool("first_episode_mask", "done", done)
    if done.ndim != 2:
        raise ValueError(f"first_episode_mask: `done` must have shape [T, B], got {tuple(done.shape)}")
    ended_before = torch.cumsum(done.to(torch.int32), dim=0) - done.to(torch.int32)
    return ended_before == 0


def first_episode_scores(rewards: torch.Tensor, done: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Per-column (discounted) sum of rewards over its first episode: the GRPO trajectory score.

    Args:
        rewards: ``[T, B]`` float; the first episode of every column starts at ``t = 0``.
        done: ``[T, B]`` bool.
        gamma: discount in ``(0, 1]``. 1 (the default) is the plain sum. Below 1, a sparse success reward scores
            higher the sooner it comes, so a group whose episodes all succeed still ranks them by speed.

    Returns:
        ``[B]`` float: ``sum(gamma**t * rewards[t, b] for t <= first done of b)``.
    """
    check_float("first_episode_scores", "rewards", rewards)
    check_same_shape("first_episode_scores", "rewards", rewards, done=done)
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"first_episode_scores: gamma must be in (0, 1], got {gamma}")
    mask = first_episode_mask(done)
    kept = torch.where(mask, rewards, torch.zeros((), dtype=rewards.dtype, device=rewards.device))
    if gamma != 1.0:
        steps = torch.arange(rewards.shape[0], device=rewards.device, dtype=rewards.dtype)
        kept = kept * (gamma**steps)[:, None]
    return kept.sum(dim=0)
