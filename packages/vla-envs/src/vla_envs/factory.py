"""`make_env`: an `EnvConfig` (or a dict of its fields) -> the `BatchedEnv` of its registered adapter."""

from __future__ import annotations

from typing import Any

from vla_envs.base import BatchedEnv
from vla_envs.config import EnvConfig
from vla_envs.registry import get_adapter


def make_env(cfg: EnvConfig | dict[str, Any]) -> BatchedEnv:
    """Build the batched env described by `cfg` (an EnvConfig or a dict of its fields).

    Raises:
        ValueError: missing or unknown env type (lists the registered ones) or an invalid config.
        ImportError: the simulator is not installed (the message says which extra to install).
    """
    if isinstance(cfg, dict):
        cfg = EnvConfig.from_dict(cfg)
    return get_adapter(cfg.env_type).make_env(cfg)
