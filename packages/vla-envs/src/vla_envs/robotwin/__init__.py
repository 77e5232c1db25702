"""RoboTwin 2.0 adapter (`env_type="robotwin"`): 46 dual-arm tasks through RoboTwin's own vector env.

RoboTwin runs in a child process with the interpreter of its own environment (its runtime from PyPI,
`rlinf-robotwin-runtime`, or a checkout; `scripts/setup_robotwin.sh` builds one), with assets downloaded from
HuggingFace. Importing this package imports nothing of RoboTwin; building an env checks RoboTwin and its
assets first and says precisely what is missing. See the package README for what was verified.
"""

from __future__ import annotations

from vla_envs.robotwin.env import ACTION_HIGH, ACTION_LOW, RoboTwinEnv, make_robotwin_env
from vla_envs.robotwin.options import DEFAULT_TASK_CONFIG, RoboTwinOptions, resolve_options
from vla_envs.robotwin.runtime import RoboTwinProcess, RoboTwinProcessDied, RoboTwinUnavailableError
from vla_envs.robotwin.tasks import (
    SUPPORTED_TASKS,
    TASK_DESCRIPTIONS,
    UNSUPPORTED_TASKS,
    check_task,
    list_robotwin_tasks,
)

__all__ = [
    "ACTION_HIGH",
    "ACTION_LOW",
    "DEFAULT_TASK_CONFIG",
    "SUPPORTED_TASKS",
    "TASK_DESCRIPTIONS",
    "UNSUPPORTED_TASKS",
    "RoboTwinEnv",
    "RoboTwinOptions",
    "RoboTwinProcess",
    "RoboTwinProcessDied",
    "RoboTwinUnavailableError",
    "check_task",
    "list_robotwin_tasks",
    "make_robotwin_env",
    "resolve_options",
]
