"""Sharded (FSDP2) actor training: wrapping the policy, where the samples live, reducing metrics.

The actor group has one process per rank (`cluster.component_placement`, Ray backend). Each rank holds only its
data-parallel share of the rollout (whole env rows; `train_embodied.trajectories`). The ranks exchange the small
per-sample loss masks and weights (`SampleLayout`), so all of them draw the same minibatches of the whole rollout
with the same shuffle seed, exactly as one process would; rank r trains on the minibatch's samples it holds. With
one rank nothing here changes the single-process arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from train_embodied.advantages import task_groups
from train_embodied.config.sections import FSDPSection

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


def gather_objects(value: Any) -> list[Any]:
    """`value` of every rank of the default process group, in rank order (`[value]` without a group)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def rank_task_groups(task_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(group of each of this rank's rows [b], number of groups) for `algorithm.per_task_advantages`, numbered by the
    sorted distinct task ids of every rank's rows: the same numbering on every rank (a collective)."""
    return task_groups(task_ids, torch.cat(gather_objects(task_ids)))


def all_reduce_sum(value: torch.Tensor) -> torch.Tensor:
    """`value` summed over the ranks of the default process group (a CPU tensor in and out)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    out = value.detach().to(device).clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out.cpu()


def sample_layout(
    first_row: int, num_steps: int, mask: torch.Tensor, sample_weight: Any, action_mask: Any
) -> SampleLayout:
    """The layout of the whole rollout, from every rank's share (a collective: every rank calls it).

    Args:
        first_row: the first env row this rank holds (its rows are contiguous).
        num_steps: T, the same on every rank.
        mask, sample_weight, action_mask: this rank's flattened samples ([T * b], [T * b], [T * b, C]).
    """
    parts = gather_objects((first_row, len(mask) // max(num_steps, 1), mask, sample_weight, action_mask))
    total = sum(p[1] for p in parts)
    n = num_steps * total
    owner = torch.empty(n, dtype=torch.long)
    local = torch.empty(n, dtype=torch.long)
    g_mask = torch.empty(n, dtype=torch.bool)
    g_weight = None if parts[0][3] is None else torch.empty(n, dtype=parts[0][3].dtype)
    g_action = None if parts[0][4] is None else torch.empty(n, *parts[0][4].shape[1:], dtype=torch.bool)
    t = torch.arange(num_steps)[:, None]
    for rank, (start, rows, m, w, a) in enumerate(parts):
        where = (t * total + start + torch.arange(rows)[None, :]).reshape(-1)  # sample t * B + b of row b
        owner[where] = rank
        local[where] = torch.arange(len(where))
        g_mask[where] = m
        if g_weight is not None:
            g_weight[where] = w
        if g_action is not None:
            g_action[where] = a
    return SampleLayout(owner=owner, local=local, mask=g_mask, sample_weight=g_weight, action_mask=g_action)


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


def all_reduce_sums(values: dict[str, float]) -> dict[str, float]:
    """Sum `values` over the ranks of the default process group (every rank must pass the same keys).

    The sum travels as one float64 tensor on the group's device: the CPU for gloo, this process's GPU for nccl
    (nccl has no CPU collectives).
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return values
    keys = sorted(values)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    packed = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(packed, op=dist.ReduceOp.SUM)
    return dict(zip(keys, packed.cpu().tolist()))


def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """`torch.nn.utils.clip_grad_norm_` that also works on FSDP2 (DTensor) gradients.

    The total norm of sharded gradients is a partial DTensor; `full_tensor()` reduces it over the ranks, so every
    rank clips with the norm of the whole gradient. On plain tensors this is exactly `clip_grad_norm_` (which is
    `get_total_norm` followed by `clip_grads_with_norm_`).

    Returns:
        The total gradient norm before clipping (a plain 0-d tensor).
    """
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, 2.0)
    if hasattr(total, "full_tensor"):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


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
