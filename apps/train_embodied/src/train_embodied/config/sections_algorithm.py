"""`algorithm`: advantage estimator, loss, reductions and PPO/GRPO hyper-parameters, checked against the
vla_algos registries."""

from __future__ import annotations

from dataclasses import dataclass

from train_embodied.config.value_checks import (
    above,
    at_least,
    in_range,
    lookup,
    one_of,
    registered,
    with_property,
)
from vla_algos import (
    ADVANTAGE_ESTIMATORS,
    GROUP_MODES,
    KL_KINDS,
    LOGPROB_LEVELS,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    REWARD_LEVELS,
    VALUE_CLIP_MODES,
    AdvantageEstimator,
    PolicyLoss,
    get_advantage_estimator,
    get_policy_loss,
)

# Names of vla_algos: the registries are read when a config is checked, so an estimator, loss or aggregation mode
# registered after import is accepted, and every check below asks the registered entry's properties, not its name.
REWARD_TYPES = REWARD_LEVELS
LOGPROB_TYPES = LOGPROB_LEVELS
KL_PENALTIES = KL_KINDS
ENTROPY_TYPES = LOGPROB_LEVELS
PER_TASK_ADVANTAGES = GROUP_MODES

#: Reference-framework names that no vla_algos registry holds, each with why it is refused (while unregistered).
UNSUPPORTED_LOSS_AGG_MODES = {
    "seq-mean-token-sum": (
        "the loss is a weighted mean; the reference framework's embodied actor does not read its loss_agg_func either"
    ),
}


@dataclass
class AlgorithmSection:
    """`algorithm`: advantage estimator, loss, reductions and PPO/GRPO hyper-parameters."""

    adv_type: str = "gae"
    """Advantage estimator, by its name in the vla-algos registry: `gae` (PPO) or `grpo` (group-relative)."""
    loss_type: str = "actor_critic"
    """Policy objective, by its name in the vla-algos registry: `actor_critic` (with a value loss) or `actor`
    (no critic)."""
    reward_type: str = "chunk_level"
    """Rewards per decision (`chunk_level`) or per action of the chunk (`action_level`)."""
    logprob_type: str = "token_level"
    """Level the log-probs are summed to before the ratio: token_level, action_level or chunk_level."""
    entropy_bonus: float = 0.0
    """Weight of the entropy bonus in the loss (0: none)."""
    clip_ratio_low: float = 0.2
    """PPO clip below 1: the ratio is clipped at `1 - clip_ratio_low`."""
    clip_ratio_high: float = 0.2
    """PPO clip above 1: the ratio is clipped at `1 + clip_ratio_high`."""
    clip_ratio_c: float | None = None
    """Dual-clip bound (> 1) of the loss for negative advantages; null: no dual clip."""
    value_clip: float | None = 0.2
    """Clip range of the value prediction around its rollout value; null: no clipping."""
    value_clip_mode: str = "pessimistic"
    """How `value_clip` enters the value loss: `pessimistic`, the larger of the clipped and unclipped errors (the
    reference's), or `clipped`, the clipped prediction's error alone (Stable-Baselines3's `clip_range_vf`)."""
    huber_delta: float | None = None
    """Threshold of a Huber value loss; null: the squared error."""
    value_loss_coef: float = 0.5
    """Weight of the value loss in the total loss."""
    kl_beta: float = 0.0
    """Weight of a KL(policy || starting weights) penalty in the loss; 0: off (no reference copy kept)."""
    kl_penalty: str = "k3"
    """Estimator of that KL: k1, k2, k3, abs, or the reference's names kl, mse, low_var_kl."""
    gamma: float = 0.99
    """Discount factor of the rewards."""
    gae_lambda: float = 0.95
    """GAE's lambda (1: the episode's return minus the value)."""
    group_size: int = 1
    """Envs per same-start group: the group-relative estimator's groups, and the train env's."""
    filter_rewards: bool = False
    """Leave out of the policy loss the groups (GRPO) or tasks (with `per_task_advantages`) whose mean score
    lies outside the reward bounds."""
    rewards_lower_bound: float = 0.0
    """Lower bound of that filter's mean score."""
    rewards_upper_bound: float = 1.0
    """Upper bound of that filter's mean score."""
    update_epoch: int = 4
    """Shuffled passes over each rollout in the update."""
    normalize_advantages: bool = True
    """Whiten the GAE advantages over the whole rollout (group-relative ones are never whitened again)."""
    per_task_advantages: str = "none"
    """`center`: subtract each task's mean advantage; `whiten`: each task by its own mean and std; `none`:
    neither."""
    rollout_epoch: int = 1
    """Rollouts collected per training iteration, each from its own starts, joined side by side."""
    target_kl: float | None = None
    """End a rollout's update after the first minibatch whose approx_kl exceeds this; null: never."""
    critic_warmup_epochs: int = 0
    """First iterations that train the value loss only."""
    loss_agg_mode: str = "token-mean"
    """How loss entries are averaged: `token-mean`, or `seq-mean-token-mean`, where every episode weighs the
    same."""
    n_chunk_steps: int | None = None
    """Policy decisions per env per rollout epoch, as the RoboTwin guide gives it: checked against
    `env.train.max_steps_per_rollout_epoch / actor.model.num_action_chunks`; null: unchecked."""
    clip_log_ratio_min: float | None = None
    """Lower bound of log(ratio) in the loss; null: none."""
    clip_log_ratio_max: float | None = None
    """Upper bound of log(ratio) in the loss; null: none."""
    entropy_type: str = "token_level"
    """Level the entropy bonus sums to: token_level (mean of the token entropies), action_level or
    chunk_level."""
    value_type: str = "chunk_level"
    """Values per decision: `chunk_level` (one per decision) is the one implemented."""
    bootstrap_type: str = "standard"
    """Which ended episodes bootstrap from a value: `standard` (timed-out ones) is the one implemented."""
    bootstrap_truncated: bool = True
    """Bootstrap a timed-out episode from the value of its final observation, for tasks whose time limit only cuts
    them short; false: a time-out ends the episode like a termination with its rewards so far (tasks that must
    succeed within `max_episode_steps`: a bootstrapped time-out scores a failure as high as the critic rates its
    last state; as the reference without auto-reset)."""
    normalize_returns: bool = False
    """Whiten the value targets."""
    discount_scores: bool = False
    """Score an episode by `sum(gamma**t * reward)` for GRPO and the filter, instead of its summed rewards
    (the reference's)."""
    whiten_std_eps: float | None = 1e-5
    """Whitened advantages are divided by `std + whiten_std_eps` (the reference's 1e-5); null: by `sqrt(var +
    1e-8)`."""

    def check(self, prefix: str) -> list[str]:
        errors = registered(f"{prefix}.adv_type", self.adv_type, ADVANTAGE_ESTIMATORS)
        errors += registered(f"{prefix}.loss_type", self.loss_type, POLICY_LOSSES)
        errors += one_of(f"{prefix}.reward_type", self.reward_type, REWARD_TYPES)
        errors += one_of(f"{prefix}.logprob_type", self.logprob_type, LOGPROB_TYPES)
        errors += at_least(f"{prefix}.entropy_bonus", self.entropy_bonus, 0.0)
        errors += in_range(f"{prefix}.clip_ratio_low", self.clip_ratio_low, 0.0, 1.0)
        errors += at_least(f"{prefix}.clip_ratio_high", self.clip_ratio_high, 0.0)
        if self.clip_ratio_c is not None:
            errors += above(f"{prefix}.clip_ratio_c", self.clip_ratio_c, 1.0)
        if self.value_clip is not None:
            errors += above(f"{prefix}.value_clip", self.value_clip, 0.0)
        errors += one_of(f"{prefix}.value_clip_mode", self.value_clip_mode, VALUE_CLIP_MODES)
        if self.huber_delta is not None:
            errors += above(f"{prefix}.huber_delta", self.huber_delta, 0.0)
        errors += at_least(f"{prefix}.value_loss_coef", self.value_loss_coef, 0.0)
        errors += at_least(f"{prefix}.kl_beta", self.kl_beta, 0.0)
        errors += one_of(f"{prefix}.kl_penalty", self.kl_penalty, KL_PENALTIES)
        errors += in_range(f"{prefix}.gamma", self.gamma, 0.0, 1.0)
        errors += in_range(f"{prefix}.gae_lambda", self.gae_lambda, 0.0, 1.0)
        errors += at_least(f"{prefix}.group_size", self.group_size, 1)
        errors += at_least(f"{prefix}.update_epoch", self.update_epoch, 1)
        errors += at_least(f"{prefix}.rollout_epoch", self.rollout_epoch, 1)
        errors += at_least(f"{prefix}.critic_warmup_epochs", self.critic_warmup_epochs, 0)
        errors += registered(
            f"{prefix}.loss_agg_mode", self.loss_agg_mode, LOSS_AGG_MODES, UNSUPPORTED_LOSS_AGG_MODES
        )
        if self.target_kl is not None:
            errors += above(f"{prefix}.target_kl", self.target_kl, 0.0)
        if self.n_chunk_steps is not None:
            errors += at_least(f"{prefix}.n_chunk_steps", self.n_chunk_steps, 1)
        estimator, loss = self.estimator(), self.loss()
        critic_losses = with_property(POLICY_LOSSES, "uses_critic")
        if self.critic_warmup_epochs > 0 and loss is not None and not loss.uses_critic:
            errors.append(
                f"{prefix}.critic_warmup_epochs={self.critic_warmup_epochs!r} needs a critic: set "
                f"`{prefix}.critic_warmup_epochs=0`, or {prefix}.loss_type to a loss with a value term ({critic_losses})"
            )
        if self.rewards_lower_bound > self.rewards_upper_bound:
            errors.append(
                f"{prefix}.rewards_lower_bound={self.rewards_lower_bound!r} is invalid: must be <= "
                f"{prefix}.rewards_upper_bound={self.rewards_upper_bound!r}"
            )
        if estimator is not None and estimator.grouped_starts and self.group_size < 2:
            errors.append(
                f"{prefix}.group_size={self.group_size!r} is invalid with {prefix}.adv_type={self.adv_type!r}: "
                "a group-relative estimator needs groups of >= 2 envs"
            )
        errors += one_of(f"{prefix}.per_task_advantages", self.per_task_advantages, PER_TASK_ADVANTAGES)
        filter_by_task = estimator is not None and not estimator.grouped_starts and self.filter_rewards
        if filter_by_task and self.per_task_advantages == "none":
            errors.append(
                f"{prefix}.filter_rewards=True is invalid with {prefix}.adv_type={self.adv_type!r} and "
                f"{prefix}.per_task_advantages='none': without same-start groups (adv_type "
                f"{with_property(ADVANTAGE_ESTIMATORS, 'grouped_starts')}) the filter leaves out of the policy loss the tasks "
                f"whose mean episode score in a rollout is outside [{prefix}.rewards_lower_bound, "
                f"{prefix}.rewards_upper_bound], which needs the rows grouped by task: set "
                f"`{prefix}.per_task_advantages=center`, `{prefix}.per_task_advantages=whiten` or "
                f"`{prefix}.filter_rewards=false`"
            )
        if estimator is not None and loss is not None and estimator.needs_values and not loss.uses_critic:
            errors.append(
                f"{prefix}.loss_type={self.loss_type!r} is invalid with {prefix}.adv_type={self.adv_type!r}: "
                f"that estimator uses the critic's values, which only a loss with a value term trains "
                f"(loss_type {critic_losses})"
            )
        if estimator is not None and estimator.episode_scores and self.discount_scores and self.gamma <= 0.0:
            errors.append(
                f"{prefix}.gamma={self.gamma!r} is invalid with {prefix}.adv_type={self.adv_type!r} and "
                f"{prefix}.discount_scores=true: the episode score is the sum of gamma**t * reward, which needs gamma "
                "in (0, 1] (1: plain sum)"
            )
        return errors + self._check_reference_options(prefix)

    def estimator(self) -> AdvantageEstimator | None:
        """The registered `adv_type` (None if unknown: `check` reports it)."""
        return lookup(get_advantage_estimator, self.adv_type)

    def loss(self) -> PolicyLoss | None:
        """The registered `loss_type` (None if unknown: `check` reports it)."""
        return lookup(get_policy_loss, self.loss_type)

    def _check_reference_options(self, prefix: str) -> list[str]:
        """The reference framework's options: each implemented, or refused naming what to set instead."""
        errors = one_of(f"{prefix}.entropy_type", self.entropy_type, ENTROPY_TYPES)
        if (
            self.clip_log_ratio_min is not None
            and self.clip_log_ratio_max is not None
            and self.clip_log_ratio_min > self.clip_log_ratio_max
        ):
            errors.append(
                f"{prefix}.clip_log_ratio_min={self.clip_log_ratio_min!r} is invalid: must be <= "
                f"{prefix}.clip_log_ratio_max={self.clip_log_ratio_max!r}"
            )
        if self.value_type != "chunk_level":
            errors.append(
                f"{prefix}.value_type={self.value_type!r} is not supported: the value head gives one value per "
                "decision (chunk_level); action-level GAE (reward_type=action_level) reuses it for every action of "
                "the chunk"
            )
        if self.bootstrap_type != "standard":
            errors.append(
                f"{prefix}.bootstrap_type={self.bootstrap_type!r} is not supported: only 'standard' (a timed-out "
                "episode is bootstrapped from the value of its final observation, a terminated one is not; "
                f"{prefix}.bootstrap_truncated=false bootstraps neither)"
            )
        if self.whiten_std_eps is not None:
            errors += above(f"{prefix}.whiten_std_eps", self.whiten_std_eps, 0.0)
        return errors
