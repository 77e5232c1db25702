"""`benchmarks/learning_curves.py`'s per-task check of a multi-task run: each task's held-out success before ->
after RL, and which tasks fell by more than the evaluation's noise (z < -2 on the pooled two-proportion binomial
std). The summaries carry tables built by `vla_envs.evaluation_table`, as the trainer writes them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from vla_envs import evaluation_table

_spec = importlib.util.spec_from_file_location(
    "learning_curves", Path(__file__).resolve().parents[1] / "benchmarks" / "learning_curves.py"
)
learning_curves = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(learning_curves)


def _table(successes_per_task: dict[str, int], episodes: int = 20) -> dict:
    tasks = [t for t in successes_per_task for _ in range(episodes)]
    outcomes = [float(k < n) for n in successes_per_task.values() for k in range(episodes)]
    return evaluation_table(tasks, outcomes)


def _summary(before: dict[str, int], after: dict[str, int]) -> dict:
    return {
        "config": "mt",
        "seed": 3,
        "eval_tables": {"before_rl": {"sample": _table(before)}, "after_rl": {"sample": _table(after)}},
    }


def test_task_changes_flag_only_falls_beyond_the_noise() -> None:
    # 10 -> 3 of 20: pooled p 0.325, std 0.148, z -2.36; 10 -> 4: pooled 0.35, std 0.151, z -1.99
    summary = _summary({"a": 10, "b": 10, "c": 5, "d": 0}, {"a": 3, "b": 4, "c": 15, "d": 0})
    z = {task: (before, after, z) for task, before, after, z in learning_curves.task_changes(summary)}
    assert z["a"][:2] == (0.5, 0.15) and z["a"][2] == pytest.approx(-0.35 / (0.325 * 0.675 * 0.1) ** 0.5)
    assert z["b"][2] == pytest.approx(-1.99, abs=0.01)
    assert z["c"][2] > 2 and z["d"] == (0.0, 0.0, 0.0)  # a task at 0 both times has no spread: no change
    line = learning_curves.task_table({"mt": [summary]})
    assert line.startswith("mt seed 3: a 50 -> 15, b 50 -> 20, c 25 -> 75, d 0 -> 0;")
    assert line.endswith("fell beyond the noise (z < -2): a (z -2.4)")


def test_single_task_run_has_no_per_task_lines() -> None:
    assert learning_curves.task_changes({"config": "one", "success_before_rl": 0.5}) == []
    assert learning_curves.task_table({"one": [{"config": "one"}]}) == ""


def test_each_seeds_gain_comes_with_the_binomial_std_of_the_difference() -> None:
    # 10 of 50 -> 30 of 50: gain 0.40, std sqrt(0.2 * 0.8 / 50 + 0.6 * 0.4 / 50) = 0.0894
    summary = _summary({"t": 10}, {"t": 30})
    summary["eval_tables"] = {
        "before_rl": {"sample": _table({"t": 10}, 50)},
        "after_rl": {"sample": _table({"t": 30}, 50)},
    }
    summary.update(success_before_rl=0.2, success_after_rl=0.6, env_steps=100, wall_seconds=5.0)
    gain, std, n0, n1 = learning_curves.gain_and_noise(summary)
    assert (n0, n1) == (50, 50) and gain == pytest.approx(0.4) and std == pytest.approx(0.0894, abs=1e-4)
    assert "| +0.40 (0.09) | 50 / 50 |" in learning_curves.table({"mt": [summary]})
