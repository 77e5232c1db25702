"""Data collection: `rollout` (sampling, pipelining, offload) and the app's keys of `env.train` / `env.eval`."""

from __future__ import annotations

from dataclasses import dataclass

from train_embodied.config.value_checks import at_least


@dataclass
class RolloutSection:
    """`rollout`: sampling parameters of the rollout policy, pipelining and offload.

    `do_sample` false (the reference's key): greedy decisions. Training rollouts must sample (the PPO/GRPO ratio
    needs the sampling distribution), so it is refused unless `runner.only_eval`, where it makes the evaluation
    greedy, as `eval_do_sample` false does in any run.
    """

    do_sample: bool = True
    """Sample the rollout's actions (the reference's key); false, only with `runner.only_eval`, makes the
    evaluation greedy."""
    temperature: float = 1.0
    """Sampling temperature of the rollout policy."""
    top_k: int | None = None
    """Sample among the k most likely action tokens only; null: all."""
    eval_do_sample: bool = True
    """Sample the evaluation's decisions; false: a greedy evaluation."""
    pipeline_stage_num: int = 1
    """Env groups that take turns, so the simulators step one while the policy acts on the next; 1: none."""
    enable_offload: bool = False
    """Send the rollout policy to host memory at the end of each rollout and evaluation."""

    def check(self, prefix: str) -> list[str]:
        errors = []
        if self.temperature <= 0:
            errors.append(f"{prefix}.temperature={self.temperature!r} is invalid: must be > 0")
        errors += at_least(f"{prefix}.pipeline_stage_num", self.pipeline_stage_num, 1)
        return errors


#: Keys of `env.train` / `env.eval` that belong to the app, not to vla_envs.EnvConfig.
ENV_APP_KEYS = (
    "max_steps_per_rollout_epoch",
    "num_episodes",
    "trial_offset",
    "rollout_epoch",
    "enable_offload",
)


@dataclass
class EnvRunSection:
    """App-side keys of `env.train` / `env.eval` (the rest of the section is a vla_envs.EnvConfig).

    `rollout_epoch` (env.eval): how many times an evaluation runs its `num_episodes` held-out episodes (the same
    starts each time; sampled decisions draw new noise), as the reference's eval rollout epochs; every run counts
    in the means and tables; unset: once. `env.train.rollout_epoch` is the reference's spelling of
    `algorithm.rollout_epoch` (moved there by `config.aliases`; unset: algorithm.rollout_epoch applies).

    `enable_offload`: the env workers stop this split's simulators at the end of each rollout (train) or
    evaluation (eval) and build them again at the next one's reset (`env.enable_offload` sets both splits)."""

    max_steps_per_rollout_epoch: int = 64
    """Env steps of each env in one rollout, a multiple of `actor.model.num_action_chunks`."""
    num_episodes: int = 50
    """Held-out episodes of an evaluation (tasks x trials runs every task alike)."""
    trial_offset: int = 0
    """First held-out start (trial) of an evaluation; training draws other trials."""
    rollout_epoch: int | None = None
    """`env.eval`: times an evaluation runs its episodes, all counted; `env.train`: the reference's spelling
    of `algorithm.rollout_epoch`; null: once."""
    enable_offload: bool = False
    """Stop this split's simulator processes after each rollout (train) or evaluation (eval) and rebuild them
    at the next reset."""

    @property
    def eval_repeats(self) -> int:
        """Times an evaluation runs its episodes (`rollout_epoch`; unset: once)."""
        return self.rollout_epoch or 1

    def check(self, prefix: str) -> list[str]:
        errors = (
            at_least(f"{prefix}.max_steps_per_rollout_epoch", self.max_steps_per_rollout_epoch, 1)
            + at_least(f"{prefix}.num_episodes", self.num_episodes, 1)
            + at_least(f"{prefix}.trial_offset", self.trial_offset, 0)
        )
        if self.rollout_epoch is not None:
            errors += at_least(f"{prefix}.rollout_epoch", self.rollout_epoch, 1)
        return errors
