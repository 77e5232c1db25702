"""The actor update: `update_epoch` passes of shuffled minibatches, each split into micro-batches.

The loss is the `algorithm.loss_type` objective registered in vla_algos (e.g. `actor_critic`:
policy_loss - entropy_bonus * entropy [+ kl_beta * KL(policy || reference)] + value_loss_coef * value_loss), called
with the micro-batch's `vla_algos.LossInputs`, the `algorithm` section's settings handed over by name
(`vla_algos.LossSettings.from_config`) and the minibatch's weight sums. The loop reads as CleanRL's: shuffle the
rollout into minibatches, accumulate each minibatch's gradient over its micro-batches (and data-parallel ranks) in
verl's form, each micro-batch's loss `sum(w * loss) / W` with `W` the minibatch's weight sums
(`vla_algos.minibatch_weight_sums`, computed once per minibatch from the whole rollout's loss weights), step the
optimizer once per minibatch and average the metrics.
"""

from __future__ import annotations

import math

import torch

from train_embodied.batches import SampleBatch
from train_embodied.config.sections import AlgorithmSection, OptimSection
from train_embodied.data_parallel import SampleLayout, micro_batches
from train_embodied.loss_inputs import micro_batch_inputs
from train_embodied.numerics import NONFINITE_FINAL_LOSS, finite_optimizer_step
from vla_algos import LossSettings, get_policy_loss, minibatch_weight_sums
from vla_infra import all_reduce_sums, clip_grad_norm
from vla_models import Policy


def ppo_update(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    batch: SampleBatch,
    algo: AlgorithmSection,
    optim: OptimSection,
    *,
    micro_batch_size: int,
    global_batch_size: int,
    generator: torch.Generator,
    start_step: int = 0,
    train_policy: bool = True,
    rank: int = 0,
    world_size: int = 1,
    layout: SampleLayout | None = None,
    reference: Policy | None = None,
    lr_scale: float = 1.0,
) -> tuple[dict[str, float], int]:
    """Update `policy` on one flattened rollout.

    Args:
        policy: A vla_models policy (`evaluate(forward_inputs, compute_values=...)`).
        optimizer: Its optimizer.
        batch: N samples (`SampleBatch`; with `sample_weight` (`loss_agg_mode=seq-mean-token-mean`) the policy
            loss of a minibatch is its `sample_weight`-weighted mean, whatever the micro-batch / rank split). CPU
            tensors; each micro-batch goes to the policy's device.
        algo, optim: The `algorithm` and `actor.optim` sections (`update_epoch`, `target_kl`, `kl_beta`, the loss
            and its settings; `clip_grad`, `lr_warmup_steps`).
        micro_batch_size, global_batch_size: `actor.micro_batch_size` (samples per backward pass) and
            `actor.global_batch_size` (samples per optimizer step).
        generator: Shuffling generator.
        start_step: Policy-training optimizer steps taken before this call (the linear learning-rate warmup
            counts those alone: critic warm-up steps run at the full lr and leave the warmup for the policy).
        train_policy: False during critic warm-up: only the value loss is minimised (the policy's outputs
            are still computed for the metrics). Only the value head and what feeds it get gradients: with
            `actor.model.extra.detach_critic_input=false` (shared backbone) the value loss still moves the
            backbone, and with it the policy; `detach_critic_input=true` keeps the policy frozen.
        rank, world_size: This process in a sharded (FSDP2) actor group.
        layout: With several ranks, where the whole rollout's samples live (`data_parallel.SampleLayout`):
            `batch` is then this rank's share. Every rank passes the same `generator` state and draws the same
            minibatches of the whole rollout; rank r trains on the samples of each minibatch it holds, and the
            metrics are summed over the ranks, so every rank returns the metrics of whole minibatches (as one
            process would) and takes the same early-stop decision. None: `batch` is the whole rollout.
        reference: The frozen reference policy of the KL penalty (`algo.kl_beta > 0`): the rollout's log-probs
            under it are computed once, before the first pass (`reference_logprobs`), and `kl_beta` x the
            `algo.kl_penalty` estimate of KL(policy || reference) is added to the loss (metric
            `train/actor/kl_loss`). Required when `algo.kl_beta > 0`, ignored otherwise.
        lr_scale: This iteration's learning-rate decay factor (`lr_decay_scale`); the warmup scales on top of it.

    Early stop: with `algo.target_kl` set, the passes over this rollout end after the first minibatch whose
    approx-KL to the rollout policy exceeds it (metric `train/actor/early_stopped`).

    Returns:
        (mean metrics over minibatches, number of optimizer steps). `numerics.NONFINITE_FINAL_LOSS` is 1.0 when
        the last minibatch's loss was non-finite after earlier minibatches stepped: the weights it returns with
        give that loss.
    """
    if algo.kl_beta > 0 and reference is None:
        raise ValueError(f"ppo_update: kl_beta={algo.kl_beta} needs the reference policy (`reference`)")
    loss_fn, settings = get_policy_loss(algo.loss_type), LossSettings.from_config(algo)
    whole = layout if layout is not None else batch  # the whole rollout's masks and loss weights
    idx_all = torch.nonzero(whole.mask, as_tuple=False).squeeze(-1)
    n = len(idx_all)
    if n == 0:
        return {"train/actor/num_samples": 0.0}, 0
    ref_logprobs = None
    if algo.kl_beta > 0:
        ref_logprobs = reference_logprobs(
            reference, batch, idx_all, micro_batch_size, layout=layout, rank=rank
        )
    params = [p for g in optimizer.param_groups for p in g["params"]]
    sums: dict[str, float] = {}
    count = 0
    steps = 0
    first_kl = 0.0
    stopped = False
    stepped = False  # some minibatch of this update stepped the optimizer
    final_loss_bad = False
    for _ in range(algo.update_epoch):
        if stopped:
            break
        perm = idx_all[torch.randperm(n, generator=generator)]
        for start in range(0, n, global_batch_size):
            mb = perm[start : start + global_batch_size]
            optimizer.zero_grad(set_to_none=True)
            set_warmup_lr(
                optimizer, start_step + steps, optim.lr_warmup_steps if train_policy else 0, lr_scale
            )
            weight_sums = minibatch_weight_sums(  # of the whole minibatch: every rank holds its loss weights
                settings,
                (len(mb), *batch.old_logprobs.shape[1:]),
                sample_weight=None if whole.sample_weight is None else whole.sample_weight[mb],
                action_mask=None if whole.action_mask is None else whole.action_mask[mb],
            )
            acc: dict[str, float] = {}  # this rank's part of the minibatch's metrics
            for micro in micro_batches(mb, layout, rank, micro_batch_size):
                padding = len(micro) == 0  # FSDP: every rank runs as many passes; this one counts for nothing
                inputs = micro_batch_inputs(
                    policy,
                    batch,
                    torch.zeros(1, dtype=torch.long) if padding else micro,
                    critic=loss_fn.uses_critic,
                    train_policy=train_policy,
                    ref_logprobs=ref_logprobs,
                )
                loss, terms = loss_fn(inputs, settings, weight_sums)
                # FSDP averages the gradients over the ranks: x world_size makes them the sum of the ranks' parts
                (loss * (0.0 if padding else float(world_size))).backward()
                for k, v in _train_metrics(loss, terms).items():  # every rank reports the same keys
                    acc[k] = acc.get(k, 0.0) + (0.0 if padding else float(v))
            acc = all_reduce_sums(acc)  # the whole minibatch's metrics
            grad_norm = clip_grad_norm(params, optim.clip_grad if optim.clip_grad > 0 else float("inf"))
            took_step = finite_optimizer_step(optimizer, grad_norm, acc)  # NaN/inf: no step, counted
            # the last minibatch's loss is that of the weights the update ends with when it took no step
            final_loss_bad = stepped and not took_step
            stepped = stepped or took_step
            steps += 1
            acc["train/actor/grad_norm"] = float(grad_norm)
            if count == 0:  # before any step on this rollout the ratio must be exactly 1 (rollout == actor)
                first_kl = acc.get("train/actor/approx_kl", 0.0)
            for k, v in acc.items():
                sums[k] = sums.get(k, 0.0) + v
            count += 1
            if (
                algo.target_kl is not None
                and train_policy
                and acc.get("train/actor/approx_kl", 0.0) > algo.target_kl
            ):
                stopped = True
                break
    out = {k: v / count for k, v in sums.items()}
    out["train/actor/early_stopped"] = float(stopped)
    out["train/actor/policy_trained"] = float(train_policy)
    out["train/actor/lr"] = float(optimizer.param_groups[0]["lr"])
    out["train/actor/first_minibatch_approx_kl"] = first_kl
    out["train/actor/num_samples"] = float(n)
    out[NONFINITE_FINAL_LOSS] = float(final_loss_bad)
    return out, steps


def _train_metrics(loss: torch.Tensor, terms: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A micro-batch's loss and the loss's terms as `train/*` metrics. The runner logs the critic's explained
    variance over the whole rollout instead (a micro-batch's can be NaN)."""
    metrics = {f"train/{k}": v for k, v in terms.items() if k != "critic/explained_variance"}
    metrics["train/entropy_loss"] = terms["actor/entropy_loss"]
    metrics["train/loss"] = loss.detach()
    return metrics


def reference_logprobs(
    reference: Policy,
    batch: SampleBatch,
    samples: torch.Tensor,
    micro_batch_size: int,
    *,
    layout: SampleLayout | None = None,
    rank: int = 0,
) -> torch.Tensor:
    """Token log-probs of `batch`'s decisions under the frozen `reference` policy, like `batch.old_logprobs`
    (float32 CPU [N, C, A]; rows outside `samples` are 0).

    Args:
        samples: The sample indices that enter the loss (of the whole rollout when `layout` is given).
        micro_batch_size: Decisions per forward pass.
        layout, rank: As `ppo_update`'s: every rank runs as many passes as the rank with the most samples (a
            sharded reference's gathers must match), padding with a pass whose result is dropped.
    """
    out = torch.zeros_like(batch.old_logprobs, dtype=torch.float32)
    with torch.no_grad():
        for rows in micro_batches(samples, layout, rank, micro_batch_size):
            idx = rows if len(rows) else torch.zeros(1, dtype=torch.long)
            logprobs = reference.evaluate(
                {k: v[idx] for k, v in batch.forward_inputs.items()}, compute_values=False
            )[0]
            if len(rows):
                out[rows] = logprobs.float().cpu()
    return out


def set_warmup_lr(optimizer: torch.optim.Optimizer, step: int, warmup_steps: int, scale: float = 1.0) -> None:
    """Linear warmup: lr = base_lr * scale * min(1, (step + 1) / warmup_steps) (a function of the step and of
    `scale`, the decay factor of the current iteration (`lr_decay_scale`): resume-exact)."""
    for group in optimizer.param_groups:
        base = group.setdefault("base_lr", group["lr"]) * scale
        group["lr"] = base * min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else base


def lr_decay_scale(style: str, iteration: int, num_iterations: int, min_ratio: float = 0.0) -> float:
    """The learning-rate factor of training iteration `iteration` (0-based) of `num_iterations`.

    `constant`: 1. `linear` / `cosine`: from 1 at the first iteration towards `min_ratio` (`min_lr / lr`), reached
    one iteration after the last, so the last iteration still trains (linear: 1 - (1 - min_ratio) * i / n).
    """
    if style == "constant" or num_iterations <= 0:
        return 1.0
    progress = min(max(iteration / num_iterations, 0.0), 1.0)
    if style == "linear":
        shape = 1.0 - progress
    elif style == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"lr_decay_style={style!r} is not one of: constant, linear, cosine")
    return min_ratio + (1.0 - min_ratio) * shape
