"""Env-type registry: `make_env(cfg)` (`vla_envs.factory`) picks an adapter by `cfg.env_type`, importing it only
then.

Adapters are referenced as "module:attribute" strings so that `import vla_envs` never imports a simulator.
An adapter module registers itself (or is pre-registered below) with
`register_env_type(name, factory, task_lister=...)`, where `factory(cfg: EnvConfig) -> BatchedEnv` and
`task_lister() -> list[str]` lists the valid task names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vla_envs.base import BatchedEnv
    from vla_envs.config import EnvConfig

Factory = Callable[["EnvConfig"], "BatchedEnv"]
TaskLister = Callable[[], list[str]]

# name -> (factory or "module:attr", task lister or "module:attr" or None)
_REGISTRY: dict[str, tuple[Factory | str, TaskLister | str | None]] = {
    "metaworld": ("vla_envs.metaworld:make_metaworld_env", "vla_envs.metaworld:list_metaworld_tasks"),
    "maniskill": ("vla_envs.maniskill:make_maniskill_env", "vla_envs.maniskill:list_maniskill_tasks"),
    "libero": ("vla_envs.libero:make_libero_env", "vla_envs.libero:list_libero_tasks"),
    "robotwin": ("vla_envs.robotwin:make_robotwin_env", "vla_envs.robotwin:list_robotwin_tasks"),
}


def register_env_type(
    name: str, factory: Factory | str, *, task_lister: TaskLister | str | None = None, overwrite: bool = True
) -> None:
    """Register (or replace) an env type.

    Args:
        name: The `EnvConfig.env_type` value.
        factory: Callable `(EnvConfig) -> BatchedEnv`, or a lazy "module:attr" reference to one.
        task_lister: Callable `() -> list[str]` (or "module:attr") listing valid task names.
        overwrite: If False, raise when `name` is already registered.
    """
    if not overwrite and name in _REGISTRY:
        raise ValueError(f"env type {name!r} is already registered")
    _REGISTRY[name] = (factory, task_lister)


def list_env_types() -> list[str]:
    """Registered env type names."""
    return sorted(_REGISTRY)


def _resolve(ref: Any) -> Any:
    if not isinstance(ref, str):
        return ref
    module_name, _, attr = ref.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr)


def _entry(env_type: str) -> tuple[Factory | str, TaskLister | str | None]:
    if env_type not in _REGISTRY:
        raise ValueError(f"unknown env_type {env_type!r}; valid env types: {list_env_types()}")
    return _REGISTRY[env_type]


def list_tasks(env_type: str) -> list[str]:
    """Valid task names of `env_type` (imports the adapter, not necessarily the simulator)."""
    _, lister = _entry(env_type)
    if lister is None:
        return []
    return list(_resolve(lister)())


def env_factory(env_type: str) -> Factory:
    """The factory `(EnvConfig) -> BatchedEnv` of `env_type` (imports its adapter module, not the simulator)."""
    factory, _ = _entry(env_type)
    return _resolve(factory)
