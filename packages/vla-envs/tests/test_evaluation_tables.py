"""Per-task and per-group evaluation tables: the reference grouping of MetaWorld's 50 tasks, the arithmetic of the
reference tables (MetaWorld's Avg. is the mean of its 4 groups; LIBERO's 130 column the mean over all tasks) and
the printed table."""

from __future__ import annotations

import numpy as np
import pytest

from vla_envs.evaluation import (
    TaskGrouping,
    evaluation_table,
    format_evaluation_tables,
    task_grouping,
)
from vla_envs.metaworld import ALL_TASKS, DIFFICULTY_GROUPS, MT10_TASKS, difficulty_group

LIBERO_SIZES = {
    "libero_object": 10,
    "libero_spatial": 10,
    "libero_goal": 10,
    "libero_10": 10,
    "libero_90": 90,
}
LIBERO_LABELS = {"libero_object": "Object", "libero_spatial": "Spatial", "libero_goal": "Goal"}
LIBERO_LABELS |= {"libero_10": "Long", "libero_90": "90"}


def test_difficulty_groups_partition_the_50_tasks_as_published() -> None:
    sizes = {g: len(tasks) for g, tasks in DIFFICULTY_GROUPS.items()}
    assert sizes == {"easy": 28, "medium": 11, "hard": 6, "very_hard": 5}
    members = [t for tasks in DIFFICULTY_GROUPS.values() for t in tasks]
    assert len(members) == len(set(members)) == 50 and set(members) == set(ALL_TASKS)
    assert difficulty_group("drawer-close-v3") == "easy" and difficulty_group("stick-pull-v3") == "very_hard"
    with pytest.raises(ValueError, match="unknown metaworld task 'drawer-close-v2'"):
        difficulty_group("drawer-close-v2")


def test_mt10_grouping() -> None:
    grouping = task_grouping("metaworld", MT10_TASKS)
    assert grouping.order == ["easy", "medium", "hard"]  # no MT10 task is very hard
    assert grouping.labels == {"easy": "Easy", "medium": "Medium", "hard": "Hard"}
    assert [t for t in MT10_TASKS if grouping.groups[t] != "easy"] == [
        "push-v3",
        "pick-place-v3",
        "peg-insert-side-v3",
    ]
    assert grouping.groups["peg-insert-side-v3"] == "medium"
    assert task_grouping("maniskill", ["PutCarrotOnPlateInScene-v1"]) == TaskGrouping()  # no grouping
    with pytest.raises(ValueError, match="unknown metaworld task"):
        task_grouping("metaworld", ["no-such-task-v3"])


def test_table_per_task_per_group_and_both_averages() -> None:
    grouping = TaskGrouping(
        groups={"a": "easy", "b": "easy", "c": "hard"}, order=["easy", "hard"], labels={"easy": "Easy"}
    )
    # c first in the records: the table orders tasks by group, then by first appearance
    tasks = ["c", "a", "a", "b", "b", "b", "b", "c"]
    succ = [1, 1, 0, 1, 1, 1, 0, 0]
    table = evaluation_table(tasks, succ, grouping)
    assert list(table["tasks"]) == ["a", "b", "c"]
    assert table["tasks"]["a"] == {"group": "easy", "success_once": 0.5, "num_episodes": 2}
    assert table["tasks"]["b"] == {"group": "easy", "success_once": 0.75, "num_episodes": 4}
    assert table["tasks"]["c"] == {"group": "hard", "success_once": 0.5, "num_episodes": 2}
    # a group is the mean of its tasks (each task once), not of its episodes (5/6 here)
    assert table["groups"]["easy"] == {
        "label": "Easy",
        "success_once": 0.625,
        "num_tasks": 2,
        "num_episodes": 6,
    }
    assert table["groups"]["hard"]["label"] == "hard"  # no title given: the group name
    assert table["avg"] == pytest.approx((0.625 + 0.5) / 2)
    assert table["all_tasks"] == pytest.approx((0.5 + 0.75 + 0.5) / 3)
    assert table["num_episodes"] == 8 and table["balanced"] is False
    # no grouping: tasks only, Avg. is the mean over tasks
    plain = evaluation_table(["x", "y", "x"], np.array([1.0, 0.0, 0.0]))
    assert plain["groups"] == {} and plain["avg"] == plain["all_tasks"] == pytest.approx(0.25)


def test_metaworld_reference_avg_is_the_mean_of_the_four_groups() -> None:
    """The reference MetaWorld table (pi0 + PPO row): Easy 92.1, Medium 74.6, Hard 61.7, Very Hard 84.0, Avg. 78.1
    (the mean over the 50 tasks would be 83.8)."""
    rates = {"easy": 0.921, "medium": 0.746, "hard": 0.617, "very_hard": 0.840}
    tasks = list(ALL_TASKS)
    table = evaluation_table(
        tasks, [rates[difficulty_group(t)] for t in tasks], task_grouping("metaworld", tasks)
    )
    assert [g["label"] for g in table["groups"].values()] == ["Easy", "Medium", "Hard", "Very Hard"]
    assert [g["num_tasks"] for g in table["groups"].values()] == [28, 11, 6, 5]
    assert round(100 * table["avg"], 1) == 78.1
    assert round(100 * table["all_tasks"], 1) == 83.8


def test_libero_reference_130_column_is_the_mean_over_all_tasks() -> None:
    """The reference LIBERO table (base row): Object 50.20, Spatial 51.61, Goal 49.40, Long 11.90, 90 42.67,
    130 42.09 (the mean of the 5 suites would be 41.16). Every task x trial pair once: 50 trials per task."""
    rates = {"libero_object": 0.5020, "libero_spatial": 0.5161, "libero_goal": 0.4940}
    rates |= {"libero_10": 0.1190, "libero_90": 0.4267}
    groups = {f"{suite}_task{i}": suite for suite, n in LIBERO_SIZES.items() for i in range(n)}
    grouping = TaskGrouping(groups, list(LIBERO_SIZES), LIBERO_LABELS)
    tasks = [t for t in groups for _ in range(50)]
    table = evaluation_table(tasks, [rates[groups[t]] for t in tasks], grouping)
    assert table["balanced"] and table["num_episodes"] == 6500
    assert {g: row["num_episodes"] for g, row in table["groups"].items()} == {
        s: 50 * n for s, n in LIBERO_SIZES.items()
    }
    assert round(100 * table["all_tasks"], 2) == 42.09
    assert round(100 * table["avg"], 2) == 41.16


def test_table_errors() -> None:
    with pytest.raises(ValueError, match="got 2 task names for 1 episode successes"):
        evaluation_table(["a", "b"], [1.0])
    with pytest.raises(ValueError, match="at least one episode"):
        evaluation_table([], [])
    with pytest.raises(ValueError, match=r"task\(s\) \['b'\] have no group"):
        evaluation_table(["a", "b"], [1, 0], TaskGrouping({"a": "easy"}, ["easy"], {}))


def test_printed_tables() -> None:
    grouping = task_grouping("metaworld", MT10_TASKS)
    tasks = [MT10_TASKS[k % 10] for k in range(20)]
    before = evaluation_table(tasks, [k % 2 for k in range(20)], grouping)
    after = evaluation_table(tasks, [1] * 20, grouping)
    text = format_evaluation_tables({"before RL": before, "after RL": after})
    lines = text.splitlines()
    header = [c.strip() for c in lines[0].split("|")[1:-1]]
    assert header == ["success (%)", "Easy (7)", "Medium (1)", "Hard (2)", "Avg.", "All tasks (10)"]
    after_row = [c.strip() for c in lines[3].split("|")[1:-1]]
    assert after_row == ["after RL", "100.0", "100.0", "100.0", "100.0", "100.0"]
    reach = next(line for line in lines if line.startswith("| reach-v3 "))
    # reach-v3 runs episodes 0 and 10: both even, both failed before
    assert [c.strip() for c in reach.split("|")[1:-1]] == ["reach-v3", "easy", "2", "0.0", "100.0"]
    assert format_evaluation_tables({}) == ""
    plain = format_evaluation_tables({"eval": evaluation_table(["x", "y"], [1, 0])})
    assert "success (%)" not in plain and plain.splitlines()[-1].split("|")[1].strip() == "All tasks"
