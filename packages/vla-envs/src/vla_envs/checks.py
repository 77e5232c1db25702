"""`check_env_config`: every adapter-specific setting of an `EnvConfig` checked without building (or importing)
a simulator, so that a trainer can refuse a bad setting before it starts anything."""

from __future__ import annotations

import importlib

from vla_envs.config import EnvConfig

#: env_type -> "module:function(cfg)" that resolves (and so validates) the adapter's settings: tasks, task sets,
#: cameras, image size, `extra` keys. Each raises ValueError naming `EnvConfig.<key>`.
_CHECKERS = {
    "metaworld": "vla_envs.metaworld.env:metaworld_spec",
    "maniskill": "vla_envs.maniskill.options:resolve_options",
    "libero": "vla_envs.libero.options:resolve_options",
    "robotwin": "vla_envs.robotwin.options:resolve_options",
}


def check_env_config(cfg: EnvConfig) -> None:
    """Raise ValueError (one line naming `EnvConfig.<key>`, the value and what is allowed) if `cfg` is invalid for
    its `env_type` (`EnvConfig` itself refuses an unregistered one); env types registered without a checker are
    checked when built."""
    ref = _CHECKERS.get(str(cfg.env_type))
    if ref is None:
        return
    module, _, name = ref.partition(":")
    getattr(importlib.import_module(module), name)(cfg)
