"""Collectives over the default process group that also run without one (one process: identities).

Small control-plane exchanges of a data-parallel group: picklable objects (`gather_objects`), sums of a tensor or
of named floats (`all_reduce_sum`, `all_reduce_sums`), and gradient-norm clipping that works on FSDP2 (DTensor)
gradients (`clip_grad_norm`). Sums travel on the group's device: the CPU for gloo, this process's GPU for nccl
(nccl has no CPU collectives); tensors come back on the CPU.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist


def is_distributed() -> bool:
    """True when a default process group of more than one rank is initialised."""
    return tdist.is_available() and tdist.is_initialized() and tdist.get_world_size() > 1


def collective_device() -> torch.device:
    """Where the default group's collectives run: this process's GPU for nccl, else the CPU."""
    if tdist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def gather_objects(value: Any) -> list[Any]:
    """`value` of every rank of the default process group, in rank order (`[value]` without a group).

    One `all_gather_object`: to exchange several things at one point of a program, gather one object holding
    all of them (e.g. a dataclass or a tuple) rather than calling this once per thing.
    """
    if not is_distributed():
        return [value]
    out: list[Any] = [None] * tdist.get_world_size()
    tdist.all_gather_object(out, value)
    return out


def all_reduce_sum(value: torch.Tensor) -> torch.Tensor:
    """`value` summed over the ranks of the default process group (a CPU tensor in and out; `value` itself without
    a group)."""
    if not is_distributed():
        return value
    out = value.detach().to(collective_device()).clone()
    tdist.all_reduce(out, op=tdist.ReduceOp.SUM)
    return out.cpu()


def all_reduce_sums(values: dict[str, float]) -> dict[str, float]:
    """Sum `values` over the ranks of the default process group (every rank must pass the same keys).

    The sum travels as one float64 tensor (keys in sorted order), so any number of values costs one collective.
    """
    if not is_distributed():
        return values
    keys = sorted(values)
    packed = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=collective_device())
    tdist.all_reduce(packed, op=tdist.ReduceOp.SUM)
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
