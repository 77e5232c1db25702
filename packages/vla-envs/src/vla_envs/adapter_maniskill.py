"""The ManiSkill3 adapter record (`env_type="maniskill"`): CPU and GPU backends, the PutOnPlateInScene25 tasks
grouped as the guides' table, motion-planner demos from the command line and the PutOnPlateInScene25 expert's demos
from an env config. Imports nothing of ManiSkill."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from vla_envs.registry import EnvAdapter, ScriptedDemos, TaskGrouping, register_adapter


def put_on_plate_grouping(tasks: Sequence[str]) -> TaskGrouping:
    """The guides' columns for PutOnPlateInScene25 tasks (training setting, Vision, Semantic and Execution
    out-of-distribution splits; `vla_envs.maniskill.put_on_plate.OOD_SPLITS`); other tasks: no groups."""
    from vla_envs.maniskill.put_on_plate import SPLIT_LABELS, SPLIT_OF

    if not tasks or not all(t in SPLIT_OF for t in tasks):
        return TaskGrouping()
    groups = {t: SPLIT_OF[t] for t in tasks}
    order = [g for g in SPLIT_LABELS if g in groups.values()]
    return TaskGrouping(groups, order, {g: SPLIT_LABELS[g] for g in order})


def demo_settings_from_cli(args: argparse.Namespace) -> dict[str, Any]:
    """`vla-envs demos maniskill ...` -> `generate_maniskill_demos` keywords (its own episode cap by default;
    camera, action repeat and far-mesh hiding are MetaWorld's)."""
    settings: dict[str, Any] = {
        "tasks": args.tasks.split(","),
        "episodes_per_task": args.episodes,
        "image_size": args.image_size,
        "wrist_camera": args.wrist_camera,
        "reward_mode": args.reward_mode,
        "seed": args.seed,
    }
    if args.max_episode_steps is not None:
        settings["max_episode_steps"] = args.max_episode_steps
    return settings


MANISKILL = register_adapter(
    EnvAdapter(
        name="maniskill",
        factory="vla_envs.maniskill:make_maniskill_env",
        task_lister="vla_envs.maniskill:list_maniskill_tasks",
        check_config="vla_envs.maniskill.options:resolve_options",
        task_grouping=put_on_plate_grouping,
        demos=ScriptedDemos(
            generate="vla_envs.maniskill:generate_scripted_demos",
            # only the PutOnPlateInScene25 tasks' expert follows an EnvConfig (the warm start of vla-sft)
            settings="vla_envs.maniskill.put_on_plate_demos:put_on_plate_demo_settings",
            from_cli=demo_settings_from_cli,
        ),
        offload="vla_envs.maniskill.options:check_offload",
        check_setup="vla_envs.maniskill.runtime:check_setup",
    )
)
