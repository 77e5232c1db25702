"""How a run is run: `runner` (loop length, evaluation, checkpoints, seeding, logger), `trainer` (the reference
documents' logger spelling), `cluster` (nodes, GPUs, backend, placement) and `sft` (the supervised warm start)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from train_embodied.config.value_checks import at_least, one_of

BACKENDS = ("local", "ray")
LOGGER_BACKENDS = ("tensorboard", "console", "wandb", "swanlab")


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
    """`runner`: the loop's length, evaluation, checkpointing and seeding.

    The loop runs `num_iterations` training iterations (rollout, advantages, update): `max_epochs`, capped by
    `max_steps` when that is >= 0 (-1: no cap), as the reference framework's `runner.max_steps` caps its
    iterations. An iteration's number (1-based) is the `step` its metrics are logged at and the N of the
    `global_step_N` checkpoint saved after it; the actor's optimizer steps are a separate count
    (`train/actor/optimizer_steps`, `optimizer_steps` in the run summary).
    """

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
            + at_least(f"{prefix}.max_steps", self.max_steps, 0, allow=(-1,))
            + at_least(f"{prefix}.val_check_interval", self.val_check_interval, 1, allow=(-1,))
            + at_least(f"{prefix}.save_interval", self.save_interval, 1, allow=(-1,))
            + at_least(f"{prefix}.weight_sync_interval", self.weight_sync_interval, 1)
            + at_least(f"{prefix}.seed", self.seed, 0)
        )

    @property
    def num_iterations(self) -> int:
        """Training iterations of the run: `max_epochs`, capped by `max_steps` when that is >= 0."""
        return min(self.max_epochs, self.max_steps) if self.max_steps >= 0 else self.max_epochs


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
class SFTSection:
    """`sft`: supervised warm start on scripted-expert demonstrations (`vla-sft`). `demo_options`: keywords of the
    env type's demo source (`vla_envs.demo_settings`; e.g. PutOnPlateInScene25's `perturb_xyz`), refused by it when
    it does not take them."""

    num_demos: int = 20
    demo_seed: int = 0
    steps: int = 200
    batch_size: int = 64
    lr: float = 3e-4
    augment_shift: int = 4
    output_dir: str | None = None
    demo_options: dict[str, Any] = field(default_factory=dict)

    def check(self, prefix: str) -> list[str]:
        errors = at_least(f"{prefix}.num_demos", self.num_demos, 1)
        errors += at_least(f"{prefix}.demo_seed", self.demo_seed, 0)
        errors += at_least(f"{prefix}.steps", self.steps, 0)
        errors += at_least(f"{prefix}.batch_size", self.batch_size, 1)
        errors += at_least(f"{prefix}.augment_shift", self.augment_shift, 0)
        if self.lr <= 0:
            errors.append(f"{prefix}.lr={self.lr!r} is invalid: must be > 0")
        return errors
