"""Pure RL algorithm functions for VLA fine-tuning: GAE, GRPO groups, PPO losses, KL, metrics, and the
registries a trainer looks ``adv_type`` / ``loss_type`` / ``loss_agg_mode`` up in.

Plain tensors in and out, keyword-only hyper-parameters, time-major ``[T, B]`` unless stated. A registered loss
takes ``(LossInputs, LossSettings, WeightSums)``: the tensors of one call, the settings under their config names,
the minibatch's weight sums::

    from vla_algos import LossInputs, LossSettings, get_policy_loss

    loss, metrics = get_policy_loss("actor_critic")(
        LossInputs(logprobs=logp, old_logprobs=old_logp, advantages=adv, values=v, old_values=old_v, returns=ret),
        LossSettings(clip_ratio_low=0.2, clip_ratio_high=0.2, value_loss_coef=0.5),
    )
"""

from vla_algos.aggregation import (
    agg_loss,
    entry_weights,
    episode_mean_weights,
    token_mean_weights,
    total_weight,
)
from vla_algos.estimators import (
    EstimatedAdvantages,
    chunk_done,
    chunked_gae,
    gae_estimator,
    grpo_estimator,
    normalize_advantages,
    rollout_action_mask,
)
from vla_algos.gae import compute_gae, compute_gae_loop
from vla_algos.granularity import (
    LOGPROB_LEVELS,
    REWARD_LEVELS,
    advantages_per_ratio,
    chunk_dones,
    chunk_rewards,
    executed_action_mask,
    reduce_logprobs,
)
from vla_algos.grpo import (
    compute_grpo_advantages,
    first_episode_mask,
    first_episode_scores,
    group_reward_filter,
    labelled_reward_filter,
)
from vla_algos.kl import KL_KINDS, kl_penalty
from vla_algos.loss_inputs import LossInputs, WeightSums, minibatch_weight_sums
from vla_algos.loss_settings import LossSettings
from vla_algos.masked import masked_group_whiten, masked_mean, masked_sum, masked_var, masked_whiten
from vla_algos.objectives import actor_critic_loss, actor_loss
from vla_algos.policy_loss import entropy_loss, ppo_actor_loss
from vla_algos.registry import (
    ADVANTAGE_ESTIMATORS,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    AdvantageEstimator,
    PolicyLoss,
    get_advantage_estimator,
    get_loss_agg_mode,
    get_policy_loss,
    register_advantage_estimator,
    register_loss_agg_mode,
    register_policy_loss,
)
from vla_algos.rollout_advantages import GROUP_MODES, RolloutAdvantages, rollout_advantages
from vla_algos.value_loss import VALUE_CLIP_MODES, explained_variance, value_loss

__version__ = "0.1.0"

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "GROUP_MODES",
    "KL_KINDS",
    "LOGPROB_LEVELS",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "REWARD_LEVELS",
    "VALUE_CLIP_MODES",
    "AdvantageEstimator",
    "EstimatedAdvantages",
    "LossInputs",
    "LossSettings",
    "PolicyLoss",
    "RolloutAdvantages",
    "WeightSums",
    "__version__",
    "actor_critic_loss",
    "actor_loss",
    "advantages_per_ratio",
    "agg_loss",
    "chunk_done",
    "chunk_dones",
    "chunk_rewards",
    "chunked_gae",
    "compute_gae",
    "compute_gae_loop",
    "compute_grpo_advantages",
    "entropy_loss",
    "entry_weights",
    "episode_mean_weights",
    "executed_action_mask",
    "explained_variance",
    "first_episode_mask",
    "first_episode_scores",
    "gae_estimator",
    "get_advantage_estimator",
    "get_loss_agg_mode",
    "get_policy_loss",
    "group_reward_filter",
    "grpo_estimator",
    "kl_penalty",
    "labelled_reward_filter",
    "masked_group_whiten",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "minibatch_weight_sums",
    "normalize_advantages",
    "ppo_actor_loss",
    "reduce_logprobs",
    "register_advantage_estimator",
    "register_loss_agg_mode",
    "register_policy_loss",
    "rollout_action_mask",
    "rollout_advantages",
    "token_mean_weights",
    "total_weight",
    "value_loss",
]
