"""How a run is run: `runner` (loop length, evaluation, checkpoints, seeding, logger), `trainer` (the reference
documents' logger spelling), `cluster` (nodes, GPUs, backend, placement) and `sft` (the supervised warm start)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from train_embodied.config.value_checks import at_least, one_of

BACKENDS = ("local", "ray")
LOGGER_BACKENDS = ("tensorboard", "console", "wandb", "swanlab")


@dataclass
class LoggerSection:
    """`runner.logger`: where the run writes and which metric backends it uses."""

    log_path: str = "runs"
    """Root of the run folders: a run writes to `log_path/experiment_name/<timestamp>` unless `log_dir` is
    set."""
    log_dir: str | None = None
    """The run's own folder; null: `log_path/experiment_name/<timestamp>`, chosen when the config loads."""
    project_name: str = "vla-rl"
    """Project name the wandb and swanlab backends report to."""
    experiment_name: str = "run"
    """Name of the run: one folder name under `log_path`, and the run name wandb and swanlab show."""
    logger_backends: list[str] = field(default_factory=lambda: ["tensorboard"])
    """Metric backends: tensorboard (`<log_dir>/tensorboard`), console, wandb and swanlab (extras of
    vla-infra)."""

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
    """The reference documents' wandb switch: true adds `wandb` to `runner.logger.logger_backends`, false
    refuses a config that lists it; null: not set."""
    project_name: str | None = None
    """Project the wandb backend reports to; null: `runner.logger.project_name`."""
    experiment_name: str | None = None
    """Run name the wandb backend reports; null: `runner.logger.experiment_name`."""


@dataclass
class TrainerLoggerSection:
    """`trainer.logger`: the wandb settings of the reference documents' spelling."""

    wandb: WandbSection = field(default_factory=WandbSection)
    """The wandb settings of the reference documents' spelling."""


@dataclass
class TrainerSection:
    """`trainer`: the reference documents' spelling of logger settings; the rest of a run is under `runner`."""

    logger: TrainerLoggerSection = field(default_factory=TrainerLoggerSection)
    """Logger settings in the reference documents' spelling."""


@dataclass
class RunnerSection:
    """`runner`: the loop's length, evaluation, checkpointing and seeding.

    The loop runs `num_iterations` training iterations (rollout, advantages, update): `max_epochs`, capped by
    `max_steps` when that is >= 0 (-1: no cap), as the reference framework's `runner.max_steps` caps its
    iterations. An iteration's number (1-based) is the `step` its metrics are logged at and the N of the
    `global_step_N` checkpoint saved after it; the actor's optimizer steps are a separate count
    (`train/actor/optimizer_steps`, `optimizer_steps` in the run summary).

    `max_restarts`: how many times a run that lost a worker for good (a node left the Ray cluster, a worker did not
    answer within `cluster.worker_timeout_s`, a worker died more than `cluster.max_worker_restarts` times) starts
    again from its last complete checkpoint in its run folder, once the cluster has its nodes again (waiting up to
    `cluster.worker_start_timeout_s`); 0 (default): the run ends with one line naming the worker and that checkpoint.
    """

    task_type: str = "embodied"
    """Kind of run; `embodied`, the reference framework's name for this trainer, is the one implemented."""
    logger: LoggerSection = field(default_factory=LoggerSection)
    """Where the run writes and which metric backends it uses."""
    max_epochs: int = 100
    """Training iterations of the run (rollout, advantages, update), capped by `max_steps`."""
    max_steps: int = -1
    """Cap on the training iterations, as the reference's: the run trains `min(max_epochs, max_steps)`; -1: no
    cap."""
    only_eval: bool = False
    """Evaluate `actor.model` on the held-out episodes and stop, without training."""
    eval_before_train: bool = False
    """Evaluate once before the first iteration (logged at step 0): the CPU configs' baseline."""
    eval_after_train: bool = True
    """Evaluate once after the last iteration."""
    val_check_interval: int = -1
    """Evaluate every this many training iterations; -1: never during training."""
    eval_greedy: bool = True
    """Also evaluate with greedy decisions, beside the sampled evaluation."""
    save_interval: int = -1
    """Save a checkpoint every this many iterations, and always at the end; -1: only at the end."""
    resume_dir: str | None = None
    """Checkpoint to continue from: a checkpoint, `checkpoints/` or run folder (its newest intact checkpoint);
    `auto`: the newest run of this experiment holding one, else a fresh run; null: a fresh run."""
    weight_sync_interval: int = 1
    """Send the actor's weights to the rollout workers every this many iterations (and before each
    evaluation)."""
    seed: int = 0
    """Run seed: every random draw of the run (env starts, sampling, shuffles) takes a stream seeded by it."""
    progress_bar: bool | str = "auto"
    """Progress bars for demos, the warm start, evaluations, iterations and rollouts: `auto` draws them on a
    terminal and prints a plain line every few seconds in a piped or redirected log; true: always bars; false:
    none."""
    torch_num_threads: int = 1
    """Intra-op threads of torch in the driver and the workers (1: fastest on a small shared CPU; 0: torch's
    default)."""
    max_consecutive_skipped_updates: int = 3
    """Updates in a row that may be skipped for a NaN or inf in the loss, gradients or advantages before the
    run ends with one line."""
    max_restarts: int = 0
    """Times a run that lost a worker or a node starts again from its last complete checkpoint (once the cluster
    has its nodes again) before it ends with one line; 0: never."""

    def check(self, prefix: str) -> list[str]:
        return (
            at_least(f"{prefix}.max_consecutive_skipped_updates", self.max_consecutive_skipped_updates, 1)
            + at_least(f"{prefix}.max_restarts", self.max_restarts, 0)
            + at_least(f"{prefix}.torch_num_threads", self.torch_num_threads, 0)
            + one_of(f"{prefix}.task_type", self.task_type, ("embodied",))
            + at_least(f"{prefix}.max_epochs", self.max_epochs, 0)
            + at_least(f"{prefix}.max_steps", self.max_steps, 0, allow=(-1,))
            + at_least(f"{prefix}.val_check_interval", self.val_check_interval, 1, allow=(-1,))
            + at_least(f"{prefix}.save_interval", self.save_interval, 1, allow=(-1,))
            + at_least(f"{prefix}.weight_sync_interval", self.weight_sync_interval, 1)
            + at_least(f"{prefix}.seed", self.seed, 0)
            + (
                []
                if self.progress_bar in (True, False, "auto")
                else [f"{prefix}.progress_bar={self.progress_bar!r} is not one of: true, false, auto"]
            )
        )

    @property
    def num_iterations(self) -> int:
        """Training iterations of the run: `max_epochs`, capped by `max_steps` when that is >= 0."""
        return min(self.max_epochs, self.max_steps) if self.max_steps >= 0 else self.max_epochs


@dataclass
class ClusterSection:
    """`cluster`: nodes, GPUs per node, backend and `component_placement` strings; `max_worker_restarts`: how
    many times each env or rollout Ray actor is replaced after it died before the run ends (the Ray backend);
    `worker_timeout_s`: how long the driver waits for any one worker call (a rollout step, an update, a weight
    sync, a checkpoint save) before it ends the run naming the worker that does not answer (what the reference
    framework sets in minutes with the `RLINF_TIMEOUT` environment variable); `worker_start_timeout_s`: how long a
    worker may take to start (its process, the model to load, the simulators to build) and, on a Ray cluster it
    joins, how long the run waits for `num_nodes` nodes to be alive."""

    num_nodes: int = 1
    """Machines the run uses; more than one needs `backend: ray`."""
    num_gpus_per_node: int = 0
    """GPUs per machine; 0: a CPU cluster, whose placement ids name nodes instead of GPUs."""
    backend: str = "local"
    """Where the workers run: `local` (in the driver process, simulators in subprocesses) or `ray` (one Ray
    actor per process)."""
    ray_address: str | None = None
    """Ray cluster to join (`auto`: the one `ray start` runs, or its address); null: a private Ray on
    127.0.0.1, stopped at the end."""
    component_placement: dict[str, Any] = field(default_factory=dict)
    """Processes of each component on GPUs or nodes, in the reference's placement strings (`env: 0-3`,
    `env,rollout,actor: all`); empty: every component on every slot."""
    max_worker_restarts: int = 3
    """Times each env or rollout Ray actor whose process died is replaced before the run ends (Ray)."""
    worker_timeout_s: float = 1800.0
    """Seconds the driver waits for any one worker call (a rollout step, an update, a weight sync, a save) before
    it ends the run naming the worker that does not answer (the reference's `RLINF_TIMEOUT`, in minutes there)."""
    worker_start_timeout_s: float = 3600.0
    """Seconds a worker may take to start (its process, model and simulators) and, on a Ray cluster it joins, the
    wait for `num_nodes` nodes to be alive."""

    def __post_init__(self) -> None:
        if not self.component_placement:  # empty: every component on every slot
            self.component_placement = {"env,rollout,actor": "all"}

    def check(self, prefix: str) -> list[str]:
        errors = at_least(f"{prefix}.num_nodes", self.num_nodes, 1)
        errors += at_least(f"{prefix}.num_gpus_per_node", self.num_gpus_per_node, 0)
        errors += at_least(f"{prefix}.max_worker_restarts", self.max_worker_restarts, 0)
        for key in ("worker_timeout_s", "worker_start_timeout_s"):
            timeout = getattr(self, key)
            number = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
            if not (number and math.isfinite(timeout) and timeout > 0):
                errors.append(
                    f"{prefix}.{key}={timeout!r} is invalid: must be a finite number of seconds > 0"
                )
        errors += one_of(f"{prefix}.backend", self.backend, BACKENDS)
        if self.backend == "local" and self.num_nodes > 1:
            errors.append(
                f"{prefix}.backend='local' cannot use {prefix}.num_nodes={self.num_nodes}: set `{prefix}.backend=ray`"
            )
        return errors


@dataclass
class SFTSection:
    """`sft`: supervised warm start on scripted-expert demonstrations (`vla-sft`). `demo_options`: keywords of the
    env type's demo source (`vla_envs.demo_settings`; e.g. PutOnPlateInScene25's `perturb_xyz`, LIBERO's
    `action_noise`), refused by it when it does not take them."""

    num_demos: int = 20
    """Scripted-expert episodes per task for the supervised warm start."""
    demo_seed: int = 0
    """Seed of the demonstration episodes (their starts are apart from the training and evaluation starts)."""
    steps: int = 200
    """Behaviour-cloning optimizer steps."""
    batch_size: int = 64
    """Samples per behaviour-cloning step (task-balanced when the env has several tasks)."""
    lr: float = 3e-4
    """Learning rate of the warm start."""
    augment_shift: int = 4
    """Pixels of random shift applied to the demonstration images while training (0: none)."""
    output_dir: str | None = None
    """Folder of the warm start's demos and policy; null:
    `<runner.logger.log_path>/sft/<runner.logger.experiment_name>`."""
    demo_options: dict[str, Any] = field(default_factory=dict)
    """Keywords of the env type's demo source (`vla_envs.demo_settings`; e.g. PutOnPlateInScene25's `perturb_xyz`
    and `perturb_turn`, LIBERO's `action_noise`), refused by it when it does not take them."""

    def check(self, prefix: str) -> list[str]:
        errors = at_least(f"{prefix}.num_demos", self.num_demos, 1)
        errors += at_least(f"{prefix}.demo_seed", self.demo_seed, 0)
        errors += at_least(f"{prefix}.steps", self.steps, 0)
        errors += at_least(f"{prefix}.batch_size", self.batch_size, 1)
        errors += at_least(f"{prefix}.augment_shift", self.augment_shift, 0)
        if self.lr <= 0:
            errors.append(f"{prefix}.lr={self.lr!r} is invalid: must be > 0")
        return errors
