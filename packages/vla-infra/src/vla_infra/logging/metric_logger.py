"""``MetricLogger``: one ``log(dict, step)`` fanned out to tensorboard, wandb, swanlab and the console."""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vla_infra.logging.backends import BACKENDS, ConsoleBackend, MetricBackend

__all__ = ["MetricLogger", "to_scalar"]

_CONFIG_KEYS = ("logger_backends", "log_path", "project_name", "experiment_name")


def to_scalar(name: str, value: Any) -> float:
    """A Python float from a number, a bool, a numpy scalar or a one-element tensor/array.

    Raises:
        ValueError: naming the metric when the value is not a single number.
    """
    if isinstance(value, bool | numbers.Number) and not isinstance(value, complex):
        return float(value)
    numel = getattr(value, "numel", None) or getattr(value, "size", None)
    count = numel() if callable(numel) else numel
    if count == 1 and hasattr(value, "item"):
        return float(value.item())
    raise ValueError(
        f"metric {name!r} must be a single number, got {type(value).__name__} {getattr(value, 'shape', '')}"
    )


class MetricLogger:
    """Fan-out metric logger.

    Args:
        backends: any of "tensorboard" (default), "wandb", "swanlab", "console".
        log_dir: run directory (``runner.logger.log_path``); tensorboard writes to ``<log_dir>/tensorboard``,
            wandb to ``<log_dir>/wandb``, swanlab to ``<log_dir>/swanlab``.
        project_name / experiment_name: wandb / swanlab project and run name.
        config: the run config, stored by wandb and swanlab.
        console_interval_s: minimum seconds between console lines (0: every call).
        wandb_mode: "online", "offline" or "disabled"; default ``$WANDB_MODE`` or "online".
        console_stream: where console lines go (default stdout).
        swanlab_mode: "cloud", "offline", "local" or "disabled"; default ``$SWANLAB_MODE`` or "cloud".
        backend_names: per backend, ``(project_name, experiment_name)`` that replace the two above for it (e.g.
            the wandb run's own names).

    Keys are logged exactly as given (``train/actor/policy_loss``...); see :mod:`vla_infra.logging.names`.

    Example:
        >>> with MetricLogger(["console"], log_dir="/tmp/run", console_interval_s=0) as logger:
        ...     logger.log({"train/loss": 0.5}, step=1)
        step 1 | train/loss=0.5
    """

    def __init__(
        self,
        backends: Sequence[str] = ("tensorboard",),
        *,
        log_dir: str | os.PathLike[str],
        project_name: str = "vla-rl",
        experiment_name: str = "default",
        config: Mapping[str, Any] | None = None,
        console_interval_s: float = 10.0,
        wandb_mode: str | None = None,
        console_stream: Any = None,
        swanlab_mode: str | None = None,
        backend_names: Mapping[str, tuple[str, str]] | None = None,
    ) -> None:
        if isinstance(backends, str):
            backends = [backends]
        unknown = [b for b in backends if b not in BACKENDS]
        if unknown:
            raise ValueError(f"logger_backends has unknown entries {unknown}; allowed: {sorted(BACKENDS)}")
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.backends: dict[str, MetricBackend] = {}
        for name in dict.fromkeys(backends):
            if name == "console":
                self.backends[name] = ConsoleBackend(
                    console_interval_s=console_interval_s, stream=console_stream
                )
            else:
                project, experiment = (backend_names or {}).get(name, (project_name, experiment_name))
                self.backends[name] = BACKENDS[name](
                    self.log_dir,
                    project_name=project,
                    experiment_name=experiment,
                    config=config,
                    wandb_mode=wandb_mode,
                    swanlab_mode=swanlab_mode,
                )
        self._closed = False

    @classmethod
    def from_config(cls, logger_cfg: Mapping[str, Any], **kwargs: Any) -> MetricLogger:
        """Build from ``runner.logger`` (``logger_backends``, ``log_path``, ``project_name``, ``experiment_name``).

        Raises:
            ValueError: a key outside those four (extra options go in ``kwargs``), or no ``log_path``.
        """
        unknown = sorted(set(logger_cfg) - set(_CONFIG_KEYS))
        if unknown:
            raise ValueError(f"unknown logger keys {unknown}; allowed: {list(_CONFIG_KEYS)}")
        if "log_path" not in logger_cfg:
            raise ValueError("logger config needs 'log_path'")
        backends = logger_cfg.get("logger_backends", ["tensorboard"])
        return cls(
            backends if isinstance(backends, str) else list(backends),  # list("tensorboard") splits it
            log_dir=logger_cfg["log_path"],
            project_name=logger_cfg.get("project_name", "vla-rl"),
            experiment_name=logger_cfg.get("experiment_name", "default"),
            **kwargs,
        )

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Log scalars at ``step``; non-finite values are logged as they are (NaN shows a diverged run).

        Raises:
            ValueError: a non-string/empty key, a value that is not a single number, or a negative step.
            RuntimeError: after :meth:`close`.
        """
        if self._closed:
            raise RuntimeError("MetricLogger.log called after close()")
        if not isinstance(step, numbers.Integral) or step < 0:
            raise ValueError(f"step={step!r} must be a non-negative int")
        clean: dict[str, float] = {}
        for name, value in metrics.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"metric names must be non-empty strings, got {name!r}")
            clean[name] = to_scalar(name, value)
        if not clean:
            return
        for backend in self.backends.values():
            backend.log(clean, int(step))

    def close(self) -> None:
        """Flush and close every backend (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for backend in self.backends.values():
            backend.close()

    def __enter__(self) -> MetricLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
