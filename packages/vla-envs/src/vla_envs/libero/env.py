"""`make_libero_env`: validate the config and build a VectorEnv of LiberoSim rows."""

from __future__ import annotations

import numpy as np

from vla_envs.config import EnvConfig
from vla_envs.libero.options import FIXED_INIT_STATES, resolve_options
from vla_envs.libero.sim import ACTION_DIM
from vla_envs.libero.suites import SUITES, check_libero_installed, resolve_tasks
from vla_envs.setup_errors import check_mujoco_gl
from vla_envs.sim import SimSpec
from vla_envs.vector import VectorEnv

# Every task of the five standard suites ships 50 fixed initial states (the `.pruned_init` files).
INIT_STATES_PER_TASK = FIXED_INIT_STATES


def check_setup(cfg: EnvConfig) -> None:
    """Raise a `SimulatorSetupError` when this machine lacks what the env of `cfg` needs: LIBERO's packages and,
    when it renders, MuJoCo's OpenGL backend."""
    check_libero_installed()
    if cfg.render:
        check_mujoco_gl("libero")


def libero_spec(cfg: EnvConfig) -> SimSpec:
    """Validate `cfg` for LIBERO and describe the simulator (imports LIBERO's task tables, not MuJoCo)."""
    opts = resolve_options(cfg)  # refuses more trials than fixed initial states unless they are sampled
    if isinstance(cfg.task_set, str) and cfg.task_set not in SUITES:  # before the install check
        raise ValueError(
            f"EnvConfig.task_set={cfg.task_set!r} is not a LIBERO suite; valid suites: {list(SUITES)} "
            "(or a list of task names)"
        )
    check_libero_installed()
    tasks = resolve_tasks(cfg.task, cfg.task_set)
    # LIBERO's OSC_POSE controller takes [dx, dy, dz, droll, dpitch, dyaw, gripper] in [-1, 1] (gripper -1 = open).
    return SimSpec(
        builder="vla_envs.libero.sim:build_libero_sims",
        action_dim=ACTION_DIM,
        action_low=-np.ones(ACTION_DIM, dtype=np.float32),
        action_high=np.ones(ACTION_DIM, dtype=np.float32),
        tasks=[t.name for t in tasks],
        options={"tasks": tasks, "opts": opts},
    )


def make_libero_env(cfg: EnvConfig) -> VectorEnv:
    """Build the batched LIBERO env of `cfg` (the LIBERO envs are constructed inside the workers).

    Raises:
        ValueError: unknown suite/task, camera, reward mode or option.
        ImportError: LIBERO is not installed.
    """
    if cfg.env_type != "libero":
        raise ValueError(f"make_libero_env got EnvConfig.env_type={cfg.env_type!r}, expected 'libero'")
    return VectorEnv(cfg, libero_spec(cfg))
