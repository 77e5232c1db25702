"""Config composition (Hydra), validation and conversion to typed sections."""

from train_embodied.config.build import ConfigError, build_train_config
from train_embodied.config.load import assign_log_dir, compose_config, config_dir, list_configs, to_plain
from train_embodied.config.train_config import TrainConfig

__all__ = [
    "ConfigError",
    "TrainConfig",
    "assign_log_dir",
    "build_train_config",
    "compose_config",
    "config_dir",
    "list_configs",
    "to_plain",
]


def load_train_config(
    config: str, overrides: list[str] | None = None, *, check_paths: bool = True
) -> TrainConfig:
    """Compose, assign the run folder, resolve and validate (`check_paths`: also against this machine's GPUs); the
    command line also runs `train_embodied.preflight` on the result."""
    cfg = compose_config(config, overrides)
    assign_log_dir(cfg)
    return build_train_config(to_plain(cfg), check_paths=check_paths)
