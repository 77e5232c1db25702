"""`VectorEnv`: a BatchedEnv over per-env CPU simulators run in subprocess workers (or in-process).

Rows are split into consecutive slices of `envs_per_worker`; every call sends each worker its slice, so the
workers step in parallel. A worker that dies or hangs is detected (EOF, dead pipe or `worker_timeout_s`),
restarted and its envs reset; its rows come back as a clean episode boundary (`truncated[:, 0] = True`,
`final_mask = True`, `lost = True`, final obs = the last obs seen before the crash). A worker that dies at any
moment (in a step, in a reset, or while its replacement is still building its simulators) is replaced again by
the `vla_envs.worker_pool.WorkerPool`, with a backoff between attempts; `MAX_CONSECUTIVE_FAILURES` failures in a
row for the same worker raise `SimulatorUnavailable` naming the simulator, the rows and the last error.
`fault_stats()` counts restarts,
episodes lost (the episodes in flight on a crashed worker, each ended as truncated) and seconds spent restarting.
With auto_reset=False the restarted rows start again from their last `reset()` ids, and rows whose episode had
already ended stay ended and are not reported again.
A Python exception inside a worker (`WorkerError`, not restarted) is raised after every other worker's reply
has been read, so the pipes stay in step; call `reset()` before stepping again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from vla_envs.base import BatchedEnv, Obs, StepResult, check_actions, concat_obs, select_obs_rows
from vla_envs.config import EnvConfig
from vla_envs.episodes import EpisodeTracker
from vla_envs.reset_ids import check_reset_state_ids, reset_state_ids, split_reset_state_ids
from vla_envs.sim import SimSpec
from vla_envs.video import EpisodeVideoRecorder
from vla_envs.worker_pool import WorkerPool
from vla_envs.workers import WorkerDied, WorkerError


class VectorEnv(BatchedEnv):
    """Batched env over `SimEnv`s (see module docstring for crash semantics, `vla_envs.base` for autoreset).

    Args:
        cfg: The env config.
        spec: Adapter description (builder reference, action space, tasks).
    """

    def __init__(self, cfg: EnvConfig, spec: SimSpec) -> None:
        self.cfg = cfg
        self.spec = spec
        self.num_envs = cfg.num_envs
        self.action_dim = spec.action_dim
        self.action_low = np.asarray(spec.action_low, dtype=np.float32)
        self.action_high = np.asarray(spec.action_high, dtype=np.float32)
        self.tasks = list(spec.tasks)
        self.num_tasks = len(self.tasks)
        self.num_reset_states = self.num_tasks * cfg.num_trials_per_task
        self.lost_episodes = 0  # episodes in flight on a worker that crashed (ended as truncated)
        self._rng = np.random.default_rng(cfg.seed)
        # task index each row currently runs: the tasks go round the whole batch of all ranks / stages
        self._row_task = cfg.row_tasks(self.num_tasks)
        # each row's last reset id: a restarted worker's rows start again from it when auto_reset=False
        self._reset_ids = reset_state_ids(self._row_task, 0, cfg.num_trials_per_task)
        # episode counters and held rows; the workers apply the autoreset to the observations
        self.episodes = EpisodeTracker(self.num_envs, auto_reset=cfg.auto_reset)
        self._closed = False
        if cfg.envs_per_worker == 0:
            slices = [list(range(self.num_envs))]
        else:
            epw = cfg.envs_per_worker
            slices = [list(range(s, min(s + epw, self.num_envs))) for s in range(0, self.num_envs, epw)]
        self._slices = slices
        self.pool = WorkerPool(cfg, spec, slices, self._describe)
        self._offloaded = False  # offload(): the workers are stopped until onload() / reset()
        self._needs_reset = False  # onload(): the rebuilt simulators start no episode until reset()
        try:
            self.pool.start()
        except BaseException:
            self.close()
            raise
        self.video = (
            EpisodeVideoRecorder(cfg.video, self.num_envs, tag=str(cfg.extra.get("video_tag", "episode")))
            if cfg.video.save_video
            else None
        )

    def set_video_tag(self, tag: str) -> None:
        """Name prefix of the video files written from now on (`{tag}_env{row}_ep{n}.mp4`), e.g. the run's env rank
        and iteration; episodes in progress are written under the new tag. No-op without `save_video`."""
        if self.video is not None:
            self.video.tag = str(tag)

    @property
    def workers(self) -> list[Any]:
        """The simulator workers, one per slice of rows (empty while offloaded)."""
        return self.pool.workers

    @property  # type: ignore[override]
    def worker_restarts(self) -> int:
        """Workers restarted so far (after a crash or hang)."""
        return self.pool.restarts

    @property
    def restart_time_s(self) -> float:
        """Seconds spent restarting workers so far."""
        return self.pool.restart_time_s

    # ------------------------------------------------------------------ offload (between rollout phases)
    @property
    def offloaded(self) -> bool:
        """Whether the simulators are stopped (`offload()`) and not yet rebuilt."""
        return self._offloaded

    def simulator_pids(self) -> list[int]:
        """Process ids of the simulator workers (empty while offloaded; this process's id for in-process ones)."""
        return self.pool.pids()

    def abort(self) -> None:
        """Kill every simulator worker at once, from another thread while a call on this env may be stuck waiting
        for one (a stopped process): that call then fails instead of restarting them; the env is unusable after."""
        self.pool.abort()

    def offload(self) -> None:
        """Stop every simulator worker, so that their processes and memory (renderers, physics, GPU contexts) go
        away until the next phase; a no-op when already offloaded or closed.

        What the batch keeps here stays: the start-state generator, each row's task and last reset ids, the episode
        counters and the fault counters. Episodes in flight end with their simulators: the next call must be
        `reset()` (which rebuilds the simulators first); `chunk_step` before it raises. Every reset start state is a
        function of its reset_state_id and the config seed, so a rebuild followed by the same `reset()` gives the
        same episodes as simulators that stayed resident.
        """
        if self._offloaded or self._closed:
            return
        self.pool.stop()
        self._offloaded = True

    def onload(self) -> None:
        """Rebuild the simulator workers stopped by `offload()` (no-op when resident); `reset()` comes next."""
        if not self._offloaded or self._closed:
            return
        try:
            self.pool.start()
        except BaseException:
            self.close()
            raise
        self._offloaded = False
        self._needs_reset = True

    # ------------------------------------------------------------------ reset-state ids
    def describe_reset_state(self, reset_state_id: int) -> tuple[str, int]:
        """(task name, trial index) of a reset_state_id."""
        self._check_ids(np.full(self.num_envs, int(reset_state_id)))
        task_index, trial = split_reset_state_ids(int(reset_state_id), self.cfg.num_trials_per_task)
        return self.tasks[int(task_index)], int(trial)

    def _draw_ids(self, rows: np.ndarray) -> np.ndarray:
        trials = self._rng.integers(0, self.cfg.num_trials_per_task, size=len(rows))
        return reset_state_ids(self._row_task[rows], trials, self.cfg.num_trials_per_task)

    def _check_ids(self, reset_state_ids: Sequence[int] | np.ndarray) -> np.ndarray:
        return check_reset_state_ids(
            reset_state_ids,
            num_envs=self.num_envs,
            num_reset_states=self.num_reset_states,
            layout=f"= {self.num_tasks} tasks x num_trials_per_task={self.cfg.num_trials_per_task}",
        )

    # ------------------------------------------------------------------ API
    def reset(
        self, seed: int | None = None, reset_state_ids: Sequence[int] | np.ndarray | None = None
    ) -> Obs:
        """Reset all rows (see BatchedEnv.reset). Without ids each row keeps its task and draws a trial;
        with `use_fixed_reset_state_ids` the rows of a group of `group_size` share the group's first draw."""
        self.onload()  # offloaded: rebuild the simulators first
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if reset_state_ids is None:
            ids = self._draw_ids(np.arange(self.num_envs))
            if self.cfg.use_fixed_reset_state_ids:
                gs = self.cfg.group_size
                ids = np.repeat(ids[::gs], gs)
        else:
            ids = self._check_ids(reset_state_ids)
        self._row_task = ids // self.cfg.num_trials_per_task
        self._reset_ids = ids.copy()
        parts = []
        for wid, rows in enumerate(self._slices):
            worker_ids = [int(i) for i in ids[rows]]
            try:
                self.workers[wid].send("reset", worker_ids)
                parts.append(self.workers[wid].recv(self.cfg.worker_timeout_s))
            except WorkerDied as exc:  # episodes in flight are discarded by a reset anyway: none is lost
                parts.append(self.pool.revive(wid, worker_ids, None, str(exc)))
        obs = concat_obs(parts)
        self._needs_reset = False
        self.episodes.start(obs)
        if self.video is not None:
            self.video.start(obs["images"])
        return obs

    def chunk_step(self, actions: np.ndarray) -> StepResult:
        """Step through actions [B, C, A] (see BatchedEnv.chunk_step)."""
        self.episodes.last_obs()  # raises before the first reset()
        if self._offloaded or self._needs_reset:
            raise RuntimeError(
                "VectorEnv.chunk_step after offload(): the episodes in flight ended with the stopped simulators; "
                "call reset() first"
            )
        acts = check_actions(
            actions,
            num_envs=self.num_envs,
            action_dim=self.action_dim,
            low=self.action_low,
            high=self.action_high,
            out_of_range=self.cfg.action_out_of_range,
            tolerance=self.cfg.action_tolerance,
        )
        c = acts.shape[1]
        autoreset_ids = self._draw_ids(np.arange(self.num_envs))
        dead: list[tuple[int, str]] = []
        for wid, rows in enumerate(self._slices):
            try:
                record = tuple(
                    k for k, r in enumerate(rows) if self.video is not None and r in self.video.frames
                )
                self.workers[wid].send("chunk", (acts[rows], [int(i) for i in autoreset_ids[rows]], record))
            except WorkerDied as exc:
                dead.append((wid, str(exc)))
        parts: list[dict[str, Any] | None] = [None] * len(self._slices)
        dead_ids = {d[0] for d in dead}
        error: WorkerError | None = None
        for wid in range(len(self._slices)):
            if wid in dead_ids:
                continue
            try:
                parts[wid] = self.workers[wid].recv(self.cfg.worker_timeout_s)
            except WorkerDied as exc:
                dead.append((wid, str(exc)))
            except WorkerError as exc:  # keep reading the others' replies, or they answer the next command
                error = error or exc
        if error is not None:
            raise error
        for wid, reason in dead:
            parts[wid] = self._crash_boundary(wid, reason, c)
        return self._assemble([p for p in parts if p is not None], c)

    def fault_stats(self) -> dict[str, float]:
        """Worker restarts, episodes lost to crashes (ended as truncated) and seconds spent restarting, so far."""
        return {
            "worker_restarts": float(self.worker_restarts),
            "lost_episodes": float(self.lost_episodes),
            "restart_time_s": float(self.restart_time_s),
        }

    def close(self) -> None:
        """Write pending videos and stop every worker (idempotent)."""
        if self._closed:
            return
        self._closed = True
        video = getattr(self, "video", None)
        if video is not None:
            video.close()
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()

    # ------------------------------------------------------------------ internals
    def _assemble(self, parts: list[dict[str, Any]], c: int) -> StepResult:
        obs = concat_obs([p["obs"] for p in parts])
        final_obs = concat_obs([p["final_obs"] for p in parts])
        rewards = np.concatenate([p["rewards"] for p in parts]).astype(np.float32)
        terminated = np.concatenate([p["terminated"] for p in parts])
        truncated = np.concatenate([p["truncated"] for p in parts])
        success = np.concatenate([p["success"] for p in parts])
        ended = np.concatenate([p["ended"] for p in parts])
        steps = np.concatenate([p["steps_taken"] for p in parts])
        crashed = np.concatenate([p.get("crashed", np.zeros(len(p["ended"]), dtype=bool)) for p in parts])
        episodes = self.episodes
        was_held, prev_success = episodes.held.copy(), episodes.succeeded()
        start_len = episodes.episode_len.copy()
        episodes.add(rewards, steps, success)
        metrics = episodes.end(ended)
        if self.video is not None:
            self._record(parts, final_obs, obs, rewards, success, ended, was_held, prev_success, start_len)
        episodes.hold(ended & ~crashed)  # a restarted worker's rows start fresh episodes
        episodes.obs = obs
        return StepResult(
            obs=obs,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            final_mask=ended,
            episode_metrics=metrics,
            infos={"success": success, **self.fault_stats()},
            lost=ended & crashed,
        )

    def _record(
        self,
        parts: list[dict[str, Any]],
        final_obs: Obs,
        obs: Obs,
        rewards: np.ndarray,
        success: np.ndarray,
        ended: np.ndarray,
        was_held: np.ndarray,
        prev_success: np.ndarray,
        start_len: np.ndarray,
    ) -> None:
        """Add every executed step's frame of the recorded rows; write the episodes that ended."""
        assert self.video is not None
        frames_by_row: dict[int, list[np.ndarray]] = {}
        for rows, part in zip(self._slices, parts, strict=True):
            for k, images in part.get("frames", {}).items():
                frames_by_row[rows[k]] = images
        for r in self.video.rows:
            if was_held[r]:
                continue
            images = frames_by_row.get(r)
            if images is None:  # a restarted worker: only the last observation is known
                images = [final_obs["images"][r] if ended[r] else obs["images"][r]]
            for k, image in enumerate(images):
                self.video.add(
                    r, image, step=int(start_len[r]) + k + 1, reward=float(rewards[r, min(k, rewards.shape[1] - 1)]),
                    success=bool(prev_success[r] or success[r, : k + 1].any()),
                )  # fmt: skip
            if ended[r]:
                self.video.finish(r, obs["images"][r] if self.cfg.auto_reset else None)

    def _describe(self, wid: int) -> str:
        tasks = sorted({self.tasks[int(t)] for t in self._row_task[self._slices[wid]]})
        return f"simulator {self.cfg.env_type!r} (tasks {', '.join(tasks)}) of env rows {self._slices[wid]}"

    def _crash_boundary(self, wid: int, reason: str, c: int) -> dict[str, Any]:
        """Restart worker `wid`, reset its rows, and report their episodes as truncated at chunk position 0.

        With auto_reset=False (evaluation) the rows restart from the ids of the last `reset()`, so every
        (task, trial) is still covered, and rows whose episode had already ended stay ended (held, showing
        their final obs) and are not reported again.
        """
        rows = np.asarray(self._slices[wid])
        n = len(rows)
        held = self.episodes.held[rows]
        ids = self._draw_ids(rows) if self.cfg.auto_reset else self._reset_ids[rows]
        last = select_obs_rows(self.episodes.last_obs(), rows)
        held_obs = {
            int(k): {key: None if v is None else v[k] for key, v in last.items()}
            for k in np.flatnonzero(held)
        }
        obs = self.pool.revive(wid, [int(i) for i in ids], held_obs, reason)
        self.lost_episodes += int((~held).sum())
        truncated = np.zeros((n, c), dtype=bool)
        truncated[:, 0] = ~held
        return {
            "obs": obs,
            "final_obs": last,
            "rewards": np.zeros((n, c), dtype=np.float32),
            "terminated": np.zeros((n, c), dtype=bool),
            "truncated": truncated,
            "success": np.zeros((n, c), dtype=bool),
            "ended": ~held,
            "steps_taken": np.zeros(n, dtype=np.int64),
            "crashed": np.ones(n, dtype=bool),
        }
