"""What the registered loss is given for one micro-batch (`vla_algos.LossInputs`): the policy's log-probs,
entropies and values recomputed from the rollout's `forward_inputs`, beside the rollout's recorded ones."""

from __future__ import annotations

import torch

from train_embodied.batches import SampleBatch
from vla_algos import LossInputs
from vla_models import Policy


def micro_batch_inputs(
    policy: Policy,
    batch: SampleBatch,
    idx: torch.Tensor,
    *,
    critic: bool,
    train_policy: bool = True,
    ref_logprobs: torch.Tensor | None = None,
) -> LossInputs:
    """The loss inputs of micro-batch `idx` (indices of `batch`): the policy's log-probs, entropies (and values with
    `critic`) recomputed from the rollout's `forward_inputs`, and the rollout's rows, on the policy's device (a loss
    with a critic term refuses a batch without recorded values and returns by name)."""
    fi = {k: v[idx] for k, v in batch.forward_inputs.items()}
    logprobs, entropy, values = policy.evaluate(fi, compute_values=critic)
    logprobs = logprobs.float()
    dev = logprobs.device  # the rollout arrives as CPU tensors; the policy may be on a GPU

    def rows(value: torch.Tensor | None) -> torch.Tensor | None:
        return None if value is None else value[idx].to(dev)

    return LossInputs(
        logprobs=logprobs,
        old_logprobs=batch.old_logprobs[idx].to(dev),
        advantages=batch.advantages[idx].to(dev),
        # loss_agg_mode weights (e.g. every episode counts the same), and the actions the env executed (those after
        # an episode's end inside a chunk were not: no ratio, no entropy for them)
        sample_weight=rows(batch.sample_weight),
        action_mask=rows(batch.action_mask),
        entropy=entropy.float(),
        ref_logprobs=rows(ref_logprobs),
        values=values.float() if critic else None,
        old_values=rows(batch.old_values) if critic else None,
        returns=rows(batch.returns) if critic else None,
        train_policy=train_policy,
    )
