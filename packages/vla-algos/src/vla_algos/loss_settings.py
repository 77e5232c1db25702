"""The settings of a PPO / GRPO loss as one record, under the names a trainer's config gives them.

A registered loss (``loss_type``) takes three things, the shape of verl's policy losses: the tensors of one loss
call (:class:`vla_algos.LossInputs`), this record, and the minibatch's weight sums (:class:`vla_algos.WeightSums`).
The field names are the keys of ``vla-train``'s ``algorithm`` section (the reference framework's names), so a
config hands its fields over by name (:meth:`LossSettings.from_config`) and no setting is renamed on its way from
the YAML to the loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class LossSettings:
    """Hyper-parameters of the PPO / GRPO objectives (:func:`vla_algos.actor_loss`, :func:`vla_algos.actor_critic_loss`).

    The defaults are ``vla-train``'s (and CleanRL's PPO: clip 0.2, value coefficient 0.5, no entropy bonus)::

        from vla_algos import LossInputs, LossSettings, get_policy_loss

        settings = LossSettings(clip_ratio_high=0.28, entropy_bonus=0.01)  # the rest as vla-train's defaults
        settings = LossSettings.from_config(args)  # or every field by name from a config / argparse.Namespace
        loss, metrics = get_policy_loss("actor_critic")(
            LossInputs(logprobs=new_logp, old_logprobs=old_logp, advantages=adv, entropy=ent,
                       values=v, old_values=old_v, returns=ret),
            settings,
        )
    """

    clip_ratio_low: float = 0.2
    """``eps_low`` in [0, 1): the ratio's floor is ``1 - clip_ratio_low``."""
    clip_ratio_high: float = 0.2
    """``eps_high`` >= 0: the ratio's ceiling is ``1 + clip_ratio_high`` (clip-higher, e.g. 0.28)."""
    clip_ratio_c: float | None = None
    """The dual clip ``c > 1`` (Ye et al. 2020): a negative advantage's loss is capped at ``-A * c``; None: off."""
    clip_log_ratio_min: float | None = None
    """Lower bound of ``logprobs - old_logprobs`` before the exponential (no gradient outside); None: unbounded."""
    clip_log_ratio_max: float | None = None
    """Upper bound of ``logprobs - old_logprobs`` before the exponential; None: unbounded."""
    entropy_bonus: float = 0.0
    """Weight of the entropy term, subtracted from the loss (exploration)."""
    kl_beta: float = 0.0
    """Weight of the KL penalty to the reference policy (needs ``LossInputs.ref_logprobs``; 0: off)."""
    kl_penalty: str = "k3"
    """The KL estimator (:func:`vla_algos.kl_penalty`): ``k1``, ``k2``, ``k3``, ``abs`` or the reference framework's
    ``kl``, ``mse``, ``low_var_kl``."""
    value_clip: float | None = 0.2
    """The critic's prediction is also clipped to ``old_values +- value_clip`` (pessimistic); None: no clipping."""
    value_clip_mode: str = "pessimistic"
    """How ``value_clip`` enters the critic loss (:data:`vla_algos.VALUE_CLIP_MODES`): the larger of the clipped and
    unclipped errors (``pessimistic``), or the clipped prediction's error alone (``clipped``, Stable-Baselines3's
    ``clip_range_vf``)."""
    huber_delta: float | None = None
    """The critic's error is the Huber loss with this delta; None: the squared error / 2."""
    value_loss_coef: float = 0.5
    """Weight of the critic loss in ``actor_critic``."""
    logprob_type: str = "token_level"
    """Where the ratio is taken (:func:`vla_algos.reduce_logprobs`): per token, per action (the action's tokens
    summed) or per decision (``chunk_level``: the whole chunk)."""
    entropy_type: str = "token_level"
    """The entries the entropy bonus averages: token entropies, or their sums per action / per chunk."""

    @classmethod
    def from_config(cls, config: Any) -> LossSettings:
        """Every field read by its name from ``config``: an object with these attributes (a config section, an
        ``argparse.Namespace``) or a mapping with these keys. Other attributes or keys are ignored.

        Raises:
            ValueError: ``config`` lacks fields (the message names them): a missing setting is never defaulted.
        """

        def has(name: str) -> bool:
            return name in config if isinstance(config, Mapping) else hasattr(config, name)

        def get(name: str) -> Any:
            return config[name] if isinstance(config, Mapping) else getattr(config, name)

        names = [f.name for f in fields(cls)]
        missing = [n for n in names if not has(n)]
        if missing:
            raise ValueError(f"LossSettings.from_config: the config has no {', '.join(missing)}")
        return cls(**{n: get(n) for n in names})
