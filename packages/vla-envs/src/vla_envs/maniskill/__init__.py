"""ManiSkill3 adapter: CPU (subprocess workers) and GPU (one batched process) backends behind `BatchedEnv`.

Importing this package does not import ManiSkill; building an env or generating demos does.
See README.md in this folder for usage, supported tasks and what is verified.
"""

from __future__ import annotations

from typing import Any

from vla_envs.maniskill.factory import make_maniskill_env
from vla_envs.maniskill.runtime import (
    ManiSkillAssetsMissingError,
    ManiSkillUnavailableError,
    maniskill_unavailable_reason,
)
from vla_envs.maniskill.tasks import TASKS, ManiSkillTask, list_maniskill_tasks

__all__ = [
    "TASKS",
    "ManiSkillAssetsMissingError",
    "ManiSkillTask",
    "ManiSkillUnavailableError",
    "generate_maniskill_demos",
    "generate_scripted_demos",
    "list_maniskill_tasks",
    "make_maniskill_env",
    "maniskill_unavailable_reason",
]


def generate_maniskill_demos(*args: Any, **kwargs: Any) -> Any:
    """Motion-planner demonstrations in the shared demo format; see `vla_envs.maniskill.demos`."""
    from vla_envs.maniskill.demos import generate_maniskill_demos as _generate

    return _generate(*args, **kwargs)


def generate_scripted_demos(
    out_dir: Any, *, num_workers: int = 1, progress: bool = True, **settings: Any
) -> Any:
    """The adapter's demo generator: settings of one PutOnPlateInScene25 task (a `task` key, from
    `put_on_plate_demos.put_on_plate_demo_settings`) run its scripted expert; settings with `tasks` (the command
    line's) run the motion planner (`generate_maniskill_demos`)."""
    if "task" in settings:
        from vla_envs.maniskill.put_on_plate_demos import generate_put_on_plate_demos

        return generate_put_on_plate_demos(out_dir, num_workers=num_workers, progress=progress, **settings)
    return generate_maniskill_demos(out_dir, num_workers=num_workers, progress=progress, **settings)
