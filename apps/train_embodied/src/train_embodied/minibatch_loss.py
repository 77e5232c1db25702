"""The loss of one minibatch, accumulated as gradients over its micro-batches (verl's form): each micro-batch's
loss is `sum(w * loss) / W`, `W` the minibatch's weight sum (`WeightSums`), computed once per minibatch from the
whole rollout's loss weights, so the micro-batches (and ranks) of a minibatch add up to its weighted mean whatever
the split. The loss itself is the `algorithm.loss_type` objective registered in vla_algos."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from train_embodied.batches import SampleBatch
from train_embodied.sharding import SampleLayout, minibatch_share, num_micro_batches
from vla_algos import advantages_per_ratio, entry_weights, get_policy_loss, reduce_logprobs, total_weight
from vla_models import Policy

if TYPE_CHECKING:
    from train_embodied.update import UpdateSettings


@dataclass(frozen=True)
class WeightSums:
    """The normalisers of one minibatch's loss terms: the `vla_algos.total_weight` of all its samples' entries
    under each term's weights. A micro-batch's term is `sum(w * x) / weight sum`, so the micro-batches (and ranks)
    of a minibatch add up to its weighted mean, whatever the split."""

    policy: float  # the policy and KL terms: `loss_agg_mode` weights x executed actions, per log-prob entry
    entropy: float  # the entropy bonus: executed actions, per (reduced) entropy entry
    value: float  # the critic: one value per sample


def minibatch_weight_sums(
    whole: Any, minibatch: torch.Tensor, s: UpdateSettings, entry_shape: tuple[int, ...]
) -> WeightSums:
    """The `WeightSums` of `minibatch` (sample indices of `whole`: the rollout, or its `SampleLayout` on a sharded
    actor, which holds every sample's loss weights: every rank computes the same sums, no collective needed).

    Args:
        entry_shape: [C, A], the shape of one sample's token log-probs (and entropies).
    """
    sample_weight = None if whole.sample_weight is None else whole.sample_weight[minibatch]
    action_mask = None if whole.action_mask is None else whole.action_mask[minibatch]
    n = len(minibatch)
    one = torch.zeros(1, *entry_shape)
    policy_shape = (n, *reduce_logprobs(one, s.logprob_type).shape[1:])
    entropy_shape = (n, *reduce_logprobs(one, s.entropy_type).shape[1:])
    policy = entry_weights(sample_weight, action_mask, ndim=len(policy_shape))
    entropy = entry_weights(None, action_mask, ndim=len(entropy_shape))
    return WeightSums(
        policy=float(total_weight(policy, policy_shape)),
        entropy=float(total_weight(entropy, entropy_shape)),
        value=float(n),
    )


def minibatch_gradients(
    policy: Policy,
    batch: SampleBatch,
    minibatch: torch.Tensor,
    s: UpdateSettings,
    *,
    whole: Any,
    train_policy: bool = True,
    rank: int = 0,
    world_size: int = 1,
    layout: SampleLayout | None = None,
    ref_logprobs: torch.Tensor | None = None,
) -> dict[str, float]:
    """Accumulate the gradient of one minibatch's loss into the parameters' `.grad`, in micro-batches of
    `s.micro_batch_size` of this rank's samples of it (arguments as `ppo_update`'s; `minibatch`: sample indices of
    `whole`, the rollout or its layout).

    The minibatch's `WeightSums` are computed once; each micro-batch's loss is `sum(w * loss) / weight sum`.

    Returns:
        This rank's part of the minibatch's metrics: summed over the ranks (`all_reduce_sums`), those of the whole
        minibatch.
    """
    sums = minibatch_weight_sums(whole, minibatch, s, tuple(batch.old_logprobs.shape[1:]))
    share = minibatch_share(minibatch, layout, rank)
    acc: dict[str, float] = {}
    for i in range(num_micro_batches(minibatch, layout, s.micro_batch_size)):
        micro = share[i * s.micro_batch_size : (i + 1) * s.micro_batch_size]
        padding = len(micro) == 0  # FSDP: every rank runs as many passes; this one counts for nothing
        pad = torch.zeros(1, dtype=torch.long)  # any sample of this rank's batch (weight 0)
        loss, metrics = _micro_loss(
            policy,
            batch,
            pad if padding else micro,
            s,
            weight_sums=sums,
            train_policy=train_policy,
            ref_logprobs=ref_logprobs,
        )
        # FSDP averages the gradients over the ranks: x world_size makes them the sum of the ranks' parts
        (loss * (0.0 if padding else float(world_size))).backward()
        for k, v in metrics.items():  # every rank reports the same keys (the sums over ranks need them)
            acc[k] = acc.get(k, 0.0) + (0.0 if padding else float(v))
    return acc


def _micro_loss(
    policy: Policy,
    batch: SampleBatch,
    idx: torch.Tensor,
    s: UpdateSettings,
    *,
    weight_sums: WeightSums,
    train_policy: bool = True,
    ref_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of micro-batch `idx` (indices of `batch`): each term's weighted sum over the micro-batch, divided by
    its minibatch's weight sum (`weight_sums`), so the micro-batches of a minibatch add up to its loss."""
    loss_fn = get_policy_loss(s.loss_type)
    fi = {k: v[idx] for k, v in batch.forward_inputs.items()}
    logprobs, entropy, values = policy.evaluate(fi, compute_values=loss_fn.uses_critic)
    new_lp = reduce_logprobs(logprobs.float(), s.logprob_type)
    dev = new_lp.device  # the rollout arrives as CPU tensors; the policy may be on a GPU

    def rows(value: torch.Tensor) -> torch.Tensor:
        return value[idx].to(dev)

    old_lp = reduce_logprobs(rows(batch.old_logprobs), s.logprob_type)
    ref_lp = None if ref_logprobs is None else reduce_logprobs(rows(ref_logprobs), s.logprob_type)
    # actions after an episode's end inside a chunk were never executed: no ratio, no entropy for them
    action_mask = rows(batch.action_mask) if batch.action_mask is not None else None
    adv = advantages_per_ratio(rows(batch.advantages), new_lp.ndim, action_mask)
    # loss_agg_mode weights: per-decision, e.g. every episode counts the same
    sample_weight = rows(batch.sample_weight) if batch.sample_weight is not None else None
    lp_mask = entry_weights(sample_weight, action_mask, ndim=new_lp.ndim)
    # entropy_type: the entropy bonus is the mean of per-token entropies, or of their sums per action or per chunk
    entropy_all = reduce_logprobs(entropy.float(), s.entropy_type)
    entropy_mask = entry_weights(None, action_mask, ndim=entropy_all.ndim)
    critic = {}
    if loss_fn.uses_critic:
        assert batch.old_values is not None and batch.returns is not None, (
            "a critic loss needs values and returns"
        )
        critic = {
            "values": values.float(),
            "old_values": rows(batch.old_values),
            "returns": rows(batch.returns),
        }
    loss, lm = loss_fn(
        logprobs=new_lp,
        old_logprobs=old_lp,
        advantages=adv,
        mask=lp_mask,
        clip_ratio_low=s.clip_ratio_low,
        clip_ratio_high=s.clip_ratio_high,
        dual_clip=s.clip_ratio_c,
        clip_log_ratio_min=s.clip_log_ratio_min,
        clip_log_ratio_max=s.clip_log_ratio_max,
        entropy=entropy_all,
        entropy_mask=entropy_mask,
        entropy_coef=s.entropy_bonus,
        weight_sum=weight_sums.policy,
        entropy_weight_sum=weight_sums.entropy,
        value_weight_sum=weight_sums.value,
        train_policy=train_policy,
        ref_logprobs=ref_lp,
        kl_coef=s.kl_beta,
        kl_kind=s.kl_penalty,
        value_clip=s.value_clip,
        huber_delta=s.huber_delta,
        value_coef=s.value_loss_coef,
        **critic,
    )
    # the runner logs the critic's explained variance over the whole rollout (a micro-batch's can be NaN)
    metrics = {f"train/{k}": v for k, v in lm.items() if k != "critic/explained_variance"}
    metrics["train/entropy_loss"] = lm["actor/entropy_loss"]
    metrics["train/loss"] = loss.detach()
    return loss, metrics
