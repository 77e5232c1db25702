"""Sharded (FSDP2) actor training: wrapping the policy, splitting a minibatch over ranks, reducing metrics.

The actor group has one process per rank (`cluster.component_placement`, Ray backend). Every rank gets the whole
flattened rollout and the same shuffle seed, so all ranks draw the same minibatches; rank r trains on its
contiguous share of each minibatch. With one rank nothing here changes the single-process arithmetic.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

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
        param_dtype=str(mixed.get("param_dtype", "fp32")),
        reduce_dtype=str(mixed.get("reduce_dtype", "fp32")),
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


def rank_share(minibatch: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank `rank`'s contiguous share of a minibatch's sample indices (sizes differ by at most one).

    Args:
        minibatch: Sample indices, int64 [M].

    Returns:
        int64 [ceil(M / world_size)] or one fewer; `minibatch` itself when `world_size == 1`.
    """
    if world_size == 1:
        return minibatch
    base, extra = divmod(len(minibatch), world_size)
    start = rank * base + min(rank, extra)
    return minibatch[start : start + base + (1 if rank < extra else 0)]


def num_micro_batches(minibatch_size: int, world_size: int, micro_batch_size: int) -> int:
    """Forward/backward passes per rank for one minibatch: the same on every rank (FSDP collectives must match)."""
    return math.ceil(math.ceil(minibatch_size / world_size) / micro_batch_size)


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
