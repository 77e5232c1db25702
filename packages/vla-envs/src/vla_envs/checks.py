"""`check_env_config`: every adapter-specific setting of an `EnvConfig` checked without building (or importing)
a simulator, so that a trainer can refuse a bad setting before it starts anything; `check_env_setup`: whether this
machine has what that env needs (packages, assets, runtimes, display libraries); `check_env_offload`: whether
that env can stop and rebuild its simulators between phases (`offload()` / `onload()`)."""

from __future__ import annotations

from vla_envs.config import EnvConfig
from vla_envs.registry import get_adapter


def check_env_config(cfg: EnvConfig) -> None:
    """Raise ValueError (one line naming `EnvConfig.<key>`, the value and what is allowed) if `cfg` is invalid for
    its `env_type` (`EnvConfig` itself refuses an unregistered one); adapters registered without a checker
    (`EnvAdapter.check_config`) are checked when built."""
    get_adapter(cfg.env_type).check(cfg)


def check_env_setup(cfg: EnvConfig) -> None:
    """Raise a `SimulatorSetupError` (one line: what is missing and the command that fixes it) if this machine lacks
    a package, asset, runtime or display library the env of `cfg` needs, found without starting a simulator (its
    adapter's `EnvAdapter.check_setup`; a lack that shows only inside a simulator raises the same error when the
    env is built)."""
    get_adapter(cfg.env_type).check_machine(cfg)


def check_env_offload(cfg: EnvConfig) -> None:
    """Raise ValueError (one line naming the setting and what is allowed) if the env of `cfg` cannot release its
    simulators between phases (`offload()` / `onload()`), as its adapter record declares (`EnvAdapter.offload`)."""
    get_adapter(cfg.env_type).check_offload(cfg)
