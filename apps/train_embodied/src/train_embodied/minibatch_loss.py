"""The loss of one minibatch, accumulated as gradients over its micro-batches (verl's form): each micro-batch's
loss is `sum(w * loss) / W`, `W` the minibatch's weight sums (`vla_algos.minibatch_weight_sums`), computed once per
minibatch from the whole rollout's loss weights, so the micro-batches (and ranks) of a minibatch add up to its
weighted mean whatever the split. The loss itself is the `algorithm.loss_type` objective registered in vla_algos,
called with the micro-batch's `vla_algos.LossInputs`, the `algorithm` section's `vla_algos.LossSettings` and the
minibatch's weight sums."""

from __future__ import annotations

from typing import Any

import torch

from train_embodied.batches import SampleBatch
from train_embodied.sharding import SampleLayout, minibatch_share, num_micro_batches
from vla_algos import LossInputs, LossSettings, PolicyLoss, minibatch_weight_sums
from vla_models import Policy


def minibatch_gradients(
    policy: Policy,
    batch: SampleBatch,
    minibatch: torch.Tensor,
    loss_fn: PolicyLoss,
    settings: LossSettings,
    *,
    micro_batch_size: int,
    whole: Any,
    train_policy: bool = True,
    rank: int = 0,
    world_size: int = 1,
    layout: SampleLayout | None = None,
    ref_logprobs: torch.Tensor | None = None,
) -> dict[str, float]:
    """Accumulate the gradient of one minibatch's loss into the parameters' `.grad`, in micro-batches of
    `micro_batch_size` of this rank's samples of it (arguments as `ppo_update`'s; `minibatch`: sample indices of
    `whole`, the rollout or its layout, which holds every sample's loss weights: every rank computes the same
    weight sums, no collective needed).

    Returns:
        This rank's part of the minibatch's metrics: summed over the ranks (`all_reduce_sums`), those of the whole
        minibatch.
    """
    sums = minibatch_weight_sums(
        settings,
        (len(minibatch), *batch.old_logprobs.shape[1:]),
        sample_weight=None if whole.sample_weight is None else whole.sample_weight[minibatch],
        action_mask=None if whole.action_mask is None else whole.action_mask[minibatch],
    )
    share = minibatch_share(minibatch, layout, rank)
    acc: dict[str, float] = {}
    for i in range(num_micro_batches(minibatch, layout, micro_batch_size)):
        micro = share[i * micro_batch_size : (i + 1) * micro_batch_size]
        padding = len(micro) == 0  # FSDP: every rank runs as many passes; this one counts for nothing
        pad = torch.zeros(1, dtype=torch.long)  # any sample of this rank's batch (weight 0)
        inputs = micro_batch_inputs(
            policy,
            batch,
            pad if padding else micro,
            critic=loss_fn.uses_critic,
            train_policy=train_policy,
            ref_logprobs=ref_logprobs,
        )
        loss, terms = loss_fn(inputs, settings, sums)
        # FSDP averages the gradients over the ranks: x world_size makes them the sum of the ranks' parts
        (loss * (0.0 if padding else float(world_size))).backward()
        # the runner logs the critic's explained variance over the whole rollout (a micro-batch's can be NaN)
        metrics = {f"train/{k}": v for k, v in terms.items() if k != "critic/explained_variance"}
        metrics["train/entropy_loss"] = terms["actor/entropy_loss"]
        metrics["train/loss"] = loss.detach()
        for k, v in metrics.items():  # every rank reports the same keys (the sums over ranks need them)
            acc[k] = acc.get(k, 0.0) + (0.0 if padding else float(v))
    return acc


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
    `critic`) recomputed from the rollout's `forward_inputs`, and the rollout's rows, on the policy's device."""
    fi = {k: v[idx] for k, v in batch.forward_inputs.items()}
    logprobs, entropy, values = policy.evaluate(fi, compute_values=critic)
    logprobs = logprobs.float()
    dev = logprobs.device  # the rollout arrives as CPU tensors; the policy may be on a GPU

    def rows(value: torch.Tensor | None) -> torch.Tensor | None:
        return None if value is None else value[idx].to(dev)

    if critic:
        assert batch.old_values is not None and batch.returns is not None, (
            "a critic loss needs values and returns"
        )
    return LossInputs(
        logprobs=logprobs,
        old_logprobs=batch.old_logprobs[idx].to(dev),
        advantages=batch.advantages[idx].to(dev),
        sample_weight=rows(batch.sample_weight),  # loss_agg_mode weights: e.g. every episode counts the same
        action_mask=rows(
            batch.action_mask
        ),  # actions after an episode's end inside a chunk were never executed
        entropy=entropy.float(),
        ref_logprobs=rows(ref_logprobs),
        values=values.float() if critic else None,
        old_values=rows(batch.old_values) if critic else None,
        returns=rows(batch.returns) if critic else None,
        train_policy=train_policy,
    )
