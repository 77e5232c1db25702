"""Metric logging: ``MetricLogger`` fan-out (tensorboard, wandb, swanlab, console) and the metric-name helpers."""

from vla_infra.logging.backends import (
    BACKENDS,
    ConsoleBackend,
    SwanlabBackend,
    TensorBoardBackend,
    WandbBackend,
)
from vla_infra.logging.metric_logger import MetricLogger, to_scalar
from vla_infra.logging.names import TIME, StepTimer, namespaced

__all__ = [
    "BACKENDS",
    "TIME",
    "ConsoleBackend",
    "MetricLogger",
    "StepTimer",
    "SwanlabBackend",
    "TensorBoardBackend",
    "WandbBackend",
    "namespaced",
    "to_scalar",
]
