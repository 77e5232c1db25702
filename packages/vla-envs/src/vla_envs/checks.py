"""`check_env_config`: every adapter-specific setting of an `EnvConfig` checked without building (or importing)
a simulator, so that a trainer can refuse a bad setting before it starts anything; `check_env_offload`: whether
that env can stop and rebuild its simulators between phases (`offload()` / `onload()`)."""

from __future__ import annotations

from vla_envs.config import EnvConfig
from vla_envs.registry import get_adapter, resolve_ref


def check_env_config(cfg: EnvConfig) -> None:
    """Raise ValueError (one line naming `EnvConfig.<key>`, the value and what is allowed) if `cfg` is invalid for
    its `env_type` (`EnvConfig` itself refuses an unregistered one); adapters registered without a checker
    (`EnvAdapter.check_config`) are checked when built."""
    get_adapter(cfg.env_type).check(cfg)


#: env_type -> "module:function(cfg)" that raises ValueError when that configuration of the adapter cannot be
#: offloaded. The other built-in adapters always can: their simulators live in subprocesses (MetaWorld, LIBERO,
#: ManiSkill's CPU backend: `VectorEnv`) or in RoboTwin's own process, which `offload()` stops and `onload()`
#: starts again.
_OFFLOAD_CHECKERS = {"maniskill": "vla_envs.maniskill.options:check_offload"}


def check_env_offload(cfg: EnvConfig) -> None:
    """Raise ValueError (one line naming the setting and what is allowed) if the env of `cfg` cannot release its
    simulators between phases (`offload()` / `onload()`). An env type registered without a checker is checked
    when built (its env must have `offload` and `onload`)."""
    ref = _OFFLOAD_CHECKERS.get(str(cfg.env_type))
    if ref is None:
        return
    resolve_ref(ref)(cfg)
