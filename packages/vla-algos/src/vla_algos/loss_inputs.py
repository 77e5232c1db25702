"""What a registered loss is given besides its :class:`vla_algos.LossSettings`: the tensors of one call
(:class:`LossInputs`) and the weight sums that normalise them (:class:`WeightSums`).

A minibatch may be split into micro-batches (gradient accumulation, data-parallel ranks). Each micro-batch's terms
are ``sum(w * x) / W`` (verl's ``agg_loss`` form, :func:`vla_algos.agg_loss`), ``W`` the weight of the whole
minibatch's entries (:func:`minibatch_weight_sums`, computed once per minibatch from its masks alone): the
micro-batches' losses, metrics and gradients then add up to the minibatch's weighted mean, whatever the split.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vla_algos.aggregation import entry_weights, total_weight
from vla_algos.granularity import LOGPROB_LEVELS, reduce_logprobs
from vla_algos.loss_settings import LossSettings


@dataclass
class LossInputs:
    """The tensors of one loss call: ``n`` samples (a micro-batch, or a whole batch).

    A sample is one policy decision: ``C`` actions (a chunk; 1 for a plain policy) of ``A`` tokens each (the
    action's dims). The loss takes the ratio at ``LossSettings.logprob_type`` (:func:`at_level`); with
    ``token_level`` any shape ``[n, ...]`` is taken as it is, e.g. ``[n]`` for one log-prob per decision.

    Attributes:
        logprobs: ``[n, C, A]`` token log-probs under the policy being trained (with grad).
        old_logprobs: the same entries' log-probs at rollout time.
        advantages: ``[n]``, or ``[n, C]`` per action (averaged over the executed actions when the ratio is taken
            per decision).
        sample_weight: ``[n]`` the weight of each sample's loss entries (the ``loss_agg_mode`` weights), or a bool
            mask of the samples that count; None: 1 each.
        action_mask: bool ``[n, C]`` the actions the env executed (an episode that ends inside a chunk ignores its
            later actions: they get no ratio and no entropy); None: all of them.
        entropy: per-token entropies, the shape of ``logprobs`` (``LossSettings.entropy_type`` reduces them), with
            grad; None: no entropy term.
        ref_logprobs: the same entries' log-probs under a frozen reference policy (e.g. the fine-tuning's starting
            point); None: no KL term.
        values: ``[n]`` the critic's predictions (with grad); with ``old_values`` and ``returns`` required by a
            loss that ``uses_critic``, ignored by the others.
        old_values: ``[n]`` the critic's predictions at rollout time.
        returns: ``[n]`` the value targets.
        value_mask: ``[n]`` bool or weights of the critic terms; None: every sample.
        train_policy: False during a critic warm-up: the policy, entropy and KL terms give no gradient (their
            metrics are still returned).
    """

    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    sample_weight: torch.Tensor | None = None
    action_mask: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    value_mask: torch.Tensor | None = None
    train_policy: bool = True


@dataclass(frozen=True)
class WeightSums:
    """The normalisers of one call's loss terms, each ``sum(w * x) / weight sum`` (:func:`vla_algos.agg_loss`).

    For a micro-batch, those of its whole minibatch (:func:`minibatch_weight_sums`): the micro-batches (and ranks)
    then add up to the minibatch's weighted mean. None: the term's masked mean over this call's own entries (all
    of them by default: ``WeightSums()``).

    Attributes:
        policy: the policy and KL terms (weights: ``sample_weight`` x executed actions, per log-prob entry).
        entropy: the entropy term (weights: executed actions, per entropy entry).
        value: the critic term (weights: ``value_mask``, one per sample).
    """

    policy: torch.Tensor | float | None = None
    entropy: torch.Tensor | float | None = None
    value: torch.Tensor | float | None = None


def at_level(x: torch.Tensor, level: str) -> torch.Tensor:
    """Token log-probs (or entropies) summed to ``level`` (:func:`vla_algos.reduce_logprobs`); ``token_level``
    takes any shape as it is."""
    if level == "token_level":
        return x
    return reduce_logprobs(x, level)


def _level_shape(shape: tuple[int, ...], level: str) -> tuple[int, ...]:
    if level not in LOGPROB_LEVELS:
        raise ValueError(f"unknown level {level!r}; valid: {', '.join(LOGPROB_LEVELS)}")
    if level != "token_level" and len(shape) != 3:
        raise ValueError(f"a {level} ratio needs token log-probs of shape [n, C, A], got {tuple(shape)}")
    return {"token_level": shape, "action_level": shape[:2], "chunk_level": shape[:1]}[level]


def minibatch_weight_sums(
    settings: LossSettings,
    shape: tuple[int, ...] | torch.Size,
    *,
    sample_weight: torch.Tensor | None = None,
    action_mask: torch.Tensor | None = None,
    value_mask: torch.Tensor | None = None,
) -> WeightSums:
    """The :class:`WeightSums` of a whole minibatch, from its masks alone (no log-probs needed): computed once per
    minibatch and given to the loss call of each of its micro-batches.

    Args:
        settings: the loss's settings (``logprob_type`` and ``entropy_type`` say what an entry is).
        shape: the shape of the minibatch's token log-probs, ``[n, C, A]`` (entropies have the same shape).
        sample_weight: the minibatch's, as :class:`LossInputs` holds it.
        action_mask: the minibatch's, as :class:`LossInputs` holds it.
        value_mask: the minibatch's, as :class:`LossInputs` holds it.

    Returns:
        Python floats (every rank of a data-parallel group that holds the whole minibatch's masks computes the
        same sums, no collective needed).
    """
    shape = tuple(shape)
    policy_shape = _level_shape(shape, settings.logprob_type)
    entropy_shape = _level_shape(shape, settings.entropy_type)
    policy = entry_weights(sample_weight, action_mask, ndim=len(policy_shape))
    entropy = entry_weights(None, action_mask, ndim=len(entropy_shape))
    return WeightSums(
        policy=float(total_weight(policy, policy_shape)),
        entropy=float(total_weight(entropy, entropy_shape)),
        value=float(total_weight(value_mask, shape[:1])),
    )
