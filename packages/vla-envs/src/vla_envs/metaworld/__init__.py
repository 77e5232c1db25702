"""MetaWorld v3 adapter (`env_type="metaworld"`): MT1 (any task), MT10, MT50, ML45-train/test.

Importing this module does not import metaworld or mujoco; the workers do.
"""

from __future__ import annotations

from vla_envs.metaworld.env import check_metaworld_installed, make_metaworld_env
from vla_envs.metaworld.tasks import (
    ALL_TASKS,
    DIFFICULTY_GROUPS,
    DIFFICULTY_LABELS,
    ML45_TEST_TASKS,
    ML45_TRAIN_TASKS,
    MT10_TASKS,
    TASK_DESCRIPTIONS,
    TASK_SETS,
    difficulty_group,
    list_metaworld_tasks,
    resolve_tasks,
)

__all__ = [
    "ALL_TASKS",
    "DIFFICULTY_GROUPS",
    "DIFFICULTY_LABELS",
    "ML45_TEST_TASKS",
    "ML45_TRAIN_TASKS",
    "MT10_TASKS",
    "TASK_DESCRIPTIONS",
    "TASK_SETS",
    "check_metaworld_installed",
    "difficulty_group",
    "list_metaworld_tasks",
    "make_metaworld_env",
    "resolve_tasks",
]
