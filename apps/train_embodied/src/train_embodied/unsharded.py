"""`actor.fsdp_config` on an actor of one process, which is trained as a plain module (no FSDP sharding).

Each setting takes effect without a process group, as it would on a sharded actor:

- `gradient_checkpointing`: the blocks its model family declares (`fsdp_wrap_classes`, e.g. the decoder and
  vision-tower layers) recompute their activations in backward (`vla_infra.enable_gradient_checkpointing`,
  the same call FSDP2 sharding makes).
- `mixed_precision.param_dtype` narrower than the policy's parameters (`actor.model.precision`): the actor's
  forward passes (`evaluate`, the training forward) run under `torch.autocast` in that dtype, with the
  parameters, gradients and optimizer state kept in their own dtype, as FSDP2 keeps its fp32 shards. Autocast
  leaves the precision-sensitive ops (softmax, norms, log-probabilities) in fp32; their outputs are cast to
  fp32. A param_dtype wider than the parameters cannot be honoured without copying them, and is refused.
- `mixed_precision.reduce_dtype`: the dtype of the gradient reduction across ranks. One process reduces
  nothing; its gradients stay in the parameters' dtype.
- `cpu_offload`: FSDP2's CPU offload streams each block's shard to the device around its use; without
  sharding there is no such stream, so it is refused (`actor.enable_offload` keeps the weights, gradients and
  optimizer state in host memory between phases instead).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from train_embodied.config.sections import FSDPSection

#: bytes per element of each precision name, to tell a narrowing param_dtype from a widening one
_WIDTH = {"fp32": 4, "bf16": 2, "fp16": 2}
_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def one_process_errors(section: FSDPSection, precision: str) -> list[str]:
    """The `actor.fsdp_config` settings one actor process cannot honour, one line each naming the key.

    Args:
        section: `actor.fsdp_config`.
        precision: `actor.model.precision`, the dtype of the policy's parameters.
    """
    errors = []
    if section.cpu_offload:
        errors.append(
            "actor.fsdp_config.cpu_offload=True is not supported with one actor process (FSDP2's CPU offload "
            "needs a sharded actor): set `actor.fsdp_config.cpu_offload=false actor.enable_offload=true` to keep "
            "the weights and optimizer state in host memory between phases, or place the actor on several processes"
        )
    param_dtype = section.mixed_precision.get("param_dtype")
    if param_dtype in _WIDTH and precision in _WIDTH and _WIDTH[param_dtype] > _WIDTH[precision]:
        errors.append(
            f"actor.fsdp_config.mixed_precision.param_dtype={param_dtype!r} is wider than actor.model.precision="
            f"{precision!r}: one actor process computes under autocast, which only narrows: set "
            f"`actor.fsdp_config.mixed_precision.param_dtype={precision}` or `actor.model.precision={param_dtype}`"
        )
    return errors


def apply_fsdp_settings(policy: nn.Module, section: FSDPSection, *, trained: bool = True) -> nn.Module:
    """Make `actor.fsdp_config` take effect on the unsharded `policy`, in place; returns it.

    Args:
        policy: a vla_models policy on its training device.
        section: `actor.fsdp_config` (checked by `one_process_errors`).
        trained: False for the frozen KL reference policy, which gets the mixed precision but no gradient
            checkpointing (it runs without gradients).

    Raises:
        ValueError: gradient checkpointing asked for a policy without any of its family's blocks.
    """
    from vla_infra import enable_gradient_checkpointing
    from vla_models import get_family

    if trained and section.gradient_checkpointing:
        blocks = get_family(type(policy.config).family).fsdp_wrap_classes
        present = {type(m).__name__ for m in policy.modules()}
        wrap = tuple(c for c in blocks if c in present)
        if not wrap:
            raise ValueError(
                "actor.fsdp_config.gradient_checkpointing=True: the policy has none of the blocks its model "
                f"family checkpoints ({', '.join(blocks) or 'none declared'})"
            )
        enable_gradient_checkpointing(policy, wrap_classes=wrap)
    dtype = autocast_dtype(policy, section)
    if dtype is not None:
        _autocast_method(policy, "evaluate", dtype)
    return policy


def autocast_dtype(policy: nn.Module, section: FSDPSection) -> torch.dtype | None:
    """The dtype the policy's forward runs in under autocast: `mixed_precision.param_dtype` when it is narrower
    than the policy's floating-point parameters; None (no autocast) otherwise."""
    name = section.mixed_precision.get("param_dtype")
    if name not in _DTYPE:
        return None
    dtype = _DTYPE[name]
    params = [p for p in policy.parameters() if p.is_floating_point()]
    if not params or all(p.dtype.itemsize <= dtype.itemsize for p in params):
        return None
    return dtype


def _autocast_method(module: nn.Module, name: str, dtype: torch.dtype) -> None:
    """Run `module.<name>` under `torch.autocast(dtype)` on the module's device; its floating-point tensor
    outputs come back as fp32 (the loss arithmetic stays in fp32, as with FSDP2's fp32 reduce)."""
    original = getattr(module, name)

    @functools.wraps(original)
    def under_autocast(*args: Any, **kwargs: Any) -> Any:
        # the device is looked up per call: actor.enable_offload moves the policy to host memory and back
        with torch.autocast(next(module.parameters()).device.type, dtype=dtype):
            out = original(*args, **kwargs)
        return _to_fp32(out)

    setattr(module, name, under_autocast)
    module._vla_autocast_dtype = dtype  # type: ignore[assignment]


def _to_fp32(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.float() if out.is_floating_point() else out
    if isinstance(out, tuple):
        return tuple(_to_fp32(o) for o in out)
    if isinstance(out, list):
        return [_to_fp32(o) for o in out]
    if isinstance(out, dict):
        return {k: _to_fp32(v) for k, v in out.items()}
    return out
