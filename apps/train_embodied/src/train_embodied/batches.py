"""The typed batches that cross worker boundaries: what the rollout policy answers and what the actor trains on (a
simulator step is `vla_envs.StepResult`). Worker groups split and join them field by field (vla_infra's dispatch
treats a dataclass like a dict of its fields), so every consumer reads named, documented fields instead of string
keys."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Prediction:
    """The rollout policy's answer for B observations.

    Attributes:
        actions: float32 [B, C, A] actions to execute (C = action chunk).
        logprobs: float32 [B, C, A] log-probabilities of the sampled action tokens (None when the rollout ranks
            kept them for the actor: `train_embodied.trajectories`).
        values: float32 [B] V(obs), or None for a policy without a value head (or kept, as `logprobs`).
        forward_inputs: what `policy.evaluate` needs to recompute the log-probs, each tensor [B, ...] (empty when
            kept, as `logprobs`).
    """

    actions: torch.Tensor
    logprobs: torch.Tensor | None
    values: torch.Tensor | None
    forward_inputs: dict[str, torch.Tensor]


@dataclass
class SampleBatch:
    """N flattened decisions the actor trains on (rows of a rollout with their advantages), the update's input.

    Attributes:
        forward_inputs: what `policy.evaluate` needs, each tensor [N, ...].
        old_logprobs: float32 [N, C, A] token log-probs at sampling time.
        advantages: float32 [N] (chunk level) or [N, C] (action level).
        mask: bool [N] decisions that enter the loss.
        action_mask: bool [N, C] actions the env executed (or None: all).
        sample_weight: float32 [N] per-decision loss weights of `loss_agg_mode` (None: uniform).
        old_values: float32 [N] values at sampling time (None without a critic).
        returns: float32 [N] value targets (None without a critic).
    """

    forward_inputs: dict[str, torch.Tensor]
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    action_mask: torch.Tensor | None = None
    sample_weight: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None
