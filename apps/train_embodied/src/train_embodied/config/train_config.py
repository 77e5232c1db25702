"""`TrainConfig`: everything a run needs, typed (built and validated by `train_embodied.config.build`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from train_embodied.config.sections import (
    ActorSection,
    AlgorithmSection,
    ClusterSection,
    EnvRunSection,
    RolloutSection,
    RunnerSection,
    SFTSection,
    TrainerSection,
)
from vla_envs import EnvConfig


@dataclass
class TrainConfig:
    """Everything a run needs, typed. `raw` is the resolved plain-dict config (saved next to the run)."""

    cluster: ClusterSection
    runner: RunnerSection
    algorithm: AlgorithmSection
    rollout: RolloutSection
    actor: ActorSection
    sft: SFTSection
    env_train: EnvConfig
    env_eval: EnvConfig
    train_run: EnvRunSection
    eval_run: EnvRunSection
    raw: dict[str, Any] = field(default_factory=dict)
    trainer: TrainerSection = field(default_factory=TrainerSection)

    @property
    def training_threads(self) -> int:
        """Intra-op threads while the policy trains: `actor.torch_num_threads`, 0 meaning `runner.torch_num_threads`
        (0 there too: torch's default)."""
        return self.actor.torch_num_threads or self.runner.torch_num_threads

    @property
    def log_dir(self) -> str:
        """The run's folder (`runner.logger.log_dir`)."""
        return str(self.runner.logger.log_dir)
