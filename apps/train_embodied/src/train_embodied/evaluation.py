"""Held-out evaluation: every episode starts from a distinct held-out (task, trial) start state.

Episode k runs task `k % num_tasks` at trial `trial_offset + k // num_tasks`; trial ids at or above
`trial_offset` are never used by demos or training (`env.eval.trial_offset`), so the numbers measure
generalisation to unseen starts. Envs run with auto_reset off, one episode per env per batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tqdm.auto import tqdm


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
    return (k % num_tasks) * trials_per_task + trial


def evaluate(
    env: Any,
    rollout: Any,
    *,
    num_envs: int,
    num_episodes: int,
    reset_ids: np.ndarray,
    max_decisions: int,
    mode: str,
    progress: bool = False,
    weight_version: int | None = None,
) -> dict[str, float]:
    """Run `num_episodes` held-out episodes with decoding `mode` ("sample" or "greedy").

    Returns:
        success_once, return, episode_len (means), num_trajectories.
    """
    success, returns, lengths = [], [], []
    bar = tqdm(total=num_episodes, desc=f"eval ({mode})", leave=False, disable=not progress, unit="ep")
    for start in range(0, num_episodes, num_envs):
        ids = reset_ids[start : start + num_envs]
        valid = len(ids)
        ids = np.concatenate([ids, np.repeat(ids[:1], num_envs - valid)])  # pad the last batch
        obs = env.reset(reset_state_ids=ids)
        done = np.zeros(num_envs, dtype=bool)
        metrics = {k: np.zeros(num_envs, dtype=np.float32) for k in ("success_once", "return", "episode_len")}
        for _ in range(max_decisions):
            out = rollout.predict(obs, mode=mode, weight_version=weight_version)
            res = env.chunk_step(out["actions"].numpy())
            rows = np.flatnonzero(np.asarray(res["final_mask"]) & ~done)
            for key in metrics:
                metrics[key][rows] = np.asarray(res["episode_metrics"][key])[rows]
            done[rows] = True
            obs = res["obs"]
            if done[:valid].all():
                break
        success += metrics["success_once"][:valid].tolist()
        returns += metrics["return"][:valid].tolist()
        lengths += metrics["episode_len"][:valid].tolist()
        bar.update(valid)
    bar.close()
    return {
        "success_once": float(np.mean(success)),
        "return": float(np.mean(returns)),
        "episode_len": float(np.mean(lengths)),
        "num_trajectories": float(len(success)),
    }
