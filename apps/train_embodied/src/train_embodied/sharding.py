"""Sharded (FSDP2) actor training: wrapping the policy with FSDP2 (`shard_policy`) and saving a sharded policy
unsharded (`save_unsharded`). Which samples each rank trains on is `train_embodied.data_parallel`'s.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from train_embodied.config.sections import FSDPSection

#: `actor.fsdp_config.sharding_strategy` -> FSDP2 `reshard_after_forward` (ZeRO-3 / ZeRO-2).
RESHARD_AFTER_FORWARD = {"full_shard": True, "shard_grad_op": False}


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
