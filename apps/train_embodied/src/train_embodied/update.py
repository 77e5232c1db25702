"""The actor update: `update_epoch` passes of shuffled minibatches, each split into micro-batches.

loss = policy_loss + value_loss_coef * value_loss - entropy_bonus * entropy     (losses from vla_algos)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from train_embodied.config.sections import AlgorithmSection, OptimSection
from train_embodied.numerics import finite_optimizer_step
from train_embodied.sharding import all_reduce_sums, clip_grad_norm, num_micro_batches, rank_share
from vla_algos import entropy_loss, ppo_actor_loss, reduce_logprobs, value_loss


@dataclass(frozen=True)
class UpdateSettings:
    """Hyper-parameters of `ppo_update` (from the `algorithm` and `actor` sections)."""

    update_epoch: int
    global_batch_size: int
    micro_batch_size: int
    clip_ratio_low: float
    clip_ratio_high: float
    clip_ratio_c: float | None
    value_clip: float | None
    huber_delta: float | None
    value_loss_coef: float
    entropy_bonus: float
    logprob_type: str
    use_critic: bool
    clip_grad: float
    lr_warmup_steps: int = 0
    target_kl: float | None = None

    @classmethod
    def from_sections(
        cls, algo: AlgorithmSection, optim: OptimSection, micro_batch_size: int, global_batch_size: int
    ) -> UpdateSettings:
        return cls(
            update_epoch=algo.update_epoch,
            global_batch_size=global_batch_size,
            micro_batch_size=micro_batch_size,
            clip_ratio_low=algo.clip_ratio_low,
            clip_ratio_high=algo.clip_ratio_high,
            clip_ratio_c=algo.clip_ratio_c,
            value_clip=algo.value_clip,
            huber_delta=algo.huber_delta,
            value_loss_coef=algo.value_loss_coef,
            entropy_bonus=algo.entropy_bonus,
            logprob_type=algo.logprob_type,
            use_critic=algo.loss_type == "actor_critic",
            clip_grad=optim.clip_grad,
            lr_warmup_steps=optim.lr_warmup_steps,
            target_kl=algo.target_kl,
        )


def ppo_update(
    policy: Any,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, Any],
    s: UpdateSettings,
    *,
    generator: torch.Generator,
    start_step: int = 0,
    train_policy: bool = True,
    rank: int = 0,
    world_size: int = 1,
) -> tuple[dict[str, float], int]:
    """Update `policy` on one flattened rollout.

    Args:
        policy: A vla_models policy (`evaluate(forward_inputs, compute_values=...)`).
        optimizer: Its optimizer.
        batch: N samples: `forward_inputs` (dict of [N, ...]), `old_logprobs` [N, C, A], `advantages` [N] or
            [N, C], `mask` bool [N], optional `action_mask` bool [N, C] (actions the env executed), optional
            `sample_weight` float [N] (`loss_agg_mode=seq-mean-token-mean`: the policy loss of a minibatch is
            its `sample_weight`-weighted mean, whatever the micro-batch / rank split), and with a critic
            `old_values` [N], `returns` [N]. CPU tensors; each micro-batch goes to the policy's device.
        s: Settings.
        generator: Shuffling generator.
        start_step: Policy-training optimizer steps taken before this call (the linear learning-rate warmup
            counts those alone: critic warm-up steps run at the full lr and leave the warmup for the policy).
        train_policy: False during critic warm-up: only the value loss is minimised (the policy's outputs
            are still computed for the metrics). Only the value head and what feeds it get gradients: with
            `actor.model.extra.detach_critic_input=false` (shared backbone) the value loss still moves the
            backbone, and with it the policy; `detach_critic_input=true` keeps the policy frozen.
        rank, world_size: This process in a sharded (FSDP2) actor group. Every rank passes the same `batch` and
            `generator` state; rank r trains on its contiguous share of each minibatch (see
            `train_embodied.sharding`), and the metrics are summed over the ranks, so every rank returns the
            metrics of whole minibatches and takes the same early-stop decision.

    Early stop: with `s.target_kl` set, the passes over this rollout end after the first minibatch whose
    approx-KL to the rollout policy exceeds it (metric `train/actor/early_stopped`).

    Returns:
        (mean metrics over minibatches, number of optimizer steps).
    """
    idx_all = torch.nonzero(batch["mask"], as_tuple=False).squeeze(-1)
    n = len(idx_all)
    if n == 0:
        return {"train/actor/num_samples": 0.0}, 0
    sums: dict[str, float] = {}
    count = 0
    steps = 0
    first_kl = 0.0
    stopped = False
    for _ in range(s.update_epoch):
        if stopped:
            break
        perm = idx_all[torch.randperm(n, generator=generator)]
        for start in range(0, n, s.global_batch_size):
            mb = perm[start : start + s.global_batch_size]
            optimizer.zero_grad(set_to_none=True)
            set_warmup_lr(optimizer, start_step + steps, s.lr_warmup_steps if train_policy else 0)
            acc: dict[str, float] = {}
            share = rank_share(mb, rank, world_size)
            for i in range(num_micro_batches(len(mb), world_size, s.micro_batch_size)):
                micro = share[i * s.micro_batch_size : (i + 1) * s.micro_batch_size]
                padding = len(micro) == 0  # FSDP: every rank runs as many passes; this one counts for nothing
                # FSDP averages gradients over ranks: x world_size makes the result the full-minibatch mean
                weight = 0.0 if padding else len(micro) * world_size / len(mb)
                loss, metrics = _micro_loss(
                    policy, batch, mb[:1] if padding else micro, s, train_policy=train_policy, minibatch=mb
                )
                (loss * weight).backward()
                for k, v in metrics.items():
                    acc[k] = acc.get(k, 0.0) + (0.0 if padding else float(v) * (len(micro) / len(mb)))
            acc = all_reduce_sums(acc)
            params = [p for g in optimizer.param_groups for p in g["params"]]
            grad_norm = clip_grad_norm(params, s.clip_grad if s.clip_grad > 0 else float("inf"))
            finite_optimizer_step(optimizer, grad_norm, acc)  # NaN/inf: no step, counted
            steps += 1
            acc["train/actor/grad_norm"] = float(grad_norm)
            if count == 0:  # before any step on this rollout the ratio must be exactly 1 (rollout == actor)
                first_kl = acc.get("train/actor/approx_kl", 0.0)
            for k, v in acc.items():
                sums[k] = sums.get(k, 0.0) + v
            count += 1
            if (
                s.target_kl is not None
                and train_policy
                and acc.get("train/actor/approx_kl", 0.0) > s.target_kl
            ):
                stopped = True
                break
    out = {k: v / count for k, v in sums.items()}
    out["train/actor/early_stopped"] = float(stopped)
    out["train/actor/policy_trained"] = float(train_policy)
    out["train/actor/lr"] = float(optimizer.param_groups[0]["lr"])
    out["train/actor/first_minibatch_approx_kl"] = first_kl
    out["train/actor/num_samples"] = float(n)
    return out, steps


def set_warmup_lr(optimizer: torch.optim.Optimizer, step: int, warmup_steps: int) -> None:
    """Linear warmup: lr = base_lr * min(1, (step + 1) / warmup_steps) (a function of the step: resume-exact)."""
    for group in optimizer.param_groups:
        base = group.setdefault("base_lr", group["lr"])
        group["lr"] = base * min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else base


def _micro_loss(
    policy: Any,
    batch: dict[str, Any],
    idx: torch.Tensor,
    s: UpdateSettings,
    *,
    train_policy: bool = True,
    minibatch: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    fi = {k: v[idx] for k, v in batch["forward_inputs"].items()}
    logprobs, entropy, values = policy.evaluate(fi, compute_values=s.use_critic)
    new_lp = reduce_logprobs(logprobs.float(), s.logprob_type)
    dev = new_lp.device  # the rollout arrives as CPU tensors; the policy may be on a GPU

    def rows(key: str) -> torch.Tensor:
        return batch[key][idx].to(dev)

    old_lp = reduce_logprobs(rows("old_logprobs"), s.logprob_type)
    adv = rows("advantages")
    # actions after an episode's end inside a chunk were never executed: no ratio, no entropy for them
    action_mask = rows("action_mask") if "action_mask" in batch else None
    if adv.ndim > new_lp.ndim:  # action-level advantages with chunk-level log-probs: one per chunk
        if action_mask is None:
            adv = adv.mean(dim=-1)
        else:
            adv = (adv * action_mask).sum(-1) / action_mask.sum(-1).clamp(min=1)
    lp_mask = action_mask if action_mask is not None and new_lp.ndim >= 2 else None
    if "sample_weight" in batch:  # seq-mean-token-mean: per-decision weights, every episode counts the same
        w = rows("sample_weight")
        w = w.reshape(w.shape + (1,) * (lp_mask.ndim - 1)) * lp_mask if lp_mask is not None else w
        lp_mask = w
    # masked_mean divides by this micro-batch's mask (weight) sum and the caller scales by len(micro) / len(mb):
    # rescaling by (mean weight here) / (mean weight over the minibatch) makes the micro-batches (and ranks) add
    # up to sum(w * loss) / sum(w) over the whole minibatch, whatever the split (exactly 1 with a full mask)
    mb = idx if minibatch is None else minibatch
    weight_share = None
    if lp_mask is not None:
        weight_share = _share(
            _decision_weights(batch, idx, lp_mask.ndim), _decision_weights(batch, mb, lp_mask.ndim)
        )
    policy_loss, pm = ppo_actor_loss(
        new_lp,
        old_lp,
        adv,
        lp_mask,
        clip_ratio_low=s.clip_ratio_low,
        clip_ratio_high=s.clip_ratio_high,
        dual_clip=s.clip_ratio_c,
    )
    if weight_share is not None:
        weight_share = weight_share.to(dev)
        policy_loss = policy_loss * weight_share
        pm = {k: v * weight_share for k, v in pm.items()}
    entropy_mean = entropy_loss(entropy.float(), action_mask)
    if action_mask is not None:  # a mean over the minibatch's executed actions, as above
        counts = [batch["action_mask"][i].flatten(1).sum(-1).float() for i in (idx, mb)]
        entropy_mean = entropy_mean * _share(*counts).to(dev)
    loss = policy_loss - s.entropy_bonus * entropy_mean
    if not train_policy:  # critic warm-up: the policy loss (and entropy bonus) contribute no gradient
        loss = torch.zeros((), dtype=policy_loss.dtype, device=dev)
    metrics: dict[str, torch.Tensor] = {
        "train/actor/policy_loss": policy_loss.detach(),
        "train/actor/approx_kl": pm["approx_kl"],
        "train/actor/clip_fraction": pm["clip_fraction"],
        "train/actor/clipped_ratio": pm["clipped_ratio"],
        "train/actor/ratio": pm["ratio"],
        "train/actor/entropy_loss": entropy_mean.detach(),
        "train/entropy_loss": entropy_mean.detach(),
    }
    if s.use_critic:
        vl, vm = value_loss(
            values.float(),
            rows("old_values"),
            rows("returns"),
            value_clip=s.value_clip,
            huber_delta=s.huber_delta,
        )
        loss = loss + s.value_loss_coef * vl
        metrics["train/critic/value_loss"] = vl.detach()
        metrics["train/critic/value_clip_ratio"] = vm["value_clip_ratio"]
    metrics["train/loss"] = loss.detach()
    return loss, metrics


def _decision_weights(batch: dict[str, Any], idx: torch.Tensor, mask_ndim: int) -> torch.Tensor:
    """Total policy-loss weight of each sample [n]: its `sample_weight` (1 without), times its executed actions
    when the ratio is taken per action or token (`mask_ndim` >= 2, the action mask then weighs every action)."""
    w = batch["sample_weight"][idx].float() if "sample_weight" in batch else torch.ones(len(idx))
    if mask_ndim >= 2 and "action_mask" in batch:
        w = w * batch["action_mask"][idx].flatten(1).sum(-1).float()
    return w


def _share(here: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:
    """(mean of `here`) / (mean of `whole`): a micro-batch's share of the minibatch's loss weight, per sample."""
    return (here.sum() / len(here)) / (whole.sum() / len(whole)).clamp_min(torch.finfo(whole.dtype).tiny)
