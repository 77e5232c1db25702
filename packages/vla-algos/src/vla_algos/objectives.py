"""The policy objectives a config selects with ``loss_type``: ``actor_critic`` (PPO) and ``actor`` (GRPO).

The loss composition lives here: ``loss = policy_loss - entropy_coef * entropy [+ kl_coef * kl_to_reference]
[+ value_coef * value_loss]``.
Both objectives take the same keyword arguments so a trainer has one call site (``actor`` ignores the critic
inputs); register another with :func:`vla_algos.register_policy_loss`. Metric keys carry an ``actor/`` or
``critic/`` prefix (log them under ``train/``).
"""

from __future__ import annotations

import torch

from vla_algos.aggregation import agg_loss
from vla_algos.kl import kl_penalty
from vla_algos.policy_loss import entropy_loss, ppo_actor_loss
from vla_algos.value_loss import explained_variance, value_loss


def actor_loss(
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    clip_ratio_low: float,
    clip_ratio_high: float,
    dual_clip: float | None = None,
    clip_log_ratio_min: float | None = None,
    clip_log_ratio_max: float | None = None,
    entropy: torch.Tensor | None = None,
    entropy_mask: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    weight_sum: torch.Tensor | float | None = None,
    entropy_weight_sum: torch.Tensor | float | None = None,
    train_policy: bool = True,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_kind: str = "k3",
    values: torch.Tensor | None = None,
    old_values: torch.Tensor | None = None,
    returns: torch.Tensor | None = None,
    value_mask: torch.Tensor | None = None,
    value_clip: float | None = None,
    huber_delta: float | None = None,
    value_coef: float = 1.0,
    value_weight_sum: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clip policy loss minus an entropy bonus (``loss_type: actor``, GRPO). Critic arguments are
    accepted and ignored.

    Args:
        logprobs: as :func:`vla_algos.ppo_actor_loss`, as are the arguments up to ``clip_log_ratio_max``.
        old_logprobs: as there.
        advantages: as there.
        mask: as there (it may hold float loss weights).
        clip_ratio_low: as there.
        clip_ratio_high: as there.
        dual_clip: as there.
        clip_log_ratio_min: as there.
        clip_log_ratio_max: as there.
        entropy: per-entry entropy (with grad) for the bonus and the ``actor/entropy_loss`` metric, or None.
        entropy_mask: mask of ``entropy`` (as :func:`vla_algos.entropy_loss`).
        entropy_coef: weight of the entropy bonus (subtracted).
        weight_sum: normaliser of the policy and KL terms (weights ``mask``); ``entropy_weight_sum`` is the
            normaliser of the entropy term (weights ``entropy_mask``), as :func:`vla_algos.agg_loss`: each term is
            ``sum(w * x) / weight_sum``. For one micro-batch of a minibatch, the :func:`vla_algos.total_weight` of
            the whole minibatch's entries (computed once per minibatch), so that micro-batches (and ranks) add up
            to the minibatch's weighted mean, loss, metrics and gradient alike. None: the masked means over these
            entries.
        entropy_weight_sum: normaliser of the entropy term, as ``weight_sum``.
        train_policy: False during a critic warm-up: the policy, entropy and KL terms give no gradient (their
            metrics are still returned).
        ref_logprobs: ``[*S]`` log-probs of the same entries under a frozen reference policy (e.g. the
            fine-tuning's starting point), or None: no KL term.
        kl_coef: weight of the KL penalty ``agg_loss(kl_penalty(logprobs, ref_logprobs, kl_kind), mask,
            weight_sum=weight_sum)`` (added; normalised like the policy term).
        kl_kind: estimator of :func:`vla_algos.kl_penalty` (``k1``, ``k2``, ``k3``, ``abs``).

    Returns:
        ``(loss, metrics)``: 0-d loss with grad; metrics (0-d detached tensors) ``actor/policy_loss``,
        ``actor/approx_kl``, ``actor/clip_fraction``, ``actor/clipped_ratio``, ``actor/dual_clip_fraction``,
        ``actor/ratio``, with ``entropy`` ``actor/entropy_loss``, and with ``ref_logprobs`` ``actor/kl_loss``
        (the penalty's estimate of KL(policy || reference), before ``kl_coef``).
    """
    del values, old_values, returns, value_mask, value_clip, huber_delta, value_coef, value_weight_sum
    loss, metrics = ppo_actor_loss(
        logprobs,
        old_logprobs,
        advantages,
        mask,
        clip_ratio_low=clip_ratio_low,
        clip_ratio_high=clip_ratio_high,
        dual_clip=dual_clip,
        clip_log_ratio_min=clip_log_ratio_min,
        clip_log_ratio_max=clip_log_ratio_max,
        weight_sum=weight_sum,
    )
    out = {"actor/policy_loss": loss.detach()}
    out.update({f"actor/{k}": v for k, v in metrics.items()})
    if entropy is not None:
        entropy_mean = entropy_loss(entropy, entropy_mask, weight_sum=entropy_weight_sum)
        loss = loss - entropy_coef * entropy_mean
        out["actor/entropy_loss"] = entropy_mean.detach()
    if ref_logprobs is not None:
        kl = agg_loss(kl_penalty(logprobs, ref_logprobs, kl_kind), mask, weight_sum=weight_sum)
        loss = loss + kl_coef * kl
        out["actor/kl_loss"] = kl.detach()
    if not train_policy:
        loss = torch.zeros((), dtype=loss.dtype, device=loss.device)
    return loss, out


def actor_critic_loss(
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    clip_ratio_low: float,
    clip_ratio_high: float,
    dual_clip: float | None = None,
    clip_log_ratio_min: float | None = None,
    clip_log_ratio_max: float | None = None,
    entropy: torch.Tensor | None = None,
    entropy_mask: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    weight_sum: torch.Tensor | float | None = None,
    entropy_weight_sum: torch.Tensor | float | None = None,
    train_policy: bool = True,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_kind: str = "k3",
    values: torch.Tensor | None = None,
    old_values: torch.Tensor | None = None,
    returns: torch.Tensor | None = None,
    value_mask: torch.Tensor | None = None,
    value_clip: float | None = None,
    huber_delta: float | None = None,
    value_coef: float = 1.0,
    value_weight_sum: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """:func:`actor_loss` plus ``value_coef`` times the critic loss (``loss_type: actor_critic``, PPO).

    Args:
        logprobs: as :func:`actor_loss`, as are the arguments up to ``kl_kind`` (``train_policy=False`` keeps the
            critic term).
        values: ``[*V]`` critic input (required), as :func:`vla_algos.value_loss`.
        old_values: ``[*V]`` critic input (required), as there.
        returns: ``[*V]`` critic input (required), as there.
        value_mask: mask of the critic terms, ``[*V]`` or a leading part; None: all entries (the policy
            ``mask`` may be per action or hold loss weights, the critic has one value per sample).
        value_clip: as :func:`vla_algos.value_loss`.
        huber_delta: as :func:`vla_algos.value_loss`.
        value_coef: weight of the critic loss.
        value_weight_sum: normaliser of the critic terms (weights ``value_mask``), as ``weight_sum`` for the
            policy term; None: their masked mean.

    Returns:
        ``(loss, metrics)``: metrics of :func:`actor_loss` plus ``critic/value_loss``,
        ``critic/value_clip_ratio``, ``critic/explained_variance`` (0-d detached tensors; the explained
        variance is NaN when the returns have zero variance).
    """
    missing = [
        n for n, x in (("values", values), ("old_values", old_values), ("returns", returns)) if x is None
    ]
    if missing:
        raise ValueError(f"actor_critic_loss: {', '.join(f'`{n}`' for n in missing)} required (got None)")
    assert values is not None and old_values is not None and returns is not None  # for type checkers
    loss, metrics = actor_loss(
        logprobs=logprobs,
        old_logprobs=old_logprobs,
        advantages=advantages,
        mask=mask,
        clip_ratio_low=clip_ratio_low,
        clip_ratio_high=clip_ratio_high,
        dual_clip=dual_clip,
        clip_log_ratio_min=clip_log_ratio_min,
        clip_log_ratio_max=clip_log_ratio_max,
        entropy=entropy,
        entropy_mask=entropy_mask,
        entropy_coef=entropy_coef,
        weight_sum=weight_sum,
        entropy_weight_sum=entropy_weight_sum,
        train_policy=train_policy,
        ref_logprobs=ref_logprobs,
        kl_coef=kl_coef,
        kl_kind=kl_kind,
    )
    critic, critic_metrics = value_loss(
        values,
        old_values,
        returns,
        value_mask,
        value_clip=value_clip,
        huber_delta=huber_delta,
        weight_sum=value_weight_sum,
    )
    metrics["critic/value_loss"] = critic_metrics["value_loss"]
    metrics["critic/value_clip_ratio"] = critic_metrics["value_clip_ratio"]
    metrics["critic/explained_variance"] = explained_variance(values, returns, value_mask)
    return loss + value_coef * critic, metrics
