"""`make_metaworld_env`: validate the config and build a VectorEnv of MetaWorldSim rows."""

from __future__ import annotations

import importlib.util

import numpy as np

from vla_envs.config import EnvConfig
from vla_envs.metaworld.options import resolve_options
from vla_envs.metaworld.tasks import resolve_tasks
from vla_envs.sim import SimSpec
from vla_envs.vector import VectorEnv

INSTALL_HINT = "install it with: pip install 'vla-envs[metaworld]' (metaworld==3.1.1, mujoco, packaging)"


def check_metaworld_installed() -> None:
    """Raise ImportError naming what is missing and how to install it."""
    missing = [m for m in ("metaworld", "mujoco", "packaging") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"env_type='metaworld' needs the Python package(s) {missing}; {INSTALL_HINT}")


def metaworld_spec(cfg: EnvConfig) -> SimSpec:
    """Validate `cfg` for MetaWorld and describe the simulator (no simulator import)."""
    opts = resolve_options(cfg)
    tasks, goal_observable = resolve_tasks(cfg.task, cfg.task_set)
    if opts.states == "hand_goal" and not goal_observable:
        raise ValueError(
            f"EnvConfig.extra['states']='hand_goal' needs a goal-observable task set (MT10, MT50, one task); "
            f"task_set={cfg.task_set!r} hides the goal (its goal entries are zero): use extra['states']='full'"
        )
    return SimSpec(
        builder="vla_envs.metaworld.sim:build_metaworld_sims",
        action_dim=4,
        action_low=-np.ones(4, dtype=np.float32),
        action_high=np.ones(4, dtype=np.float32),
        tasks=tasks,
        options={"goal_observable": goal_observable},
    )


def make_metaworld_env(cfg: EnvConfig) -> VectorEnv:
    """Build the batched MetaWorld env of `cfg` (per-task envs are constructed inside the workers).

    Raises:
        ValueError: unknown task/task set/camera.
        ImportError: metaworld is not installed.
    """
    if cfg.env_type != "metaworld":
        raise ValueError(f"make_metaworld_env got EnvConfig.env_type={cfg.env_type!r}, expected 'metaworld'")
    spec = metaworld_spec(cfg)
    check_metaworld_installed()
    return VectorEnv(cfg, spec)
