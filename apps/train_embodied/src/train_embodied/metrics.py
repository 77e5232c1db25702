"""The run's metric logger (vla_infra MetricLogger: `<log_dir>/tensorboard`, `<log_dir>/wandb`) and metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

from train_embodied.config.build import TrainConfig


class _JsonlLogger:
    """Always-on copy of every logged dict in `<log_dir>/metrics.jsonl` (easy to plot and to test)."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("a")

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.file.write(json.dumps({"step": step, **{k: float(v) for k, v in metrics.items()}}) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class RunLogger:
    """Fan-out to the vla_infra MetricLogger (tensorboard / console / wandb) and metrics.jsonl."""

    def __init__(self, tc: TrainConfig, log_dir: Path) -> None:
        from vla_infra import MetricLogger

        self.backend = MetricLogger(
            backends=list(tc.runner.logger.logger_backends),
            log_dir=str(log_dir),  # the backends add their folder: <log_dir>/tensorboard, <log_dir>/wandb
            project_name=tc.runner.logger.project_name,
            experiment_name=tc.runner.logger.experiment_name,
            config=tc.raw,
        )
        self.jsonl = _JsonlLogger(log_dir / "metrics.jsonl")

    def log(self, metrics: dict[str, float], step: int) -> None:
        clean = {k: float(v) for k, v in metrics.items() if v is not None}
        self.backend.log(clean, step=step)
        self.jsonl.log(clean, step)

    def close(self) -> None:
        self.backend.close()
        self.jsonl.close()


def make_logger(tc: TrainConfig, log_dir: Path) -> RunLogger:
    """The run's logger (`runner.logger.logger_backends`, tensorboard by default) + metrics.jsonl."""
    return RunLogger(tc, log_dir)
