"""Held-out evaluation helpers: the per-task / per-group result table of evaluation episodes.

The result tables of the reference documents report success per group of tasks: MetaWorld per difficulty group
(Easy, Medium, Hard, Very Hard, and Avg. = the mean of the groups), LIBERO per suite (Object, Spatial, Goal, Long,
90, and 130 = the mean over all tasks). `evaluation_table` turns per-episode (task, success) records into both
kinds of summary; `task_grouping` gives each env type's grouping (from its adapter record).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vla_envs.registry import TaskGrouping, get_adapter

__all__ = [
    "TaskGrouping",
    "evaluation_table",
    "format_evaluation_tables",
    "task_grouping",
]


def task_grouping(env_type: str, tasks: Sequence[str]) -> TaskGrouping:
    """The grouping of the reference result table for `tasks` of `env_type`: its adapter's
    `EnvAdapter.task_grouping` (MetaWorld: difficulty groups; LIBERO: suites; ManiSkill: the PutOnPlateInScene25
    splits), an empty grouping (tasks only) for adapters without one.

    Raises:
        ValueError: an unregistered env type, or a task unknown to the env type.
    """
    return get_adapter(env_type).grouping(tasks)


def evaluation_table(
    tasks: Sequence[str],
    successes: Sequence[float] | np.ndarray,
    grouping: TaskGrouping | None = None,
) -> dict[str, Any]:
    """Per-task and per-group success of evaluation episodes.

    A group's success is the mean of its tasks' success rates (each task counts once, as in the reference
    tables; with every task x trial pair evaluated once this equals the mean over the group's episodes).

    Args:
        tasks: Task name of each episode, [N].
        successes: success_once of each episode (0/1), [N].
        grouping: `task_grouping(...)`; None or an empty grouping gives tasks only.

    Returns:
        JSON-friendly dict:
            tasks: {task: {"group", "success_once", "num_episodes"}} in group order, then first appearance;
            groups: {group: {"label", "success_once", "num_tasks", "num_episodes"}} in `grouping.order`;
            avg: mean of the groups' success (the MetaWorld table's Avg.; the mean over tasks without groups);
            all_tasks: mean of the tasks' success (the LIBERO table's 130 column);
            num_episodes: N; balanced: whether every task has the same number of episodes.

    Raises:
        ValueError: no episodes, lengths differ, or a task missing from a non-empty grouping.
    """
    succ = np.asarray(successes, dtype=np.float64).reshape(-1)
    if len(tasks) != len(succ):
        raise ValueError(f"got {len(tasks)} task names for {len(succ)} episode successes")
    if len(succ) == 0:
        raise ValueError("evaluation_table needs at least one episode")
    grouping = grouping or TaskGrouping()
    per_task: dict[str, list[float]] = {}
    for task, s in zip(tasks, succ.tolist(), strict=True):
        per_task.setdefault(task, []).append(s)
    if grouping.groups:
        missing = [t for t in per_task if t not in grouping.groups]
        if missing:
            raise ValueError(f"task(s) {missing} have no group in the grouping")
        rank = {g: i for i, g in enumerate(grouping.order)}
        names = sorted(per_task, key=lambda t: rank.get(grouping.groups[t], len(rank)))  # stable: appearance
    else:
        names = list(per_task)
    task_rows = {
        t: {
            "group": grouping.groups.get(t),
            "success_once": float(np.mean(per_task[t])),
            "num_episodes": len(per_task[t]),
        }
        for t in names
    }
    group_rows: dict[str, dict[str, Any]] = {}
    for g in grouping.order:
        members = [t for t in names if task_rows[t]["group"] == g]
        if members:
            group_rows[g] = {
                "label": grouping.labels.get(g, g),
                "success_once": float(np.mean([task_rows[t]["success_once"] for t in members])),
                "num_tasks": len(members),
                "num_episodes": sum(task_rows[t]["num_episodes"] for t in members),
            }
    task_means = [r["success_once"] for r in task_rows.values()]
    all_tasks = float(np.mean(task_means))
    avg = float(np.mean([r["success_once"] for r in group_rows.values()])) if group_rows else all_tasks
    counts = {r["num_episodes"] for r in task_rows.values()}
    return {
        "tasks": task_rows,
        "groups": group_rows,
        "avg": avg,
        "all_tasks": all_tasks,
        "num_episodes": len(succ),
        "balanced": len(counts) == 1,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100.0 * x:.1f}"


def _markdown(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(r) for r in rows)]


def format_evaluation_tables(tables: Mapping[str, Mapping[str, Any]]) -> str:
    """Markdown tables of success in percent, as the reference documents print them.

    The group table has one row per entry of `tables` (e.g. "before RL", "after RL") and the columns groups,
    Avg. (mean of the groups) and All tasks; the task table has one row per task and one column per entry.

    Args:
        tables: row title -> `evaluation_table(...)` result.
    """
    if not tables:
        return ""
    titles = list(tables)
    groups: dict[str, str] = {}
    tasks: dict[str, Any] = {}
    for table in tables.values():
        for g, row in table["groups"].items():
            groups.setdefault(g, f"{row['label']} ({row['num_tasks']})")
        for t, row in table["tasks"].items():
            tasks.setdefault(t, row)
    out: list[str] = []
    if groups:
        header = ["success (%)", *groups.values(), "Avg.", f"All tasks ({len(tasks)})"]
        rows = [
            [
                title,
                *(_pct(tables[title]["groups"].get(g, {}).get("success_once")) for g in groups),
                _pct(tables[title]["avg"]),
                _pct(tables[title]["all_tasks"]),
            ]
            for title in titles
        ]
        out += [*_markdown(header, rows), ""]
    header = ["task", "group", "episodes", *titles]
    rows = []
    for t, first in tasks.items():
        cells = [_pct(tables[title]["tasks"].get(t, {}).get("success_once")) for title in titles]
        rows.append([t, str(first["group"] or "-"), str(first["num_episodes"]), *cells])
    if not groups:
        rows.append(
            [
                "All tasks",
                "-",
                str(sum(int(r[2]) for r in rows)),
                *(_pct(tables[t]["all_tasks"]) for t in titles),
            ]
        )
    out += _markdown(header, rows)
    return "\n".join(out)
