"""Name registries, so a config says ``adv_type``, ``loss_type`` and ``loss_agg_mode`` and a trainer looks
the name up instead of branching on it.

Each entry states what a trainer must provide, so the trainer asks the entry, never the name:

- an advantage estimator (:mod:`vla_algos.estimators`) says whether it ``needs_values`` (the critic's values: the
  loss must train a critic), whether it scores ``grouped_starts`` (group-relative: groups of ``group_size >= 2``
  envs reset to one start state, one episode each, so no auto-reset; the rollout may stop once every env's first
  episode ended, and a group is never split across pipeline stages or ranks), whether its advantages come
  ``group_normalized`` (already divided by their group's std: rollout-wide whitening is not applied to them
  again) and whether they rank ``episode_scores`` (each env's first-episode score: the sum of its rewards, or of
  ``gamma**t * reward`` with ``discount_scores``, which then needs ``gamma > 0``);
- a policy loss (:mod:`vla_algos.objectives`) is called ``fn(inputs, settings, weight_sums)``
  (:class:`vla_algos.LossInputs`, :class:`vla_algos.LossSettings`, :class:`vla_algos.WeightSums`) and says whether
  it ``uses_critic`` (a value term: it needs the policy's value head, the rollout's values and value targets);
- a loss aggregation mode (:mod:`vla_algos.aggregation`) maps ``(loss_mask, done)`` to per-decision weights.

Adding one is one call: ``register_advantage_estimator("rloo", fn, grouped_starts=True)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from vla_algos.aggregation import episode_mean_weights, token_mean_weights
from vla_algos.estimators import gae_estimator, grpo_estimator
from vla_algos.loss_inputs import LossInputs, WeightSums
from vla_algos.loss_settings import LossSettings
from vla_algos.objectives import actor_critic_loss, actor_loss


@dataclass(frozen=True)
class AdvantageEstimator:
    """A registered ``adv_type``: call it like its function (keywords of :mod:`vla_algos.estimators`)."""

    name: str
    fn: Callable[..., Any]
    needs_values: bool = False
    grouped_starts: bool = False
    group_normalized: bool = False
    episode_scores: bool = False

    def __call__(self, **kwargs: Any) -> Any:
        return self.fn(**kwargs)


@dataclass(frozen=True)
class PolicyLoss:
    """A registered ``loss_type``: ``loss(inputs, settings, weight_sums=None) -> (loss, metrics)``, as its
    function (:func:`vla_algos.actor_loss`)."""

    name: str
    fn: Callable[[LossInputs, LossSettings, WeightSums | None], tuple[torch.Tensor, dict[str, torch.Tensor]]]
    uses_critic: bool = False

    def __call__(
        self, inputs: LossInputs, settings: LossSettings, weight_sums: WeightSums | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.fn(inputs, settings, weight_sums)


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "gae": AdvantageEstimator("gae", gae_estimator, needs_values=True),
    "grpo": AdvantageEstimator(
        "grpo", grpo_estimator, grouped_starts=True, group_normalized=True, episode_scores=True
    ),
}
POLICY_LOSSES: dict[str, PolicyLoss] = {
    "actor_critic": PolicyLoss("actor_critic", actor_critic_loss, uses_critic=True),
    "actor": PolicyLoss("actor", actor_loss),
}
LOSS_AGG_MODES: dict[str, Callable[..., Any]] = {
    "token-mean": token_mean_weights,
    "seq-mean-token-mean": episode_mean_weights,
}


def _lookup(registry: dict[str, Any], kind: str, name: str) -> Any:
    if name not in registry:
        raise ValueError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(registry))}")
    return registry[name]


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """The advantage estimator registered as ``name`` (``adv_type``): ``gae`` or ``grpo`` built in.

    Raises:
        ValueError: unknown name (the message lists the valid ones).
    """
    return _lookup(ADVANTAGE_ESTIMATORS, "adv_type", name)


def get_policy_loss(name: str) -> PolicyLoss:
    """The loss registered as ``name`` (``loss_type``): ``actor_critic`` or ``actor`` built in.

    Raises:
        ValueError: unknown name (the message lists the valid ones).
    """
    return _lookup(POLICY_LOSSES, "loss_type", name)


def get_loss_agg_mode(name: str) -> Callable[..., Any]:
    """The weighting registered as ``name`` (``loss_agg_mode``): ``token-mean`` or ``seq-mean-token-mean``
    built in; ``fn(loss_mask [T, B], done [T, B], *, entries=[T, B] or None) -> weights [T, B] or None`` (the weight
    of each loss entry of a decision; ``entries``: loss entries per decision, :mod:`vla_algos.aggregation`).

    Raises:
        ValueError: unknown name (the message lists the valid ones).
    """
    return _lookup(LOSS_AGG_MODES, "loss_agg_mode", name)


def _check_new(registry: dict[str, Any], kind: str, name: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind} name must be a non-empty str, got {name!r}")
    if name in registry:
        raise ValueError(f"{kind} {name!r} is already registered")


def register_advantage_estimator(
    name: str,
    fn: Callable[..., Any],
    *,
    needs_values: bool = False,
    grouped_starts: bool = False,
    group_normalized: bool = False,
    episode_scores: bool = False,
) -> None:
    """Add an advantage estimator under a new ``adv_type`` name (existing names cannot be replaced).

    ``fn`` takes the keywords of :mod:`vla_algos.estimators` (accept ``**unused``) and returns
    :class:`vla_algos.EstimatedAdvantages`. The properties are those of :class:`AdvantageEstimator` (module
    docstring): a trainer and its config validation read them, so a new estimator needs no change there.
    """
    _check_new(ADVANTAGE_ESTIMATORS, "adv_type", name)
    ADVANTAGE_ESTIMATORS[name] = AdvantageEstimator(
        name, fn, needs_values, grouped_starts, group_normalized, episode_scores
    )


def register_policy_loss(name: str, fn: Callable[..., Any], *, uses_critic: bool = False) -> None:
    """Add a policy objective under a new ``loss_type`` name (existing names cannot be replaced).

    ``fn(inputs, settings, weight_sums)`` takes a :class:`vla_algos.LossInputs`, a :class:`vla_algos.LossSettings`
    and a :class:`vla_algos.WeightSums` or None, as :func:`vla_algos.actor_critic_loss`, and returns ``(loss,
    metrics)``. A trainer calls it once per micro-batch and adds the results up (gradients and metrics), so the loss
    and every metric must be in :func:`vla_algos.agg_loss` form: ``sum(w * x) / weight sum`` with the weight sums it
    receives (the whole minibatch's). A per-micro-batch mean instead would scale the gradient with the number of
    micro-batches. Composing a built-in one is the short way::

        def reinforce(inputs, settings, weight_sums=None):  # no clipping: the plain policy gradient
            unclipped = dataclasses.replace(settings, clip_ratio_low=1 - 1e-6, clip_ratio_high=1e6)
            return actor_loss(inputs, unclipped, weight_sums)

        register_policy_loss("reinforce", reinforce)
    """
    _check_new(POLICY_LOSSES, "loss_type", name)
    POLICY_LOSSES[name] = PolicyLoss(name, fn, uses_critic)


def register_loss_agg_mode(name: str, fn: Callable[..., Any]) -> None:
    """Add a loss aggregation mode under a new ``loss_agg_mode`` name (existing names cannot be replaced)."""
    _check_new(LOSS_AGG_MODES, "loss_agg_mode", name)
    LOSS_AGG_MODES[name] = fn
