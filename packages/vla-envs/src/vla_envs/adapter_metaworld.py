"""The MetaWorld v3 adapter record (`env_type="metaworld"`): MT1 (any task), MT10, MT50, ML45-train/test, results
grouped by difficulty, scripted experts (`ENV_POLICY_MAP`) for demos. Imports nothing of MetaWorld."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vla_envs.registry import EnvAdapter, ScriptedDemos, TaskGrouping, register_adapter

if TYPE_CHECKING:
    from vla_envs.config import EnvConfig

#: Decisions per demo episode when `vla-envs demos metaworld` is given no `--max-episode-steps`.
CLI_MAX_EPISODE_STEPS = 50


def difficulty_grouping(tasks: Sequence[str]) -> TaskGrouping:
    """Difficulty groups (`vla_envs.metaworld.tasks.DIFFICULTY_GROUPS`, Seo et al., CoRL 2022) in table order."""
    from vla_envs.metaworld.tasks import DIFFICULTY_GROUPS, DIFFICULTY_LABELS, difficulty_group

    groups = {t: difficulty_group(t) for t in tasks}
    order = [g for g in DIFFICULTY_GROUPS if g in groups.values()]
    return TaskGrouping(groups, order, {g: DIFFICULTY_LABELS[g] for g in order})


def demo_settings(cfg: EnvConfig, *, episodes_per_task: int, seed: int = 0) -> dict[str, Any]:
    """The keywords of `generate_metaworld_demos` that record demos as env `cfg` observes and acts: its tasks
    (`task` or `task_set`), image size, cameras, action repeat, episode length, reward mode and MetaWorld options."""
    from vla_envs.metaworld.options import resolve_options
    from vla_envs.metaworld.tasks import resolve_tasks

    opts = resolve_options(cfg)
    return {
        "tasks": resolve_tasks(cfg.task, cfg.task_set)[0],
        "episodes_per_task": int(episodes_per_task),
        "image_size": int(cfg.image_hw[0]),
        "camera": opts.camera,
        "wrist_camera": cfg.wrist_camera,
        "action_repeat": cfg.action_repeat,
        "max_episode_steps": cfg.max_episode_steps,
        "reward_mode": cfg.reward_mode,
        "hide_far_meshes": opts.hide_far_meshes,
        "render_mesh_grid": opts.render_mesh_grid,
        "seed": int(seed),
    }


def demo_settings_from_cli(args: argparse.Namespace) -> dict[str, Any]:
    """`vla-envs demos metaworld ...` -> `generate_metaworld_demos` keywords (`--tasks` may name one task set)."""
    from vla_envs.metaworld.tasks import TASK_SETS

    names = args.tasks.split(",")
    tasks = TASK_SETS[names[0]][0] if len(names) == 1 and names[0] in TASK_SETS else names
    return {
        "tasks": tasks,
        "episodes_per_task": args.episodes,
        "image_size": args.image_size,
        "camera": args.camera,
        "wrist_camera": args.wrist_camera,
        "action_repeat": args.action_repeat,
        "max_episode_steps": CLI_MAX_EPISODE_STEPS
        if args.max_episode_steps is None
        else args.max_episode_steps,
        "reward_mode": args.reward_mode,
        "hide_far_meshes": args.hide_far_meshes,
        "render_mesh_grid": args.render_mesh_grid,
        "seed": args.seed,
    }


METAWORLD = register_adapter(
    EnvAdapter(
        name="metaworld",
        factory="vla_envs.metaworld:make_metaworld_env",
        task_lister="vla_envs.metaworld:list_metaworld_tasks",
        check_config="vla_envs.metaworld.env:metaworld_spec",
        task_grouping=difficulty_grouping,
        demos=ScriptedDemos(
            generate="vla_envs.metaworld.demos:generate_metaworld_demos",
            settings=demo_settings,
            from_cli=demo_settings_from_cli,
        ),
        offload=True,
        check_setup="vla_envs.metaworld.env:check_setup",
    )
)
