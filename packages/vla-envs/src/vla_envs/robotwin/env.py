"""`RoboTwinEnv`: the BatchedEnv contract over RoboTwin 2.0's own vector env (`robotwin.envs.vector_env`).

RoboTwin's `VectorEnv(task_config, n_envs, env_seeds, instruction_type)` runs in a child process started with
the interpreter of RoboTwin's environment (`runtime.RoboTwinProcess`): `reset(env_idx, env_seeds)`, `get_obs()`
-> one dict per env (`full_image`, `left_wrist_image`, `right_wrist_image`, `state` [14], `instruction`),
`step(actions [n, horizon, 14])` -> (obs list, rewards, terminated, truncated, infos), `close()`.

Chunk execution (`extra['chunk_execution']`): "chunk" (default, as the reference framework) calls `step` once
with the whole chunk: RoboTwin time-parameterises the C actions as one trajectory, checks success at every
physics step and renders once; rewards, `terminated` and `truncated` of the chunk are reported at its last
position (the other positions are 0/False) and the episode length grows by C. "position" calls `step` once per
chunk position (horizon 1): per-position flags, but the arm stops at every action (about 2.8x the simulated
time per chunk) and every position renders. Only the rows whose episode is running are simulated (RoboTwin's sub-envs are independent):
a row whose episode ended in the chunk is not stepped again and is reset at the end of the call, which gives
exactly the package's same-step autoreset semantics. With `auto_reset=False` an ended row is held (not
simulated, obs = its final obs) until `reset()`.

Reset states: the env has one task; `reset_state_id` t in [0, num_trials_per_task) is RoboTwin seed
`seeds[t]` of the reference's verified seed list (`extra['seeds_path']`) or else `seed_base + t` (RoboTwin
itself moves on to the next seed when a seed gives an unstable scene). After each reset the instruction is
rebuilt from the scene actually set up (RoboTwin builds it from the constructor's seed).
Termination = RoboTwin's success (sticky in RoboTwin); truncation = RoboTwin's `step_lim` or
`max_episode_steps`.

A RoboTwin process that dies (killed by the OS under memory pressure, crashed) or stops answering within
`call_timeout_s` is replaced, as `VectorEnv` replaces a simulator worker: a new process is built with the same
seeds, the rows whose episode was in flight are reset and reported as lost (truncated at chunk position 0,
`final_mask` and `lost` set, final obs = the last obs seen before the crash; the chunk's other outcomes are
dropped), with `auto_reset=False` from the ids of the last `reset()` (rows already ended stay ended). A reset that
finds the process dead builds a new one and resets again. `MAX_CONSECUTIVE_FAILURES` failures in a row raise
`SimulatorUnavailable`. `fault_stats()` counts the restarts, lost episodes and seconds spent restarting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from vla_envs.base import BatchedEnv, Obs, StepResult, check_actions, merge_obs_rows
from vla_envs.config import EnvConfig
from vla_envs.episodes import EpisodeTracker
from vla_envs.reset_ids import check_reset_state_ids
from vla_envs.robotwin.observations import convert_obs
from vla_envs.robotwin.options import ACTION_DIM, RoboTwinOptions, resolve_options
from vla_envs.robotwin.runtime import RoboTwinProcess, RoboTwinProcessDied, RoboTwinUnavailableError
from vla_envs.video import EpisodeVideoRecorder
from vla_envs.worker_pool import MAX_CONSECUTIVE_FAILURES, backoff_s
from vla_envs.workers import SimulatorUnavailable

logger = logging.getLogger(__name__)

# RoboTwin's 14-D joint action (and state) layout: left arm joints [6], left gripper [1], right arm joints [6],
# right gripper [1]. Joints are absolute positions in radians, grippers in [0, 1].
_ARM_LOW, _ARM_HIGH = [-2 * np.pi] * 6 + [0.0], [2 * np.pi] * 6 + [1.0]
ACTION_LOW = np.array(_ARM_LOW * 2, dtype=np.float32)
ACTION_HIGH = np.array(_ARM_HIGH * 2, dtype=np.float32)


def _flags(values: Any, n: int) -> np.ndarray:
    return np.asarray(values, dtype=bool).reshape(n)


def _scatter_rows(part: Obs, rows: np.ndarray, like: Obs) -> Obs:
    """`like` with its `rows` replaced by the rows of `part` (an observation of len(rows) rows, in that order)."""
    out: Obs = {}
    for key, value in like.items():
        if value is None:
            out[key] = None
        elif isinstance(value, np.ndarray):
            full = value.copy()
            full[rows] = part[key]
            out[key] = full
        else:
            full_list = list(value)
            for k, r in enumerate(rows.tolist()):
                full_list[r] = part[key][k]
            out[key] = full_list
    return out


class RoboTwinEnv(BatchedEnv):
    """B RoboTwin envs of one task (see the module docstring).

    Args:
        cfg: The env config.
        opts: Resolved RoboTwin options.
    """

    def __init__(self, cfg: EnvConfig, opts: RoboTwinOptions) -> None:
        self.cfg = cfg
        self.opts = opts
        self.num_envs = cfg.num_envs
        self.action_dim = ACTION_DIM
        self.action_low = ACTION_LOW.copy()
        self.action_high = ACTION_HIGH.copy()
        self.tasks = [opts.task]
        self.num_tasks = 1
        self.num_reset_states = cfg.num_trials_per_task
        self._rng = np.random.default_rng(cfg.seed)
        self._closed = False
        self.worker_restarts = 0  # RoboTwin processes replaced after a crash or hang
        self.lost_episodes = 0  # episodes in flight on a process that died (ended as truncated)
        self.restart_time_s = 0.0
        ids = self._draw_ids(self.num_envs)
        # each row's last reset id: a replaced process's rows start again from it (auto_reset=False)
        self._reset_ids = ids.copy()
        # the seeds RoboTwin's VectorEnv is built with (every reset sets its own); `onload()` builds with them again
        self._build_seeds = [self.robotwin_seed(int(i)) for i in ids]
        self.venv: RoboTwinProcess | None = RoboTwinProcess(
            opts, n_envs=self.num_envs, env_seeds=self._build_seeds
        )
        self._needs_reset = False  # onload(): the rebuilt envs start no episode until reset()
        b = self.num_envs
        self._steps = np.zeros(b, dtype=np.int64)  # RoboTwin steps since each row's reset (the time limit)
        self._prev_success = np.zeros(b, dtype=bool)
        self.episodes = EpisodeTracker(b, auto_reset=cfg.auto_reset)
        self.video = (
            EpisodeVideoRecorder(cfg.video, b, tag=str(cfg.extra.get("video_tag", "episode")))
            if cfg.video.save_video
            else None
        )

    # ------------------------------------------------------------------ reset-state ids
    def robotwin_seed(self, reset_state_id: int) -> int:
        """RoboTwin seed of a reset_state_id (from the seed list of `seeds_path`, else `seed_base + id`)."""
        if self.opts.seeds is not None:
            return int(self.opts.seeds[int(reset_state_id)])
        return self.opts.seed_base + int(reset_state_id)

    def describe_reset_state(self, reset_state_id: int) -> tuple[str, int]:
        """(task name, trial index) of a reset_state_id."""
        self._check_ids(np.full(self.num_envs, int(reset_state_id)))
        return self.opts.task, int(reset_state_id)

    def _draw_ids(self, n: int) -> np.ndarray:
        return self._rng.integers(0, self.cfg.num_trials_per_task, size=n)

    def _check_ids(self, reset_state_ids: Sequence[int] | np.ndarray) -> np.ndarray:
        return check_reset_state_ids(
            reset_state_ids,
            num_envs=self.num_envs,
            num_reset_states=self.num_reset_states,
            layout="= num_trials_per_task",
        )

    # ------------------------------------------------------------------ offload (between rollout phases)
    @property
    def offloaded(self) -> bool:
        """Whether RoboTwin's process is stopped (`offload()`) and not yet rebuilt."""
        return self.venv is None and not self._closed

    def simulator_pids(self) -> list[int]:
        """Process id of RoboTwin's child process (empty while offloaded)."""
        return [] if self.venv is None or self.venv.closed else [int(self.venv.pid)]

    def offload(self) -> None:
        """Close RoboTwin's envs and end its process (its renderer and GPU memory go with it); a no-op when already
        offloaded or closed. The start-state generator and episode counters stay here; episodes in flight end, so
        the next call must be `reset()` (which rebuilds first): every start is RoboTwin's seed of its
        reset_state_id, so a rebuild followed by the same `reset()` gives the same episodes."""
        if self.venv is None or self._closed:
            return
        self.venv.close()
        self.venv = None

    def onload(self) -> None:
        """Start RoboTwin's process again after `offload()` (no-op when resident); `reset()` comes next."""
        if self.venv is not None or self._closed:
            return
        self.venv = RoboTwinProcess(self.opts, n_envs=self.num_envs, env_seeds=self._build_seeds)
        self._needs_reset = True

    def _reset_rows(self, rows: np.ndarray, ids: np.ndarray) -> Obs:
        assert self.venv is not None, "onload() first"
        raw = self.venv.reset([int(r) for r in rows], [self.robotwin_seed(int(i)) for i in ids])
        self._steps[rows] = 0
        self._prev_success[rows] = False
        return convert_obs(raw, self.opts)

    # ------------------------------------------------------------------ API
    def reset(
        self, seed: int | None = None, reset_state_ids: Sequence[int] | np.ndarray | None = None
    ) -> Obs:
        """Reset all rows (see BatchedEnv.reset); `use_fixed_reset_state_ids` shares draws within groups."""
        self.onload()  # offloaded: rebuild first
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if reset_state_ids is None:
            ids = self._draw_ids(self.num_envs)
            if self.cfg.use_fixed_reset_state_ids:
                gs = self.cfg.group_size
                ids = np.repeat(ids[::gs], gs)
        else:
            ids = self._check_ids(reset_state_ids)
        self._reset_ids = ids.copy()
        try:
            obs = self._reset_rows(np.arange(self.num_envs), ids)
        except RoboTwinProcessDied as exc:  # no episode was in flight: none is lost
            obs = self._replace_process(ids, str(exc))
        self._needs_reset = False
        self.episodes.start(obs)
        if self.video is not None:
            self.video.start(obs["images"])
        return obs

    def chunk_step(self, actions: np.ndarray) -> StepResult:
        """Step through actions [B, C, 14] (see BatchedEnv.chunk_step)."""
        episodes = self.episodes
        obs = final_obs = episodes.last_obs()
        venv = self.venv
        if venv is None or self._needs_reset:
            raise RuntimeError(
                "RoboTwinEnv.chunk_step after offload() or expert_paths(): the episodes in flight ended; call "
                "reset() first"
            )
        acts = check_actions(
            actions, num_envs=self.num_envs, action_dim=self.action_dim, low=self.action_low,
            high=self.action_high, out_of_range=self.cfg.action_out_of_range, tolerance=self.cfg.action_tolerance,
        )  # fmt: skip
        b, c = acts.shape[:2]
        rewards = np.zeros((b, c), dtype=np.float32)
        terminated = np.zeros((b, c), dtype=bool)
        truncated = np.zeros((b, c), dtype=bool)
        success = np.zeros((b, c), dtype=bool)
        ended = np.zeros(b, dtype=bool)
        steps_taken = np.zeros(b, dtype=np.int64)
        start_len = episodes.episode_len.copy()
        # (first, end) chunk positions executed by one RoboTwin step; outputs land at position end - 1
        segments = [(0, c)] if self.opts.chunk_execution == "chunk" else [(t, t + 1) for t in range(c)]
        for first, end in segments:
            t, n = end - 1, end - first
            live = ~episodes.held & ~ended
            if not live.any():
                break  # every row ended in this chunk: the remaining actions are ignored
            rows = np.flatnonzero(live)
            # only the live rows are simulated: an ended or held row's outputs would be dropped
            try:
                raw_live, _, term_live, trunc_live, infos = venv.step(
                    acts[rows, first:end], rows=rows.tolist()
                )
            except RoboTwinProcessDied as exc:
                return self._crash_boundary(c, str(exc))
            term, trunc, succ = (np.zeros(b, dtype=bool) for _ in range(3))
            term[rows], trunc[rows] = _flags(term_live, len(rows)), _flags(trunc_live, len(rows))
            succ[rows] = [
                bool(i.get("success", tm)) if isinstance(i, dict) else bool(tm)
                for i, tm in zip(infos, term[rows])
            ]
            self._steps[live] += n
            steps_taken[live] += n
            if self.opts.dense_reward:  # RoboTwin's task reward level after the step (1 once succeeded)
                level = np.zeros(b, dtype=np.float32)
                level[rows] = [float(i["dense_reward"]) for i in infos]
                reward = self.opts.reward_coef * level
            else:
                reward = self.opts.reward_coef * succ.astype(np.float32)
            if self.opts.use_rel_reward:
                reward -= self.opts.reward_coef * self._prev_success.astype(np.float32)
            self._prev_success = np.where(live, succ, self._prev_success)
            term_now = (succ | term) & (not self.cfg.ignore_terminations)
            trunc_now = ~term_now & (trunc | (self._steps >= self.cfg.max_episode_steps))
            rewards[live, t] = reward[live]
            success[live, t] = succ[live]
            terminated[live, t] = term_now[live]
            truncated[live, t] = trunc_now[live]
            newly = live & (term_now | trunc_now)
            need_obs = newly.any() or end == c or self.video is not None
            if need_obs:
                step_obs = _scatter_rows(convert_obs(raw_live, self.opts), rows, obs)
                final_obs = merge_obs_rows(final_obs, step_obs, newly)
                obs = step_obs
                if self.video is not None:
                    self._record_step(
                        step_obs, live, start_len + steps_taken, rewards[:, t], success[:, : t + 1]
                    )
            ended |= newly
        episodes.add(rewards, steps_taken, success)
        metrics = episodes.end(ended)
        obs, final_obs = episodes.next_obs(
            obs, final_obs, ended, lambda rows: self._reset_rows(rows, self._draw_ids(len(rows)))
        )
        if self.video is not None:
            for r in self.video.rows:
                if ended[r]:
                    self.video.finish(r, obs["images"][r] if self.cfg.auto_reset else None)
        return StepResult(
            obs=obs, rewards=rewards, terminated=terminated, truncated=truncated, final_obs=final_obs,
            final_mask=ended, episode_metrics=metrics, infos={"success": success, **self.fault_stats()},
        )  # fmt: skip

    def fault_stats(self) -> dict[str, float]:
        """RoboTwin processes replaced, episodes lost to their crashes (ended as truncated) and seconds spent
        replacing them, so far."""
        return {
            "worker_restarts": float(self.worker_restarts),
            "lost_episodes": float(self.lost_episodes),
            "restart_time_s": float(self.restart_time_s),
        }

    def expert_paths(self, rows: Sequence[int]) -> list[dict[str, Any]]:
        """RoboTwin's own expert (the task's `play_once`) on the current scenes of `rows`: per row the commanded
        14-D state after every physics step (`path` [T + 1, 14]), `success`, `plan_success`, `error`
        (`RoboTwinProcess.expert`). The expert uses the scenes up: `reset()` before the next `chunk_step`."""
        if self.venv is None or self._needs_reset:
            raise RuntimeError("RoboTwinEnv.expert_paths needs scenes set up by reset()")
        out = self.venv.expert([int(r) for r in rows])
        self._needs_reset = True
        return out

    def set_video_tag(self, tag: str) -> None:
        """Name prefix of the video files written from now on (`{tag}_env{row}_ep{n}.mp4`); episodes in progress
        are written under the new tag. No-op without `save_video`."""
        if self.video is not None:
            self.video.tag = str(tag)

    def close(self) -> None:
        """Write pending videos and close RoboTwin's envs (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self.video is not None:
            self.video.close()
        venv = getattr(self, "venv", None)
        if venv is not None:
            venv.close()

    # ------------------------------------------------------------------ internals
    def _replace_process(self, ids: np.ndarray, reason: str) -> Obs:
        """Replace the RoboTwin process that died (`reason`) by a new one built with the same seeds and reset every
        row to `ids` (RoboTwin has no observation of a sub-env before its first reset); returns the observation.
        Failures on the way are retried after a backoff; `MAX_CONSECUTIVE_FAILURES` in a row raise
        `SimulatorUnavailable`."""
        rows = np.arange(self.num_envs)
        t0 = time.monotonic()
        try:
            for attempt in range(MAX_CONSECUTIVE_FAILURES):
                if attempt > 0:
                    time.sleep(backoff_s(attempt))
                old = self.venv
                logger.warning(
                    "the RoboTwin process (pid %s, task %s) died or hung (%s); starting a new one and resetting "
                    "env rows %s", None if old is None else old.pid, self.opts.task,
                    reason.strip().splitlines()[0] if reason.strip() else reason, rows.tolist(),
                )  # fmt: skip
                if old is not None:
                    old.close()
                self.venv = None
                try:
                    self.venv = RoboTwinProcess(self.opts, n_envs=self.num_envs, env_seeds=self._build_seeds)
                    self.worker_restarts += 1
                    return self._reset_rows(rows, ids)
                except (RoboTwinProcessDied, RoboTwinUnavailableError) as exc:  # the new one died or hung too
                    reason = str(exc)
        finally:
            self.restart_time_s += time.monotonic() - t0
        first = reason.strip().splitlines()[0] if reason.strip() else reason
        raise SimulatorUnavailable(
            f"simulator 'robotwin' (task {self.opts.task}) of env rows {list(range(self.num_envs))} failed "
            f"{MAX_CONSECUTIVE_FAILURES} times in a row (died, hung or could not start); last error: {first}"
        )

    def _crash_boundary(self, c: int, reason: str) -> StepResult:
        """The RoboTwin process died during a chunk: replace it, reset the rows whose episode was in flight and
        report those episodes as lost (truncated at chunk position 0; this chunk's other outcomes are dropped).

        With auto_reset=False the rows start again from the ids of the last `reset()`, so every trial of an
        evaluation is still covered, and rows whose episode had already ended stay held, showing their final obs.
        """
        episodes = self.episodes
        last = episodes.last_obs()
        live = ~episodes.held
        if self.cfg.auto_reset:  # (no row is held)
            self._reset_ids = self._draw_ids(self.num_envs)
        fresh = self._replace_process(self._reset_ids, reason)  # held rows are reset too, and stay held
        self.lost_episodes += int(live.sum())
        b = self.num_envs
        truncated = np.zeros((b, c), dtype=bool)
        truncated[:, 0] = live
        zeros = np.zeros((b, c), dtype=np.float32)
        episodes.add(zeros, np.zeros(b, dtype=np.int64), np.zeros((b, c), dtype=bool))
        metrics = episodes.end(live)
        obs = merge_obs_rows(last, fresh, live)
        episodes.obs = obs
        if self.video is not None:
            for r in self.video.rows:
                if live[r]:
                    self.video.finish(r, obs["images"][r] if self.cfg.auto_reset else None)
        return StepResult(
            obs=obs, rewards=zeros, terminated=np.zeros((b, c), dtype=bool), truncated=truncated,
            final_obs=last, final_mask=live, episode_metrics=metrics,
            infos={"success": np.zeros((b, c), dtype=bool), **self.fault_stats()}, lost=live.copy(),
        )  # fmt: skip

    def _record_step(
        self, obs: Obs, live: np.ndarray, step: np.ndarray, reward: np.ndarray, success: np.ndarray
    ) -> None:
        assert self.video is not None
        succeeded = self.episodes.succeeded()
        for r in self.video.rows:
            if live[r]:
                done_before = succeeded[r]
                self.video.add(
                    r, obs["images"][r], step=int(step[r]), reward=float(reward[r]),
                    success=bool(done_before or success[r].any()),
                )  # fmt: skip


def make_robotwin_env(cfg: EnvConfig) -> RoboTwinEnv:
    """Build the batched RoboTwin env of `cfg`.

    Raises:
        ValueError: unsupported task (the 4 tasks RoboTwin's vector env lacks included) or a bad option.
        RoboTwinUnavailableError: RoboTwin, its assets or its requirements are missing, or building the envs
            did not finish within `extra['construct_timeout_s']` (says which).
    """
    if cfg.env_type != "robotwin":
        raise ValueError(f"make_robotwin_env got EnvConfig.env_type={cfg.env_type!r}, expected 'robotwin'")
    return RoboTwinEnv(cfg, resolve_options(cfg))
