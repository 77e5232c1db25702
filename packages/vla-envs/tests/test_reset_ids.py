"""The reset-state id codec is one definition: ids round-trip and out-of-range parts are refused."""

from __future__ import annotations

import numpy as np
import pytest

from vla_envs import reset_state_ids, split_reset_state_ids


def test_ids_round_trip_and_follow_task_major_order() -> None:
    tasks, trials = np.meshgrid(np.arange(3), np.arange(5), indexing="ij")
    ids = reset_state_ids(tasks, trials, 5)
    assert ids.ravel().tolist() == list(range(15))  # task-major: every trial of task 0 first
    back_tasks, back_trials = split_reset_state_ids(ids, 5)
    assert np.array_equal(back_tasks, tasks) and np.array_equal(back_trials, trials)


@pytest.mark.parametrize(
    ("task", "trial", "per_task", "match"),
    [(0, 5, 5, r"trials in \[0, 5\)"), (-1, 0, 5, "task indices must be >= 0"), (0, 0, 0, "trials_per_task")],
)
def test_out_of_range_parts_are_refused(task: int, trial: int, per_task: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        reset_state_ids(task, trial, per_task)


def test_negative_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        split_reset_state_ids(np.array([3, -1]), 5)
