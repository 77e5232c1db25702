"""Metric logger backends: tensorboard (default), wandb, swanlab, console."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TextIO

__all__ = [
    "BACKENDS",
    "ConsoleBackend",
    "MetricBackend",
    "SwanlabBackend",
    "TensorBoardBackend",
    "WandbBackend",
]


class MetricBackend(Protocol):
    """Receives flat ``{name: float}`` dicts with a global step."""

    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class TensorBoardBackend:
    """Scalars into ``<log_dir>/tensorboard`` with ``torch.utils.tensorboard.SummaryWriter``."""

    def __init__(self, log_dir: str | os.PathLike[str], *, flush_secs: int = 30, **_: Any) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.path = Path(log_dir) / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.path), flush_secs=flush_secs)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, global_step=step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


class WandbBackend:
    """A wandb run in ``<log_dir>/wandb``; ``mode="offline"`` (or ``WANDB_MODE=offline``) needs no network."""

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        project_name: str,
        experiment_name: str,
        config: Mapping[str, Any] | None = None,
        wandb_mode: str | None = None,
        **_: Any,
    ) -> None:
        try:
            import wandb
        except ImportError as err:  # an optional extra
            raise ImportError(
                "logger backend 'wandb' needs the wandb package: pip install 'vla-infra[wandb]'"
            ) from err
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=project_name,
            name=experiment_name,
            dir=str(log_dir),
            config=dict(config or {}),
            mode=wandb_mode or os.environ.get("WANDB_MODE") or "online",
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
        )

    @property
    def run_dir(self) -> Path:
        return Path(self.run.dir).parent

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


class SwanlabBackend:
    """A swanlab experiment in ``<log_dir>/swanlab``; ``swanlab_mode="offline"`` (or ``SWANLAB_MODE=offline``)
    writes it there without a network (``swanlab sync`` uploads it later)."""

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        project_name: str,
        experiment_name: str,
        config: Mapping[str, Any] | None = None,
        swanlab_mode: str | None = None,
        **_: Any,
    ) -> None:
        try:
            import swanlab
        except ImportError as err:  # an optional extra
            raise ImportError(
                "logger backend 'swanlab' needs the swanlab package: pip install 'vla-infra[swanlab]'"
            ) from err
        self.path = Path(log_dir) / "swanlab"
        self.path.mkdir(parents=True, exist_ok=True)
        self.run = swanlab.init(
            project=project_name,
            experiment_name=experiment_name,
            logdir=str(self.path),
            config=dict(config or {}),
            mode=swanlab_mode or os.environ.get("SWANLAB_MODE") or "cloud",
        )

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


class ConsoleBackend:
    """One compact line per logged step, at most every ``console_interval_s`` seconds.

    Keys are grouped by their first path segment (train, rollout, env, time, ...) in a stable order. The last
    suppressed step is printed on :meth:`close`, so the final values are always visible.
    """

    def __init__(
        self, *, console_interval_s: float = 10.0, stream: TextIO | None = None, precision: int = 4, **_: Any
    ) -> None:
        if console_interval_s < 0:
            raise ValueError(f"console_interval_s={console_interval_s} must be >= 0")
        self.interval = console_interval_s
        self.stream = stream
        self.precision = precision
        self._last_print = float("-inf")
        self._pending: tuple[int, dict[str, float]] | None = None

    def format(self, metrics: Mapping[str, float], step: int) -> str:
        groups: dict[str, list[str]] = {}
        for name in sorted(metrics):
            groups.setdefault(name.split("/", 1)[0], []).append(f"{name}={metrics[name]:.{self.precision}g}")
        return f"step {step} | " + " | ".join(" ".join(items) for items in groups.values())

    def _emit(self, metrics: Mapping[str, float], step: int) -> None:
        print(self.format(metrics, step), file=self.stream or sys.stdout, flush=True)
        self._last_print = time.monotonic()
        self._pending = None

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        if time.monotonic() - self._last_print >= self.interval:
            self._emit(metrics, step)
        else:
            self._pending = (step, dict(metrics))

    def close(self) -> None:
        if self._pending is not None:
            step, metrics = self._pending
            self._emit(metrics, step)


BACKENDS: dict[str, type] = {
    "tensorboard": TensorBoardBackend,
    "wandb": WandbBackend,
    "swanlab": SwanlabBackend,
    "console": ConsoleBackend,
}
