"""The parameters an RL update trains: those that require grad and that its objective reaches."""

from __future__ import annotations

from torch import nn


def rl_parameters(policy: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """``(name, parameter)`` of every parameter of ``policy`` that requires grad, less those under the policy's
    ``rl_untrained_prefixes``: modules that only another objective trains (OpenVLA-OFT's L1 regression head, which
    only ``sft_loss`` reaches: the RL loss scores action tokens). An RL optimizer built from these holds no state
    for a parameter that never gets a gradient."""
    skip = tuple(getattr(policy, "rl_untrained_prefixes", ()))
    return [
        (name, p)
        for name, p in policy.named_parameters()
        if p.requires_grad and not (skip and name.startswith(skip))
    ]
