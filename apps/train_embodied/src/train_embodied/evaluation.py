"""Held-out evaluation: every episode starts from a distinct held-out (task, trial) start state.

Episode k runs task `k % num_tasks` at trial `trial_offset + k // num_tasks`; trial ids at or above
`trial_offset` are never used by demos or training (`env.eval.trial_offset`), so the numbers measure
generalisation to unseen starts. Envs run with auto_reset off, one episode per env per batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from train_embodied.progress import progress_bar
from vla_envs import reset_state_ids, split_reset_state_ids


def held_out_reset_ids(
    num_episodes: int, *, num_tasks: int, trials_per_task: int, trial_offset: int
) -> np.ndarray:
    """reset_state_ids int64 [num_episodes] of the held-out starts (id = task * trials_per_task + trial)."""
    k = np.arange(num_episodes)
    trial = trial_offset + k // num_tasks
    if trial.max(initial=0) >= trials_per_task:
        raise ValueError(
            f"env.eval needs num_trials_per_task > {int(trial.max())} for {num_episodes} held-out episodes "
            f"from trial {trial_offset}"
        )
    return reset_state_ids(k % num_tasks, trial, trials_per_task)


def evaluate(
    env: Any,
    rollout: Any,
    *,
    num_envs: int,
    num_episodes: int,
    reset_ids: np.ndarray,
    max_decisions: int,
    mode: str,
    progress: bool | str = False,
    weight_version: int | None = None,
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Run `num_episodes` held-out episodes with decoding `mode` ("sample" or "greedy").

    Returns:
        (success_once, return, episode_len (means), num_trajectories;
         per episode: reset_state_ids int64 [num_episodes], success_once float32 [num_episodes]).
    """
    success, returns, lengths = [], [], []
    bar = progress_bar(progress, total=num_episodes, desc=f"eval ({mode})", leave=False, unit="ep")
    for start in range(0, num_episodes, num_envs):
        ids = reset_ids[start : start + num_envs]
        valid = len(ids)
        ids = np.concatenate([ids, np.repeat(ids[:1], num_envs - valid)])  # pad the last batch
        obs = env.reset(reset_state_ids=ids)
        done = np.zeros(num_envs, dtype=bool)
        metrics = {k: np.zeros(num_envs, dtype=np.float32) for k in ("success_once", "return", "episode_len")}
        for _ in range(max_decisions):
            out = rollout.predict(obs, mode=mode, weight_version=weight_version)
            res = env.chunk_step(out.actions.numpy())
            # a lost episode (dead env worker process) starts again from its held-out start: not counted yet
            rows = np.flatnonzero(np.asarray(res.final_mask) & ~np.asarray(res.lost_mask) & ~done)
            for key in metrics:
                metrics[key][rows] = np.asarray(res.episode_metrics[key])[rows]
            done[rows] = True
            obs = res.obs
            if done[:valid].all():
                break
        success += metrics["success_once"][:valid].tolist()
        returns += metrics["return"][:valid].tolist()
        lengths += metrics["episode_len"][:valid].tolist()
        bar.update(valid)
    bar.close()
    means = {
        "success_once": float(np.mean(success)),
        "return": float(np.mean(returns)),
        "episode_len": float(np.mean(lengths)),
        "num_trajectories": float(len(success)),
    }
    per_episode = {
        "reset_state_ids": np.asarray(reset_ids[:num_episodes], dtype=np.int64),
        "success_once": np.asarray(success, dtype=np.float32),
    }
    return means, per_episode


def episode_tasks(ids: np.ndarray, tasks: list[str], trials_per_task: int) -> list[str]:
    """Task name of each episode of reset-state `ids` (`vla_envs.split_reset_state_ids`)."""
    task_index, _ = split_reset_state_ids(ids, trials_per_task)
    return [tasks[int(i)] for i in task_index]


def eval_table_metrics(table: dict[str, Any], suffix: str = "") -> dict[str, float]:
    """`eval/<group>/success_once`, `eval/task/<task>/success_once` and `eval/avg/success_once` (the mean of the
    groups, the reference MetaWorld table's Avg.) of an `vla_envs.evaluation.evaluation_table` result."""
    out = {f"eval/{g}/success_once{suffix}": row["success_once"] for g, row in table["groups"].items()}
    if table["groups"]:
        out[f"eval/avg/success_once{suffix}"] = table["avg"]
    out.update(
        {f"eval/task/{t}/success_once{suffix}": row["success_once"] for t, row in table["tasks"].items()}
    )
    return out
