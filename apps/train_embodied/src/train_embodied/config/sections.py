"""Typed sections of the app config (`cluster`, `runner`, `algorithm`, `rollout`, `actor`, `env.*`, `sft`).

Each dataclass mirrors one YAML section key for key. `check(prefix)` returns one-line errors that name the full
key, the bad value and what is allowed; `train_embodied.config.build.build_train_config` collects them all.
These are app types: the packages get their own typed configs (vla_envs.EnvConfig, vla_models configs, ...)
built from them in `train_embodied.config.build`.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from vla_algos import (
    ADVANTAGE_ESTIMATORS,
    GROUP_MODES,
    KL_KINDS,
    LOGPROB_LEVELS,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    REWARD_LEVELS,
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
BACKENDS = ("local", "ray")
LOGGER_BACKENDS = ("tensorboard", "console", "wandb", "swanlab")
PRECISIONS = ("fp32", "bf16", "fp16")
MODEL_SIZES = ("tiny", "full")
PER_TASK_ADVANTAGES = GROUP_MODES
LR_DECAY_STYLES = ("constant", "linear", "cosine")
FSDP_STRATEGIES = ("fsdp", "fsdp2", "none")
SHARDING_STRATEGIES = ("full_shard", "shard_grad_op", "hybrid_shard", "no_shard")
#: `actor.fsdp_config.mixed_precision` keys (the reference's FSDP MixedPrecision fields)
MIXED_PRECISION_KEYS = ("param_dtype", "reduce_dtype", "buffer_dtype")


#: Reference-framework names that no vla_algos registry holds, each with why it is refused (while unregistered).
UNSUPPORTED_LOSS_AGG_MODES = {
    "seq-mean-token-sum": (
        "the loss is a weighted mean; the reference framework's embodied actor does not read its loss_agg_func either"
    ),
}


def one_of(key: str, value: Any, allowed: tuple[str, ...]) -> list[str]:
    """`["key='v' is not one of: a, b"]` if value is not allowed, else []."""
    if value in allowed:
        return []
    return [f"{key}={value!r} is not one of: {', '.join(allowed)}"]


def registered(
    key: str, value: Any, registry: dict[str, Any], unsupported: dict[str, str] | None = None
) -> list[str]:
    """`one_of` the names registered now in a vla_algos `registry` (in registration order); an unregistered name of
    `unsupported` is refused with its reason."""
    if isinstance(value, str) and value in registry:
        return []
    if unsupported and isinstance(value, str) and value in unsupported:
        return [f"{key}={value!r} is not supported: {unsupported[value]} (registered: {', '.join(registry)})"]
    return one_of(key, value, tuple(registry))


def lookup(get: Any, name: Any) -> Any:
    """The registered entry `get(name)`, or None for an unknown name (reported by `registered`)."""
    try:
        return get(name)
    except (ValueError, TypeError):
        return None


def with_property(registry: dict[str, Any], prop: str) -> str:
    """The registered names whose entry has `prop` set (e.g. `uses_critic`: `actor_critic`), for messages."""
    return ", ".join(name for name, entry in registry.items() if getattr(entry, prop)) or "(none registered)"


def at_least(key: str, value: float, low: float, *, allow: tuple[float, ...] = ()) -> list[str]:
    """Error unless `value >= low` (or value is one of the special values in `allow`, e.g. -1 = off)."""
    if value in allow or value >= low:
        return []
    extra = f" (or {', '.join(map(str, allow))})" if allow else ""
    return [f"{key}={value!r} is invalid: must be >= {low}{extra}"]


def above(key: str, value: float, low: float) -> list[str]:
    """Error unless `value > low`."""
    return [] if value > low else [f"{key}={value!r} is invalid: must be > {low}"]


def in_range(key: str, value: float, low: float, high: float) -> list[str]:
    """Error unless `low <= value <= high`."""
    if low <= value <= high:
        return []
    return [f"{key}={value!r} is invalid: must be in [{low}, {high}]"]


@dataclass
class LoggerSection:
    """`runner.logger`: where the run writes and which metric backends it uses."""

    log_path: str = "runs"
    log_dir: str | None = None
    project_name: str = "vla-rl"
    experiment_name: str = "run"
    logger_backends: list[str] = field(default_factory=lambda: ["tensorboard"])

    def check(self, prefix: str) -> list[str]:
        errors = []
        for name in self.logger_backends:
            errors += one_of(f"{prefix}.logger_backends[]", name, LOGGER_BACKENDS)
        if not self.experiment_name:
            errors.append(f"{prefix}.experiment_name={self.experiment_name!r} is invalid: must be non-empty")
        return errors


@dataclass
class WandbSection:
    """`trainer.logger.wandb` (the reference documents' spelling): `enable` turns the wandb backend on or off
    (`"wandb"` in `runner.logger.logger_backends`); `project_name` / `experiment_name` are the project and run name
    it reports to (default: `runner.logger.project_name` / `experiment_name`). Null: not set."""

    enable: bool | None = None
    project_name: str | None = None
    experiment_name: str | None = None


@dataclass
class TrainerLoggerSection:
    """`trainer.logger`: the wandb settings of the reference documents' spelling."""

    wandb: WandbSection = field(default_factory=WandbSection)


@dataclass
class TrainerSection:
    """`trainer`: the reference documents' spelling of logger settings; the rest of a run is under `runner`."""

    logger: TrainerLoggerSection = field(default_factory=TrainerLoggerSection)


@dataclass
class RunnerSection:
    """`runner`: the loop's length, evaluation, checkpointing and seeding."""

    task_type: str = "embodied"
    logger: LoggerSection = field(default_factory=LoggerSection)
    max_epochs: int = 100
    max_steps: int = -1
    only_eval: bool = False
    eval_before_train: bool = False
    eval_after_train: bool = True
    val_check_interval: int = -1
    eval_greedy: bool = True
    save_interval: int = -1
    resume_dir: str | None = None
    weight_sync_interval: int = 1
    seed: int = 0
    progress_bar: bool = True
    torch_num_threads: int = 1
    max_consecutive_skipped_updates: int = 3

    def check(self, prefix: str) -> list[str]:
        return (
            at_least(f"{prefix}.max_consecutive_skipped_updates", self.max_consecutive_skipped_updates, 1)
            + at_least(f"{prefix}.torch_num_threads", self.torch_num_threads, 0)
            + one_of(f"{prefix}.task_type", self.task_type, ("embodied",))
            + at_least(f"{prefix}.max_epochs", self.max_epochs, 0)
            + at_least(f"{prefix}.max_steps", self.max_steps, 1, allow=(-1,))
            + at_least(f"{prefix}.val_check_interval", self.val_check_interval, 1, allow=(-1,))
            + at_least(f"{prefix}.save_interval", self.save_interval, 1, allow=(-1,))
            + at_least(f"{prefix}.weight_sync_interval", self.weight_sync_interval, 1)
            + at_least(f"{prefix}.seed", self.seed, 0)
        )


@dataclass
class ClusterSection:
    """`cluster`: nodes, GPUs per node, backend and `component_placement` strings; `max_worker_restarts`: how
    many times each env or rollout Ray actor is replaced after it died before the run ends (the Ray backend)."""

    num_nodes: int = 1
    num_gpus_per_node: int = 0
    backend: str = "local"
    ray_address: str | None = None
    component_placement: dict[str, Any] = field(default_factory=dict)
    max_worker_restarts: int = 3

    def __post_init__(self) -> None:
        if not self.component_placement:  # empty: every component on every slot
            self.component_placement = {"env,rollout,actor": "all"}

    def check(self, prefix: str) -> list[str]:
        errors = at_least(f"{prefix}.num_nodes", self.num_nodes, 1)
        errors += at_least(f"{prefix}.num_gpus_per_node", self.num_gpus_per_node, 0)
        errors += at_least(f"{prefix}.max_worker_restarts", self.max_worker_restarts, 0)
        errors += one_of(f"{prefix}.backend", self.backend, BACKENDS)
        if self.backend == "local" and self.num_nodes > 1:
            errors.append(
                f"{prefix}.backend='local' cannot use {prefix}.num_nodes={self.num_nodes}: set {prefix}.backend=ray"
            )
        return errors


@dataclass
class AlgorithmSection:
    """`algorithm`: advantage estimator, loss, reductions and PPO/GRPO hyper-parameters."""

    adv_type: str = "gae"
    loss_type: str = "actor_critic"
    reward_type: str = "chunk_level"
    logprob_type: str = "token_level"
    entropy_bonus: float = 0.0
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float | None = None
    value_clip: float | None = 0.2
    huber_delta: float | None = None
    value_loss_coef: float = 0.5
    kl_beta: float = 0.0
    kl_penalty: str = "k3"
    gamma: float = 0.99
    gae_lambda: float = 0.95
    group_size: int = 1
    filter_rewards: bool = False
    rewards_lower_bound: float = 0.0
    rewards_upper_bound: float = 1.0
    update_epoch: int = 4
    normalize_advantages: bool = True
    per_task_advantages: str = "none"
    rollout_epoch: int = 1
    target_kl: float | None = None
    critic_warmup_epochs: int = 0
    loss_agg_mode: str = "token-mean"
    # policy decisions (action chunks) per env per rollout epoch, as the reference documents' RoboTwin settings
    # give it: checked against env.train.max_steps_per_rollout_epoch / actor.model.num_action_chunks (null: unset)
    n_chunk_steps: int | None = None
    clip_log_ratio_min: float | None = None
    clip_log_ratio_max: float | None = None
    entropy_type: str = "token_level"
    value_type: str = "chunk_level"
    bootstrap_type: str = "standard"
    bootstrap_truncated: bool = True
    normalize_returns: bool = False
    discount_scores: bool = False
    whiten_std_eps: float | None = 1e-5

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
                f"{prefix}.critic_warmup_epochs={self.critic_warmup_epochs!r} needs a critic: set it to 0 "
                f"or {prefix}.loss_type to a loss with a value term ({critic_losses})"
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
                f"{prefix}.rewards_upper_bound], which needs the rows grouped by task (set {prefix}.per_task_advantages "
                f"to center or whiten, or {prefix}.filter_rewards=false)"
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


@dataclass
class RolloutSection:
    """`rollout`: sampling parameters of the rollout policy, pipelining and offload.

    `do_sample` false (the reference's key): greedy decisions. Training rollouts must sample (the PPO/GRPO ratio
    needs the sampling distribution), so it is refused unless `runner.only_eval`, where it makes the evaluation
    greedy, as `eval_do_sample` false does in any run.
    """

    do_sample: bool = True
    temperature: float = 1.0
    top_k: int | None = None
    eval_do_sample: bool = True
    pipeline_stage_num: int = 1
    enable_offload: bool = False

    def check(self, prefix: str) -> list[str]:
        errors = []
        if self.temperature <= 0:
            errors.append(f"{prefix}.temperature={self.temperature!r} is invalid: must be > 0")
        errors += at_least(f"{prefix}.pipeline_stage_num", self.pipeline_stage_num, 1)
        return errors


@dataclass
class OptimSection:
    """`actor.optim`: AdamW settings; `value_lr` is the value head's learning rate.

    `lr_decay_style` (constant, linear, cosine) decays every learning rate over the run's training iterations
    (`runner.max_epochs`) from its value towards `min_lr` x its value / `lr` (so the value head's lr keeps its ratio
    to the policy's); the warmup (`lr_warmup_steps`) scales on top of it.
    """

    lr: float = 1e-4
    value_lr: float = 1e-4
    weight_decay: float = 0.0
    clip_grad: float = 1.0
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    adam_eps: float = 1e-8
    lr_warmup_steps: int = 0
    lr_decay_style: str = "constant"
    min_lr: float = 0.0

    def check(self, prefix: str) -> list[str]:
        errors = at_least(f"{prefix}.lr_warmup_steps", self.lr_warmup_steps, 0)
        errors += one_of(f"{prefix}.lr_decay_style", self.lr_decay_style, LR_DECAY_STYLES)
        errors += at_least(f"{prefix}.min_lr", self.min_lr, 0.0)
        if self.min_lr > self.lr > 0:  # a non-positive lr is reported below, once
            errors.append(f"{prefix}.min_lr={self.min_lr!r} is invalid: must be <= {prefix}.lr={self.lr!r}")
        for name in ("lr", "value_lr", "adam_eps"):
            if getattr(self, name) <= 0:
                errors.append(f"{prefix}.{name}={getattr(self, name)!r} is invalid: must be > 0")
        errors += at_least(f"{prefix}.weight_decay", self.weight_decay, 0.0)
        errors += at_least(f"{prefix}.clip_grad", self.clip_grad, 0.0)
        if len(self.adam_betas) != 2 or not all(0.0 <= b < 1.0 for b in self.adam_betas):
            errors.append(f"{prefix}.adam_betas={self.adam_betas!r} is invalid: two numbers in [0, 1)")
        return errors


@dataclass
class FSDPSection:
    """`actor.fsdp_config`: FSDP2 sharding of an actor placed on several processes. With one process the policy
    is not sharded (`strategy` and `sharding_strategy` have nothing to shard) and the other settings apply to the
    plain module (`train_embodied.unsharded`)."""

    strategy: str = "none"
    sharding_strategy: str = "no_shard"
    gradient_checkpointing: bool = False
    cpu_offload: bool = False
    mixed_precision: dict[str, Any] = field(default_factory=dict)

    def check(self, prefix: str) -> list[str]:
        errors = one_of(f"{prefix}.strategy", self.strategy, FSDP_STRATEGIES)
        errors += one_of(f"{prefix}.sharding_strategy", self.sharding_strategy, SHARDING_STRATEGIES)
        for key, value in self.mixed_precision.items():
            if key not in MIXED_PRECISION_KEYS:
                errors.append(
                    f"{prefix}.mixed_precision.{key} is not a known key: allowed {', '.join(MIXED_PRECISION_KEYS)}"
                )
            elif key == "buffer_dtype" and value not in (None, "fp32"):
                errors.append(
                    f"{prefix}.mixed_precision.buffer_dtype={value!r} is not supported: FSDP2 (and autocast on one "
                    "process) does not cast buffers; allowed: fp32 or null"
                )
            elif value is not None:
                errors += one_of(f"{prefix}.mixed_precision.{key}", value, PRECISIONS)
        return errors


@dataclass
class ModelSection:
    """`actor.model`: which policy, where its weights are, and its action interface.

    With `model_path` set, the architecture keys (model_type, action_dim, num_action_chunks, n_action_bins,
    image_size, use_proprio, proprio_dim, num_images_in_input, use_film, implement_version, and extra
    patch_size / hidden_size) must agree with the checkpoint: vla_models names any key it contradicts.
    `implement_version` null means the checkpoint's own (published folders: official), or causal_prefix for a
    tiny model built from scratch. `lora_path`: a peft adapter folder applied on top of `model_path`, kept as
    trainable LoRA when `is_lora` is true, merged into the weights otherwise.
    """

    model_type: str = "openvla_oft"
    model_name: str = "openvla_oft_tiny"
    size: str = "tiny"
    model_path: str | None = None
    lora_path: str | None = None
    precision: str = "fp32"
    action_dim: int = 4
    num_action_chunks: int = 1
    n_action_bins: int = 256
    image_size: int = 64
    use_proprio: bool = True
    proprio_dim: int = 4
    num_images_in_input: int = 1
    use_film: bool = False
    implement_version: str | None = None
    action_head: str = "discrete"
    add_value_head: bool = True
    is_lora: bool = False
    lora_rank: int = 32
    unnorm_key: str | None = None
    num_steps: int | None = None
    openpi: dict[str, Any] = field(default_factory=dict)
    OpenPI: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def settings(self) -> dict[str, Any]:
        """Every key of the section, as the settings dict a vla_models family reads."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def check(self, prefix: str) -> list[str]:
        """The keys every family reads, then the family's own checks; a key only other families read must keep
        its default."""
        from vla_models import families, family_names, registered_families

        errors = one_of(f"{prefix}.model_type", self.model_type, family_names())
        errors += one_of(f"{prefix}.size", self.size, MODEL_SIZES)
        errors += one_of(f"{prefix}.precision", self.precision, PRECISIONS)
        errors += at_least(f"{prefix}.action_dim", self.action_dim, 1)
        errors += at_least(f"{prefix}.num_action_chunks", self.num_action_chunks, 1)
        errors += at_least(f"{prefix}.image_size", self.image_size, 8)
        errors += at_least(f"{prefix}.proprio_dim", self.proprio_dim, 1)
        if self.size == "full" and not self.model_path:
            errors.append(
                f"{prefix}.model_path={self.model_path!r} is invalid: size=full loads a checkpoint folder"
            )
        family = registered_families().get(self.model_type)
        if family is None:
            return errors
        others = {key for f in families() if f is not family for key in f.settings_keys}
        for key in sorted(others - family.settings_keys, key=_FIELD_ORDER.index):
            value, default = getattr(self, key), family.unread_settings.get(key, _DEFAULTS[key])
            if value != default:
                readers = ", ".join(f.name for f in families() if key in f.settings_keys)
                errors.append(
                    f"{prefix}.{key}={value!r} is invalid with model_type={self.model_type!r} (read by model_type "
                    f"{readers} only; allowed: {default!r})"
                )
        return errors + family.check_settings(self.settings(), f"{prefix}.")


_FIELD_ORDER = [f.name for f in fields(ModelSection)]
_DEFAULTS = {
    f.name: (f.default_factory() if f.default_factory is not MISSING else f.default)
    for f in fields(ModelSection)
}


@dataclass
class ActorSection:
    """`actor`: the trained policy, its optimizer and batch sizes."""

    model: ModelSection = field(default_factory=ModelSection)
    optim: OptimSection = field(default_factory=OptimSection)
    micro_batch_size: int = 128
    global_batch_size: int = 256
    enable_offload: bool = False
    fsdp_config: FSDPSection = field(default_factory=FSDPSection)

    def check(self, prefix: str) -> list[str]:
        errors = at_least(f"{prefix}.micro_batch_size", self.micro_batch_size, 1)
        errors += at_least(f"{prefix}.global_batch_size", self.global_batch_size, 1)
        if self.micro_batch_size >= 1 and self.global_batch_size % self.micro_batch_size != 0:
            errors.append(
                f"{prefix}.global_batch_size={self.global_batch_size!r} is invalid: must be a multiple of "
                f"{prefix}.micro_batch_size={self.micro_batch_size!r}"
            )
        return errors


@dataclass
class SFTSection:
    """`sft`: supervised warm start on scripted-expert demonstrations (`vla-sft`)."""

    num_demos: int = 20
    demo_seed: int = 0
    steps: int = 200
    batch_size: int = 64
    lr: float = 3e-4
    augment_shift: int = 4
    output_dir: str | None = None

    def check(self, prefix: str) -> list[str]:
        errors = at_least(f"{prefix}.num_demos", self.num_demos, 1)
        errors += at_least(f"{prefix}.demo_seed", self.demo_seed, 0)
        errors += at_least(f"{prefix}.steps", self.steps, 0)
        errors += at_least(f"{prefix}.batch_size", self.batch_size, 1)
        errors += at_least(f"{prefix}.augment_shift", self.augment_shift, 0)
        if self.lr <= 0:
            errors.append(f"{prefix}.lr={self.lr!r} is invalid: must be > 0")
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
    num_episodes: int = 50
    trial_offset: int = 0
    rollout_epoch: int | None = None
    enable_offload: bool = False

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
