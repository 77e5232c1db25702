"""The LIBERO adapter record (`env_type="libero"`): the five standard suites and `libero_130`, results grouped
by suite, scripted-expert demos of the drawer-closing tasks (`vla_envs.libero.demos`). Imports nothing of LIBERO
(listing tasks and grouping import its task tables)."""

from __future__ import annotations

from collections.abc import Sequence

from vla_envs.registry import EnvAdapter, ScriptedDemos, TaskGrouping, register_adapter

#: How the reference LIBERO table titles each suite, in its column order.
LIBERO_SUITE_LABELS: dict[str, str] = {
    "libero_object": "Object",
    "libero_spatial": "Spatial",
    "libero_goal": "Goal",
    "libero_10": "Long",
    "libero_90": "90",
}


def suite_grouping(tasks: Sequence[str]) -> TaskGrouping:
    """The standard suite each task comes from (needs LIBERO's task tables installed)."""
    from vla_envs.libero.suites import tasks_by_name

    known = tasks_by_name()
    unknown = [t for t in tasks if t not in known]
    if unknown:
        raise ValueError(f"unknown LIBERO task(s) {unknown}")
    groups = {t: known[t].suite for t in tasks}
    order = [s for s in LIBERO_SUITE_LABELS if s in groups.values()]
    return TaskGrouping(groups, order, {s: LIBERO_SUITE_LABELS[s] for s in order})


LIBERO = register_adapter(
    EnvAdapter(
        name="libero",
        factory="vla_envs.libero:make_libero_env",
        task_lister="vla_envs.libero:list_libero_tasks",
        check_config="vla_envs.libero.options:resolve_options",
        task_grouping=suite_grouping,
        demos=ScriptedDemos(
            generate="vla_envs.libero.demos:generate_libero_demos",
            settings="vla_envs.libero.demos:libero_demo_settings",
            from_cli="vla_envs.libero.demos:demo_settings_from_cli",
        ),
        offload=True,
        check_setup="vla_envs.libero.env:check_setup",
    )
)
