"""Typed sections of the app config (`cluster`, `runner`, `algorithm`, `rollout`, `actor`, `env.*`, `sft`).

Each dataclass mirrors one YAML section key for key. `check(prefix)` returns one-line errors that name the full
key, the bad value and what is allowed; `train_embodied.config.build.build_train_config` collects them all.
These are app types: the packages get their own typed configs (vla_envs.EnvConfig, vla_models configs, ...)
built from them in `train_embodied.config.build`.

The sections live by theme (`sections_run`: runner, trainer, cluster, sft; `sections_algorithm`; `sections_actor`:
model, optim, fsdp_config; `sections_rollout`: rollout and the app's env keys; `value_checks`: the one-value
checks they share); this module is the one place to import them from.
"""

from __future__ import annotations

from train_embodied.config.sections_actor import (
    FSDP_STRATEGIES,
    LR_DECAY_STYLES,
    MIXED_PRECISION_KEYS,
    MODEL_SIZES,
    PRECISIONS,
    SHARDING_STRATEGIES,
    ActorSection,
    FSDPSection,
    ModelSection,
    OptimSection,
)
from train_embodied.config.sections_algorithm import (
    ENTROPY_TYPES,
    KL_PENALTIES,
    LOGPROB_TYPES,
    PER_TASK_ADVANTAGES,
    REWARD_TYPES,
    UNSUPPORTED_LOSS_AGG_MODES,
    AlgorithmSection,
)
from train_embodied.config.sections_rollout import ENV_APP_KEYS, EnvRunSection, RolloutSection
from train_embodied.config.sections_run import (
    BACKENDS,
    LOGGER_BACKENDS,
    ClusterSection,
    LoggerSection,
    RunnerSection,
    SFTSection,
    TrainerLoggerSection,
    TrainerSection,
    WandbSection,
)
from train_embodied.config.value_checks import (
    above,
    at_least,
    in_range,
    lookup,
    one_of,
    registered,
    with_property,
)

__all__ = [
    "BACKENDS",
    "ENTROPY_TYPES",
    "ENV_APP_KEYS",
    "FSDP_STRATEGIES",
    "KL_PENALTIES",
    "LOGGER_BACKENDS",
    "LOGPROB_TYPES",
    "LR_DECAY_STYLES",
    "MIXED_PRECISION_KEYS",
    "MODEL_SIZES",
    "PER_TASK_ADVANTAGES",
    "PRECISIONS",
    "REWARD_TYPES",
    "SHARDING_STRATEGIES",
    "UNSUPPORTED_LOSS_AGG_MODES",
    "ActorSection",
    "AlgorithmSection",
    "ClusterSection",
    "EnvRunSection",
    "FSDPSection",
    "LoggerSection",
    "ModelSection",
    "OptimSection",
    "RolloutSection",
    "RunnerSection",
    "SFTSection",
    "TrainerLoggerSection",
    "TrainerSection",
    "WandbSection",
    "above",
    "at_least",
    "in_range",
    "lookup",
    "one_of",
    "registered",
    "with_property",
]
