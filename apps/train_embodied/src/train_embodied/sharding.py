"""Sharded (FSDP2) actor training: wrapping the policy, where the samples live, reducing metrics.

The actor group has one process per rank (`cluster.component_placement`, Ray backend). Each rank holds only its
data-parallel share of the rollout (whole env rows; `train_embodied.trajectories`). The ranks exchange the small
per-sample loss masks and weights (`SampleLayout`), so all of them draw the same minibatches of the whole rollout
with the same shuffle seed, exactly as one process would; rank r trains on the minibatch's samples it holds. With
one rank nothing here changes the single-process arithmetic. The collectives themselves are `vla_infra.dist`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from train_embodied.advantages import task_groups
from train_embodied.batches import SampleBatch
from train_embodied.config.sections import FSDPSection
from train_embodied.numerics import nonfinite_inputs
from vla_infra import gather_objects

#: `actor.fsdp_config.sharding_strategy` -> FSDP2 `reshard_after_forward` (ZeRO-3 / ZeRO-2).
RESHARD_AFTER_FORWARD = {"full_shard": True, "shard_grad_op": False}


def wants_sharding(section: FSDPSection) -> bool:
    """`fsdp` and `fsdp2` both mean FSDP2; `none` means a plain module."""
    return section.strategy in ("fsdp", "fsdp2")


def fsdp_config_for(section: FSDPSection, policy: nn.Module) -> Any:
    """The vla_infra `FSDPConfig` of `actor.fsdp_config` for `policy`: the block classes its model family
    declares (e.g. the decoder layers and vision-tower layers) are sharded one by one; everything else
    (embeddings, LM head, projector, value head) belongs to the root unit."""
    from vla_infra import FSDPConfig
    from vla_models import get_family

    blocks = get_family(type(policy.config).family).fsdp_wrap_classes
    present = {type(m).__name__ for m in policy.modules()}
    mixed = section.mixed_precision
    return FSDPConfig(
        param_dtype=str(mixed.get("param_dtype") or "fp32"),
        reduce_dtype=str(mixed.get("reduce_dtype") or "fp32"),
        gradient_checkpointing=section.gradient_checkpointing,
        cpu_offload=section.cpu_offload,
        reshard_after_forward=RESHARD_AFTER_FORWARD[section.sharding_strategy],
        wrap_classes=tuple(c for c in blocks if c in present),
        # the policies cast their own float inputs (states) to their dtype; the sampling temperature in the
        # rollout's forward_inputs must stay fp32, or bf16 mixed precision biases the recomputed log-probs
        cast_root_inputs=False,
    )


def shard_policy(policy: nn.Module, section: FSDPSection) -> nn.Module:
    """Apply FSDP2 to `policy` in place (needs the default process group); returns it.

    The policy is trained through `evaluate` (not `forward`), so that method is registered with FSDP2: its root
    parameters (embeddings, LM head, value head) are gathered around it like around `forward`.
    """
    from torch.distributed.fsdp import register_fsdp_forward_method

    from vla_infra import apply_fsdp2

    apply_fsdp2(policy, fsdp_config_for(section, policy))
    register_fsdp_forward_method(policy, "evaluate")
    return policy


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


def rank_task_groups(task_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(group of each of this rank's rows [b], number of groups) for `algorithm.per_task_advantages`, numbered by the
    sorted distinct task ids of every rank's rows: the same numbering on every rank (a collective)."""
    return task_groups(task_ids, torch.cat(gather_objects(task_ids)))


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


def save_unsharded(policy: nn.Module, weights: dict[str, torch.Tensor], path: str) -> None:
    """`save_pretrained` of a sharded policy from its gathered `weights` (rank 0 only).

    A plain copy of the architecture (`vla_models.build_policy(policy.config)`) gets the full weights and writes
    the usual folder (LoRA merged, tokenizer, config), loadable by `actor.model.model_path`. Built under a forked
    RNG so that saving does not change the random streams of the run.
    """
    from vla_models import build_policy

    with torch.random.fork_rng(devices=[]):
        plain = build_policy(policy.config)
    plain.load_state_dict(weights)
    plain.save_pretrained(path)
