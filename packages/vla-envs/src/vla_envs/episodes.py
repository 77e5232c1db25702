"""`EpisodeTracker`: the episode bookkeeping every batched env shares (see `vla_envs.base` for the semantics).

Per row it keeps the running return, length and success of the episode in flight and reports them as
`episode_metrics` when the episode ends; it applies same-step autoreset to the observations (an ended row's
final observation, then either its next episode's first observation or, with `auto_reset=False`, the final one
again on every call until `reset()`: the row is held).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vla_envs.base import Obs, empty_episode_metrics, merge_obs_rows

#: `merge(dst, src, mask)`: a copy of the observation `dst` with the rows where `mask` (bool [B]) is True taken
#: from `src` (numpy observations: `merge_obs_rows`; an env with torch observations passes its own).
MergeRows = Callable[[Obs, Obs, np.ndarray], Obs]


class EpisodeTracker:
    """Episode counters, held rows and the last observation of a batch of `num_envs` envs.

    Per call of `chunk_step`: `add` the chunk's rewards, steps and successes, `end` the rows whose episode ended
    (their metrics), then either `next_obs` (an env that resets rows itself) or `hold` and set `obs` (an env
    whose workers apply the autoreset).

    Args:
        num_envs: B.
        auto_reset: Whether an ended row starts its next episode in the same call (else it is held).
        merge: Row merge of two observation dicts (see `MergeRows`).
    """

    def __init__(self, num_envs: int, *, auto_reset: bool, merge: MergeRows = merge_obs_rows) -> None:
        self.num_envs = num_envs
        self.auto_reset = auto_reset
        self.merge = merge
        self._running = empty_episode_metrics(num_envs)
        self.held = np.zeros(num_envs, dtype=bool)
        #: The observation last returned (None before the first `start`).
        self.obs: Obs | None = None

    # ------------------------------------------------------------------ episode counters
    def start(self, obs: Obs) -> None:
        """Every row starts a new episode at `obs` (a `reset()`): counters zero, no row held."""
        self._running = empty_episode_metrics(self.num_envs)
        self.held[:] = False
        self.obs = obs

    def last_obs(self) -> Obs:
        """The observation last returned; raises if the env was never reset."""
        if self.obs is None:
            raise RuntimeError("call reset() before step()/chunk_step()")
        return self.obs

    @property
    def episode_len(self) -> np.ndarray:
        """float32 [B]: steps taken so far in each row's episode in flight (a view; copy to keep)."""
        return self._running["episode_len"]

    def succeeded(self) -> np.ndarray:
        """bool [B]: whether each row's episode in flight has succeeded at some step so far."""
        return self._running["success_once"] > 0

    def add(self, rewards: np.ndarray, steps: np.ndarray, success: np.ndarray) -> None:
        """Count one call: rewards float32 [B, C], steps taken int [B], success bool [B, C]."""
        acc = self._running
        acc["return"] += np.asarray(rewards, dtype=np.float32).sum(axis=1)
        acc["episode_len"] += np.asarray(steps)
        acc["success_once"] = np.maximum(
            acc["success_once"], np.asarray(success, dtype=bool).any(axis=1).astype(np.float32)
        )

    def end(self, ended: np.ndarray) -> dict[str, np.ndarray]:
        """`episode_metrics` of the episodes that ended (`ended` bool [B]; 0 elsewhere): `return`,
        `episode_len`, `success_once` and `reward` (the mean step reward). Their counters restart at 0."""
        acc = self._running
        metrics = empty_episode_metrics(self.num_envs)
        for key in ("return", "episode_len", "success_once"):
            metrics[key] = np.where(ended, acc[key], 0.0).astype(np.float32)
        mean = acc["return"] / np.maximum(acc["episode_len"], 1)
        metrics["reward"] = np.where(ended, mean, 0.0).astype(np.float32)
        for value in acc.values():
            value[ended] = 0.0
        return metrics

    # ------------------------------------------------------------------ autoreset
    def hold(self, rows: np.ndarray) -> None:
        """With `auto_reset=False`, hold `rows` (bool [B]): their actions are ignored until `reset()`."""
        if not self.auto_reset:
            self.held |= np.asarray(rows, dtype=bool)

    def next_obs(
        self, obs: Obs, final_obs: Obs, ended: np.ndarray, reset_rows: Callable[[np.ndarray], Obs]
    ) -> tuple[Obs, Obs]:
        """Same-step autoreset of one call; returns `(obs, final_obs)` of its `StepResult`.

        Args:
            obs: Every row's observation after the call's last step (rows held before the call: anything).
            final_obs: Rows in `ended` hold their episode's last observation (others: anything).
            ended: bool [B], the episodes that ended in this call.
            reset_rows: `reset_rows(row indices)` starts new episodes on those rows and returns the whole
                batch's observation (only the reset rows are read); called with `auto_reset` only.

        `final_obs` comes back with `obs` in the rows that did not end. Ended rows show their next episode's
        first observation (`auto_reset`) or are held showing their final one; rows held before keep theirs.
        """
        ended = np.asarray(ended, dtype=bool)
        was_held = self.held.copy()
        final_obs = self.merge(obs, final_obs, ended)
        if ended.any():
            if self.auto_reset:
                obs = self.merge(obs, reset_rows(np.flatnonzero(ended)), ended)
            else:
                self.hold(ended)
                obs = self.merge(obs, final_obs, ended)
        if was_held.any():
            obs = self.merge(obs, self.last_obs(), was_held)
        self.obs = obs
        return obs, final_obs
