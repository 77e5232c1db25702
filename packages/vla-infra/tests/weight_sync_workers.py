"""Tiny actor and rollout workers holding a `WeightSync` each, as the trainer's workers do (they travel to Ray
workers by value): `WeightSenderWorker` / `WeightReceiverWorker` give them the registered methods
`WeightSyncCoordinator` calls; here is what the tests look at."""

from __future__ import annotations

import os

import torch
from torch import nn

from vla_infra import WeightReceiverWorker, WeightSenderWorker, WeightSync, register


def tiny_policy(seed: int) -> nn.Module:
    """A small model with a frozen first layer (after the first sync only the trainable tensors travel) and a
    weight large enough to be sent on its own, straight into the receiver's tensor."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 600))
    model[0].requires_grad_(False)
    return model


class TinyActor(WeightSenderWorker):
    def __init__(self) -> None:
        self.policy = tiny_policy(0)
        self.weight_sync = WeightSync.sender(
            self.policy, rank=self.rank, host=self.info.master_addr, timeout_s=60
        )

    @register("one_to_all", collect="first")
    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()}

    @register("one_to_all", collect="none")
    def train_step(self) -> None:
        """Change the trainable weights (as an optimizer step would)."""
        with torch.no_grad():
            for p in self.policy.parameters():
                if p.requires_grad:
                    p.add_(0.01)


class TinyRollout(WeightReceiverWorker):
    def __init__(self, seed: int = 1) -> None:
        self.policy = tiny_policy(seed + self.rank)  # its own initial weights: not the actor's
        self.weight_sync = WeightSync.receiver(self.policy, rank=self.rank, timeout_s=60)

    @register("one_to_all", collect="list")
    def predict(self, x: torch.Tensor, weight_version: int | None = None) -> torch.Tensor:
        self.weight_sync.check_version(weight_version)
        with torch.no_grad():
            return self.policy(x)

    @register("one_to_all", collect="list")
    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()}

    @register("one_to_all", collect="list")
    def pid(self) -> int:
        return os.getpid()
