"""Clipped PPO policy loss (Schulman et al. 2017) with asymmetric clipping and optional dual clip; entropy term."""

from __future__ import annotations

import torch

from vla_algos._checks import check_finite_where, check_float, check_same_shape, expand_leading
from vla_algos.aggregation import agg_loss


def ppo_actor_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    clip_ratio_low: float,
    clip_ratio_high: float,
    dual_clip: float | None = None,
    clip_log_ratio_min: float | None = None,
    clip_log_ratio_max: float | None = None,
    weight_sum: torch.Tensor | float | None = None,
    check_finite: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clip surrogate loss, averaged over the masked entries (or their part of a larger set's average).

    With ``ratio = exp(logprobs - old_logprobs)`` the per-entry loss is
    ``max(-A * ratio, -A * clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high))``; with ``dual_clip = c``
    (Ye et al. 2020) entries with ``A < 0`` are further capped at ``-A * c``, so a huge ratio cannot blow
    the loss up.

    Args:
        logprobs: ``[*S]`` log-probs under the policy being trained (with grad), at the chosen granularity
            (e.g. ``[B, C, A]`` tokens, see :func:`vla_algos.reduce_logprobs`).
        old_logprobs: ``[*S]`` log-probs recorded at rollout time.
        advantages: ``[*S]`` or a leading part of it (e.g. ``[B]`` or ``[B, C]`` for ``[B, C, A]`` logprobs):
            broadcast over the trailing dims.
        mask: ``[*S]`` or a leading part of it, bool or float weights; None = all entries.
        clip_ratio_low: ``eps_low`` in [0, 1): ratio floor ``1 - eps_low``.
        clip_ratio_high: ``eps_high`` >= 0: ratio ceiling ``1 + eps_high`` (clip-higher: 0.28 vs 0.2).
        dual_clip: ``c > 1`` or None.
        clip_log_ratio_min: lower bound of ``logprobs - old_logprobs`` before the exponential (None: unbounded): a
            far-off log-prob cannot overflow the ratio; outside the bounds the entry gets no gradient.
        clip_log_ratio_max: upper bound of the same (None: unbounded).
        weight_sum: the normaliser of the loss and the metrics, ``sum(mask * x) / weight_sum``
            (:func:`vla_algos.agg_loss`): the :func:`vla_algos.total_weight` of the whole minibatch when these
            entries are one micro-batch of it. None: the masked mean over these entries.
        check_finite: raise ``ValueError`` on NaN/inf in any input.

    Returns:
        ``(loss, metrics)``: ``loss`` a 0-d tensor with grad. ``metrics`` maps to 0-d *detached tensors* on
        the input device (call ``float()`` when logging; no host sync here), all masked means (normalised by
        ``weight_sum`` when given):

        - ``approx_kl``: ``(ratio - 1) - log(ratio)`` (k3 estimator of KL(old || new), >= 0)
        - ``clip_fraction``: share of entries where the clipped term is the active (larger) one
        - ``clipped_ratio``: mean of ``clamp(ratio, 1 - eps_low, 1 + eps_high)``
        - ``dual_clip_fraction``: share of entries capped by the dual clip (0 without it)
        - ``ratio``: mean of the unclipped ratio
    """
    fn = "ppo_actor_loss"
    check_float(fn, "logprobs", logprobs)
    check_float(fn, "old_logprobs", old_logprobs)
    check_float(fn, "advantages", advantages)
    check_same_shape(fn, "logprobs", logprobs, old_logprobs=old_logprobs)
    adv = expand_leading(fn, "advantages", advantages, logprobs, "logprobs")
    if mask is not None:
        mask = expand_leading(fn, "mask", mask, logprobs, "logprobs")
    if not 0.0 <= clip_ratio_low < 1.0:
        raise ValueError(f"{fn}: `clip_ratio_low` must be in [0, 1), got {clip_ratio_low!r}")
    if not clip_ratio_high >= 0.0:
        raise ValueError(f"{fn}: `clip_ratio_high` must be >= 0, got {clip_ratio_high!r}")
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"{fn}: `dual_clip` must be > 1 or None, got {dual_clip!r}")
    if (
        clip_log_ratio_min is not None
        and clip_log_ratio_max is not None
        and not clip_log_ratio_min <= clip_log_ratio_max
    ):
        raise ValueError(
            f"{fn}: `clip_log_ratio_min` ({clip_log_ratio_min!r}) must be <= `clip_log_ratio_max` "
            f"({clip_log_ratio_max!r})"
        )
    if check_finite:
        check_finite_where(fn, mask, logprobs=logprobs, old_logprobs=old_logprobs, advantages=adv)

    log_ratio = logprobs - old_logprobs
    if clip_log_ratio_min is not None or clip_log_ratio_max is not None:
        log_ratio = torch.clamp(log_ratio, min=clip_log_ratio_min, max=clip_log_ratio_max)
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * clipped_ratio
    per_entry = torch.maximum(loss_unclipped, loss_clipped)
    if dual_clip is not None:
        cap = -adv * dual_clip
        dual_active = (adv < 0) & (per_entry > cap)
        per_entry = torch.where(adv < 0, torch.minimum(per_entry, cap), per_entry)
    else:
        dual_active = torch.zeros_like(per_entry, dtype=torch.bool)
    loss = agg_loss(per_entry, mask, weight_sum=weight_sum)

    with torch.no_grad():
        metrics = {
            "approx_kl": agg_loss(torch.expm1(log_ratio) - log_ratio, mask, weight_sum=weight_sum),
            "clip_fraction": agg_loss(
                (loss_clipped > loss_unclipped).to(ratio.dtype), mask, weight_sum=weight_sum
            ),
            "clipped_ratio": agg_loss(clipped_ratio, mask, weight_sum=weight_sum),
            "dual_clip_fraction": agg_loss(dual_active.to(ratio.dtype), mask, weight_sum=weight_sum),
            "ratio": agg_loss(ratio, mask, weight_sum=weight_sum),
        }
    return loss, {k: v.detach() for k, v in metrics.items()}


def entropy_loss(
    entropy: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    weight_sum: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """Masked mean policy entropy (the ``entropy_loss`` metric); subtract ``coef * entropy_loss`` from the loss
    to encourage exploration.

    Args:
        entropy: ``[*S]`` per-entry entropy (with grad).
        mask: ``[*S]`` or a leading part of it; None = all entries.
        weight_sum: normaliser of the masked sum (:func:`vla_algos.agg_loss`); None: the masked mean.

    Returns:
        0-d tensor with grad.
    """
    check_float("entropy_loss", "entropy", entropy)
    if mask is not None:
        mask = expand_leading("entropy_loss", "mask", mask, entropy, "entropy")
    return agg_loss(entropy, mask, weight_sum=weight_sum)
