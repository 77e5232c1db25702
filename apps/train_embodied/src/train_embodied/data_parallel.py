"""Data-parallel bookkeeping of the actor's update: where a rollout's samples live, what the ranks tell each other
before the update, which samples each rank trains on, and the whole rollout's statistics from the ranks' parts.

The actor group has one process per rank (`cluster.component_placement`, Ray backend). Each rank holds only its
data-parallel share of the rollout (whole env rows; `train_embodied.trajectories`). The ranks exchange the small
per-sample loss masks and weights (`SampleLayout`, from every rank's `RankSummary` in one gather), so all of them
draw the same minibatches of the whole rollout with the same shuffle seed, exactly as one process would; rank r
trains on the minibatch's samples it holds (`micro_batches`). With one rank nothing here changes the single-process
arithmetic. The collectives themselves are `vla_infra.dist`'s; FSDP wrapping is `train_embodied.sharding`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from train_embodied.batches import SampleBatch
from train_embodied.numerics import nonfinite_inputs
from vla_infra import gather_objects


@dataclass
class SampleLayout:
    """The N = T * B samples of a rollout whose env rows are spread over data-parallel ranks (time-major sample
    order, as one process flattens the whole rollout: sample t * B + b).

    Attributes:
        owner: int64 [N] the rank holding each sample.
        local: int64 [N] its index in that rank's `SampleBatch`.
        mask: bool [N] samples that enter the loss.
        sample_weight: float32 [N] loss weights of `loss_agg_mode`, or None.
        action_mask: bool [N, C] executed actions, or None.
    """

    owner: torch.Tensor
    local: torch.Tensor
    mask: torch.Tensor
    sample_weight: torch.Tensor | None
    action_mask: torch.Tensor | None


@dataclass
class RankSamples:
    """One rank's flattened samples of the rollout ([T * b], time-major), as the other ranks need them to lay out
    the whole rollout (`sample_layout`): its first env row (its rows are contiguous), its number of rows, and each
    sample's loss mask [T * b], `loss_agg_mode` weight [T * b] (or None) and executed actions [T * b, C] (or None)."""

    first_row: int
    num_rows: int
    mask: torch.Tensor
    sample_weight: torch.Tensor | None
    action_mask: torch.Tensor | None


def sample_layout(parts: list[RankSamples], num_steps: int) -> SampleLayout:
    """The layout of the whole rollout from every rank's `RankSamples` (in rank order; num_steps: T, the same on
    every rank)."""
    total = sum(p.num_rows for p in parts)
    n = num_steps * total
    first = parts[0]
    owner = torch.empty(n, dtype=torch.long)
    local = torch.empty(n, dtype=torch.long)
    g_mask = torch.empty(n, dtype=torch.bool)
    g_weight = None if first.sample_weight is None else torch.empty(n, dtype=first.sample_weight.dtype)
    g_action = (
        None if first.action_mask is None else torch.empty(n, *first.action_mask.shape[1:], dtype=torch.bool)
    )
    t = torch.arange(num_steps)[:, None]
    for rank, p in enumerate(parts):
        where = (t * total + p.first_row + torch.arange(p.num_rows)[None, :]).reshape(-1)  # sample t * B + b
        owner[where] = rank
        local[where] = torch.arange(len(where))
        g_mask[where] = p.mask
        if g_weight is not None:
            g_weight[where] = p.sample_weight
        if g_action is not None:
            g_action[where] = p.action_mask
    return SampleLayout(owner=owner, local=local, mask=g_mask, sample_weight=g_weight, action_mask=g_action)


@dataclass
class RankSummary:
    """What an actor rank tells the others about its share of a rollout before the update, in one gather
    (`vla_infra.gather_objects`).

    Attributes:
        stats, stat_weights: its rollout statistics and how many entries each averages (`combine_rank_stats`).
        nonfinite: its update inputs that hold NaN/inf (`numerics.nonfinite_inputs`): any rank's skip every rank.
        samples: where its samples are in the whole rollout, with their loss weights (`sample_layout`).
        critic: the recorded values and the value targets of its loss samples ([n], [n]; the critic's explained
            variance over the whole rollout), or None without a critic.
    """

    stats: dict[str, float]
    stat_weights: dict[str, float]
    nonfinite: list[str]
    samples: RankSamples
    critic: tuple[torch.Tensor, torch.Tensor] | None


def rank_summary(
    samples: SampleBatch,
    stats: dict[str, float],
    stat_weights: dict[str, float],
    *,
    first_row: int,
    num_steps: int,
) -> RankSummary:
    """This rank's `RankSummary` of its flattened samples ([T * b], `num_steps` = T) and their statistics."""
    m = samples.mask
    critic = None
    if samples.old_values is not None and samples.returns is not None:
        critic = (samples.old_values[m], samples.returns[m])
    return RankSummary(
        stats=stats,
        stat_weights=stat_weights,
        nonfinite=nonfinite_inputs(samples),
        samples=RankSamples(
            first_row=first_row,
            num_rows=len(m) // max(num_steps, 1),
            mask=m,
            sample_weight=samples.sample_weight,
            action_mask=samples.action_mask,
        ),
        critic=critic,
    )


def minibatch_share(minibatch: torch.Tensor, layout: SampleLayout | None, rank: int) -> torch.Tensor:
    """This rank's samples of a minibatch (sample indices of the whole rollout), as indices of its own
    `SampleBatch`; the minibatch itself without a layout (one rank holds everything)."""
    if layout is None:
        return minibatch
    return layout.local[minibatch[layout.owner[minibatch] == rank]]


def num_micro_batches(minibatch: torch.Tensor, layout: SampleLayout | None, micro_batch_size: int) -> int:
    """Forward/backward passes per rank for one minibatch: the most any rank needs for its samples of it, so
    every rank runs as many (FSDP collectives must match)."""
    if layout is None:
        return math.ceil(len(minibatch) / micro_batch_size)
    counts = torch.bincount(layout.owner[minibatch], minlength=1)
    return math.ceil(int(counts.max()) / micro_batch_size)


def micro_batches(
    minibatch: torch.Tensor, layout: SampleLayout | None, rank: int, micro_batch_size: int
) -> list[torch.Tensor]:
    """This rank's micro-batches of a minibatch (sample indices of the whole rollout), as indices of its own
    `SampleBatch`: as many on every rank (`num_micro_batches`; FSDP collectives must match), an empty one where this
    rank has no samples left (a padding pass that counts for nothing)."""
    share = minibatch_share(minibatch, layout, rank)
    count = num_micro_batches(minibatch, layout, micro_batch_size)
    return [share[i * micro_batch_size : (i + 1) * micro_batch_size] for i in range(count)]


def task_groups(local_ids: torch.Tensor, all_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(group of each of `local_ids` [b], number of groups), the groups numbered by the sorted distinct task ids of
    `all_ids` (every rank's rows): the same numbering on every data-parallel rank."""
    uniq = torch.unique(all_ids)
    return torch.searchsorted(uniq, local_ids), len(uniq)


def rank_task_groups(task_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(group of each of this rank's rows [b], number of groups) for `algorithm.per_task_advantages`, numbered by the
    sorted distinct task ids of every rank's rows: the same numbering on every rank (a collective)."""
    return task_groups(task_ids, torch.cat(gather_objects(task_ids)))


def combine_rank_stats(parts: list[tuple[dict[str, float], dict[str, float]]]) -> dict[str, float]:
    """The rollout statistics of the whole rollout from each rank's (stats, weights): `*_max` / `*_min` the
    max / min, `*num_samples` the sum, the rest weighted means (each key's weight: the entries it averages)."""
    if len(parts) == 1:
        return dict(parts[0][0])
    out: dict[str, float] = {}
    for key in parts[0][0]:
        if key.endswith("num_samples"):
            out[key] = float(sum(p[0][key] for p in parts))
            continue
        # a rank without entries for a statistic (e.g. no decision in the loss) has nothing to add to it
        kept = [(p[0][key], p[1].get(key, 1.0)) for p in parts if p[1].get(key, 1.0) > 0]
        if not kept:
            out[key] = parts[0][0][key]
        elif key.endswith("_max"):
            out[key] = max(v for v, _ in kept)
        elif key.endswith("_min"):
            out[key] = min(v for v, _ in kept)
        else:
            out[key] = float(sum(v * w for v, w in kept) / sum(w for _, w in kept))
    return out
