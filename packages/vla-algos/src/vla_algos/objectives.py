"""The policy objectives a config selects with ``loss_type``: ``actor_critic`` (PPO) and ``actor`` (GRPO).

Each takes ``(inputs, settings, weight_sums)``, the shape of verl's policy losses: the tensors of one call
(:class:`vla_algos.LossInputs`), the hyper-parameters under their config names (:class:`vla_algos.LossSettings`)
and the normalisers of its terms (:class:`vla_algos.WeightSums`; the whole minibatch's when the call is one
micro-batch of it). The composition::

    loss = policy_loss - entropy_bonus * entropy [+ kl_beta * kl_to_reference] [+ value_loss_coef * value_loss]

Register another objective with :func:`vla_algos.register_policy_loss`. Metric keys carry an ``actor/`` or
``critic/`` prefix (log them under ``train/``); every metric is in :func:`vla_algos.agg_loss` form, so a trainer
adds the micro-batches' metrics up.

Example (one PPO update of a plain policy: one log-prob per decision)::

    import torch
    from vla_algos import LossInputs, LossSettings, get_policy_loss

    n = 64
    new_logp = torch.randn(n, requires_grad=True)
    loss, metrics = get_policy_loss("actor_critic")(
        LossInputs(
            logprobs=new_logp, old_logprobs=new_logp.detach(), advantages=torch.randn(n),
            values=torch.randn(n, requires_grad=True), old_values=torch.randn(n), returns=torch.randn(n),
        ),
        LossSettings(clip_ratio_low=0.2, clip_ratio_high=0.2, value_loss_coef=0.5),
    )
    loss.backward()
"""

from __future__ import annotations

import torch

from vla_algos.aggregation import agg_loss, entry_weights
from vla_algos.granularity import advantages_per_ratio
from vla_algos.kl import kl_penalty
from vla_algos.loss_inputs import LossInputs, WeightSums, at_level
from vla_algos.loss_settings import LossSettings
from vla_algos.policy_loss import entropy_loss, ppo_actor_loss
from vla_algos.value_loss import explained_variance, value_loss


def actor_loss(
    inputs: LossInputs, settings: LossSettings, weight_sums: WeightSums | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clip policy loss minus the entropy bonus [plus the KL penalty] (``loss_type: actor``, GRPO). The
    critic inputs are ignored.

    The ratio is taken at ``settings.logprob_type`` (:func:`vla_algos.reduce_logprobs`), over the entries
    ``sample_weight`` x executed actions weigh (:func:`vla_algos.entry_weights`); per-action advantages are
    averaged over a decision's executed actions for a ratio per decision. The entropy term averages
    ``inputs.entropy`` at ``settings.entropy_type`` over the executed actions; the KL term
    ``kl_penalty(logprobs, ref_logprobs, settings.kl_penalty)`` is weighted and normalised like the policy term.

    Args:
        inputs: the tensors of this call (``entropy`` and ``ref_logprobs`` optional).
        settings: ``clip_ratio_low``, ``clip_ratio_high``, ``clip_ratio_c`` (dual clip), ``clip_log_ratio_min`` /
            ``clip_log_ratio_max``, ``entropy_bonus``, ``kl_beta``, ``kl_penalty``, ``logprob_type``,
            ``entropy_type`` (the critic's settings are ignored).
        weight_sums: normalisers of the policy / KL term and of the entropy term; None: the masked means over
            this call's entries.

    Returns:
        ``(loss, metrics)``: 0-d loss with grad (0 without grad when ``inputs.train_policy`` is False); metrics
        (0-d detached tensors) ``actor/policy_loss``, ``actor/approx_kl``, ``actor/clip_fraction``,
        ``actor/clipped_ratio``, ``actor/dual_clip_fraction``, ``actor/ratio``, with ``entropy``
        ``actor/entropy_loss``, and with ``ref_logprobs`` ``actor/kl_loss`` (the estimate of KL(policy ||
        reference), before ``kl_beta``).
    """
    sums = weight_sums if weight_sums is not None else WeightSums()
    logprobs = at_level(inputs.logprobs, settings.logprob_type)
    mask = entry_weights(inputs.sample_weight, inputs.action_mask, ndim=logprobs.ndim)
    loss, metrics = ppo_actor_loss(
        logprobs,
        at_level(inputs.old_logprobs, settings.logprob_type),
        advantages_per_ratio(inputs.advantages, logprobs.ndim, inputs.action_mask),
        mask,
        clip_ratio_low=settings.clip_ratio_low,
        clip_ratio_high=settings.clip_ratio_high,
        dual_clip=settings.clip_ratio_c,
        clip_log_ratio_min=settings.clip_log_ratio_min,
        clip_log_ratio_max=settings.clip_log_ratio_max,
        weight_sum=sums.policy,
    )
    out = {"actor/policy_loss": loss.detach()}
    out.update({f"actor/{k}": v for k, v in metrics.items()})
    if inputs.entropy is not None:
        entropy = at_level(inputs.entropy, settings.entropy_type)
        entropy_mask = entry_weights(None, inputs.action_mask, ndim=entropy.ndim)
        entropy_mean = entropy_loss(entropy, entropy_mask, weight_sum=sums.entropy)
        loss = loss - settings.entropy_bonus * entropy_mean
        out["actor/entropy_loss"] = entropy_mean.detach()
    if inputs.ref_logprobs is not None:
        ref_logprobs = at_level(inputs.ref_logprobs, settings.logprob_type)
        kl = agg_loss(kl_penalty(logprobs, ref_logprobs, settings.kl_penalty), mask, weight_sum=sums.policy)
        loss = loss + settings.kl_beta * kl
        out["actor/kl_loss"] = kl.detach()
    if not inputs.train_policy:
        loss = torch.zeros((), dtype=loss.dtype, device=loss.device)
    return loss, out


def actor_critic_loss(
    inputs: LossInputs, settings: LossSettings, weight_sums: WeightSums | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """:func:`actor_loss` plus ``settings.value_loss_coef`` times the critic loss (``loss_type: actor_critic``,
    PPO); during a critic warm-up (``inputs.train_policy=False``) the critic term alone.

    The critic term is :func:`vla_algos.value_loss` of ``inputs.values`` / ``old_values`` / ``returns`` (required)
    under ``value_mask``, with ``settings.value_clip`` (as ``settings.value_clip_mode`` says) and
    ``settings.huber_delta``, normalised by
    ``weight_sums.value``.

    Returns:
        ``(loss, metrics)``: metrics of :func:`actor_loss` plus ``critic/value_loss``, ``critic/value_clip_ratio``,
        ``critic/explained_variance`` (0-d detached tensors; the explained variance is NaN when the returns have
        zero variance, and a trainer that splits a minibatch logs it over the whole rollout instead).

    Raises:
        ValueError: ``values``, ``old_values`` or ``returns`` is None (the message names them).
    """
    values, old_values, returns = inputs.values, inputs.old_values, inputs.returns
    missing = [
        n for n, x in (("values", values), ("old_values", old_values), ("returns", returns)) if x is None
    ]
    if missing:
        raise ValueError(f"actor_critic_loss: {', '.join(f'`{n}`' for n in missing)} required (got None)")
    assert values is not None and old_values is not None and returns is not None  # for type checkers
    loss, metrics = actor_loss(inputs, settings, weight_sums)
    critic, critic_metrics = value_loss(
        values,
        old_values,
        returns,
        inputs.value_mask,
        value_clip=settings.value_clip,
        value_clip_mode=settings.value_clip_mode,
        huber_delta=settings.huber_delta,
        weight_sum=None if weight_sums is None else weight_sums.value,
    )
    metrics["critic/value_loss"] = critic_metrics["value_loss"]
    metrics["critic/value_clip_ratio"] = critic_metrics["value_clip_ratio"]
    metrics["critic/explained_variance"] = explained_variance(values, returns, inputs.value_mask)
    return loss + settings.value_loss_coef * critic, metrics
