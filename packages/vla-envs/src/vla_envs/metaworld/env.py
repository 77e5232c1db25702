"""`make_metaworld_env`: validate the config and build a VectorEnv of MetaWorldSim rows."""

from __future__ import annotations

import numpy as np

from vla_envs.config import EnvConfig
from vla_envs.metaworld.options import resolve_options
from vla_envs.metaworld.tasks import resolve_tasks
from vla_envs.setup_errors import check_mujoco_gl, check_packages
from vla_envs.sim import SimSpec
from vla_envs.vector import VectorEnv


def check_metaworld_installed() -> None:
    """Raise `SimulatorNotInstalled` (an ImportError) naming what is missing and the command that installs it."""
    check_packages("metaworld", ("metaworld", "mujoco", "packaging"), "metaworld")


def check_setup(cfg: EnvConfig) -> None:
    """Raise a `SimulatorSetupError` when this machine lacks what the env of `cfg` needs: MetaWorld's packages and,
    when it renders, MuJoCo's OpenGL backend."""
    check_metaworld_installed()
    if cfg.render:
        check_mujoco_gl("metaworld")


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
