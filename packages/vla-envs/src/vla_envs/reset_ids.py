"""The reset-state id codec: one integer names a (task, trial) start, `id = task_index * trials_per_task + trial`.

Every adapter, the trainer's start draws and the evaluation tables use these two functions, so the layout of an
id is defined once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["check_reset_state_ids", "reset_state_ids", "split_reset_state_ids"]


def reset_state_ids(
    task_index: np.ndarray | int, trial: np.ndarray | int, trials_per_task: int
) -> np.ndarray:
    """int64 ids of (task_index, trial) pairs (broadcast together).

    Raises:
        ValueError: `trials_per_task` < 1, a negative task index, or a trial outside [0, trials_per_task).
    """
    task_index, trial = np.asarray(task_index, dtype=np.int64), np.asarray(trial, dtype=np.int64)
    if trials_per_task < 1:
        raise ValueError(f"trials_per_task must be >= 1, got {trials_per_task}")
    if (task_index < 0).any() or (trial < 0).any() or (trial >= trials_per_task).any():
        raise ValueError(
            f"task indices must be >= 0 and trials in [0, {trials_per_task}), got task indices "
            f"{task_index.min(initial=0)}..{task_index.max(initial=0)} and trials {trial.min(initial=0)}.."
            f"{trial.max(initial=0)}"
        )
    return task_index * trials_per_task + trial


def check_reset_state_ids(
    ids: Sequence[int] | np.ndarray, *, num_envs: int, num_reset_states: int, layout: str
) -> np.ndarray:
    """The reset-state ids a batched env of `num_envs` rows is asked to reset to, checked: int64 [num_envs].

    Args:
        layout: how `num_reset_states` is made, named in the message (e.g. "= 10 tasks x num_trials_per_task=5").

    Raises:
        ValueError: not integers of shape [num_envs], or an id outside [0, num_reset_states).
    """
    ids = np.asarray(ids)
    if ids.shape != (num_envs,) or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"reset_state_ids must be integers of shape [num_envs={num_envs}], got shape "
            f"{tuple(ids.shape)} dtype {ids.dtype}"
        )
    if ids.min() < 0 or ids.max() >= num_reset_states:
        raise ValueError(
            f"reset_state_ids must lie in [0, num_reset_states={num_reset_states}) ({layout}), "
            f"got min {ids.min()} max {ids.max()}"
        )
    return ids.astype(np.int64)


def split_reset_state_ids(ids: np.ndarray | int, trials_per_task: int) -> tuple[np.ndarray, np.ndarray]:
    """(task_index, trial) int64 arrays of reset-state ids (the inverse of `reset_state_ids`)."""
    if trials_per_task < 1:
        raise ValueError(f"trials_per_task must be >= 1, got {trials_per_task}")
    ids = np.asarray(ids, dtype=np.int64)
    if (ids < 0).any():
        raise ValueError(f"reset-state ids must be >= 0, got {int(ids.min())}")
    return np.divmod(ids, trials_per_task)
