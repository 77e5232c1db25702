"""Simulator faults at any moment: a worker killed during a step, a reset, its replacement's start-up or an
evaluation is replaced with bounded retries; the episodes in flight end as truncated and are counted; a simulator
that cannot start `MAX_CONSECUTIVE_FAILURES` times in a row ends the run with one message.

The simulator is a small deterministic one run through the same subprocess worker path as MetaWorld (a fault plan
in files tells it when to die: `os._exit` in its build, reset or step, or a hang), so every moment is reachable
on purpose and the tests take seconds. `test_random_kills_*` kills real worker processes from outside at random
moments.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from vla_envs import EnvAdapter, EnvConfig, SimulatorUnavailable, VideoConfig, register_adapter
from vla_envs import worker_pool as worker_pool_mod
from vla_envs.sim import SimSpec
from vla_envs.vector import VectorEnv

EPISODE = 5  # steps per episode (max_episode_steps)


def _consume(plan: str, event: str) -> bool:
    """True (and one token used up) if the fault plan holds a pending `event`; unlinking a token is atomic, so
    workers stepping in parallel never both take the same one."""
    for token in sorted(Path(plan).glob(f"{event}.*")):
        try:
            token.unlink()
            return True
        except FileNotFoundError:
            continue
    return False


def _fault(plan: str, event: str) -> None:
    if _consume(plan, f"die_{event}"):
        os._exit(17)
    if _consume(plan, f"hang_{event}"):
        time.sleep(3600)
    if _consume(plan, f"raise_{event}"):
        raise RuntimeError(f"simulated {event} failure")


class CountingSim:
    """A deterministic simulator: state = (reset id, step count); reward 1 on every step."""

    def __init__(self, plan: str, step_sleep: float, image_side: int = 0) -> None:
        self.plan = plan
        self.step_sleep = step_sleep
        self.image_side = image_side
        self.reset_id = 0
        self.t = 0

    def _obs(self) -> dict:
        side = self.image_side
        return {
            "images": np.full((side, side, 3), 40 * self.t, np.uint8),  # the step count, visible in a video
            "wrist_images": None,
            "states": np.array([self.reset_id, self.t], np.float32),
            "task_descriptions": "count",
        }

    def reset(self, reset_state_id: int) -> dict:
        _fault(self.plan, "reset")
        self.reset_id, self.t = int(reset_state_id), 0
        return self._obs()

    def step(self, action: np.ndarray):
        _fault(self.plan, "step")
        time.sleep(self.step_sleep)
        self.t += 1
        return self._obs(), 1.0, False, False

    def close(self) -> None:
        pass


def build_counting_sims(cfg, spec, rows):
    _fault(spec.options["plan"], "build")
    time.sleep(spec.options.get("build_sleep", 0.0))
    opts = spec.options
    return [CountingSim(opts["plan"], opts.get("step_sleep", 0.0), opts.get("image_side", 0)) for _ in rows]


# EnvConfig accepts registered env types only; these tests build VectorEnv directly with their own SimSpec
register_adapter(EnvAdapter("counting", lambda cfg: None), overwrite=True)


def make(
    tmp_path: Path,
    *,
    num_envs: int = 4,
    per_worker: int = 2,
    auto_reset: bool = True,
    video: VideoConfig | None = None,
    **options,
) -> VectorEnv:
    """`video`: record episodes (the simulator then renders 8 px frames)."""
    if video is not None:
        options = {"image_side": 8, **options}
    cfg = EnvConfig(
        env_type="counting",
        num_envs=num_envs,
        envs_per_worker=per_worker,
        start_method="fork",  # the workers inherit this module, so the builder resolves by its name
        render=video is not None,
        video=video or VideoConfig(),
        image_size=8,
        auto_reset=auto_reset,
        max_episode_steps=EPISODE,
        num_trials_per_task=100,
        worker_timeout_s=2.0,
        worker_start_timeout_s=5.0,
    )
    spec = SimSpec(
        builder=f"{__name__}:build_counting_sims",
        action_dim=2,
        action_low=-np.ones(2, np.float32),
        action_high=np.ones(2, np.float32),
        tasks=["count"],
        options={"plan": str(tmp_path), **options},
    )
    return VectorEnv(cfg, spec)


def plan(tmp_path: Path, **events: int) -> None:
    for event, count in events.items():
        for k in range(count):
            (tmp_path / f"{event}.{k}").touch()


@pytest.fixture(autouse=True)
def _short_backoff(monkeypatch):
    monkeypatch.setattr(worker_pool_mod, "RESTART_BACKOFF_S", 0.01)


ACT = np.zeros((4, 1, 2), np.float32)


def test_kill_during_step_truncates_the_episodes_in_flight_and_counts_them(tmp_path: Path) -> None:
    env = make(tmp_path)
    try:
        env.reset(reset_state_ids=[0, 1, 2, 3])
        env.chunk_step(ACT)
        os.kill(env.workers[1].pid, signal.SIGKILL)
        res = env.chunk_step(ACT)
        assert res.final_mask.tolist() == [False, False, True, True]
        assert res.truncated[:, 0].tolist() == [False, False, True, True] and not res.terminated.any()
        assert res.final_obs["states"][2:, 1].tolist() == [1.0, 1.0]  # the last obs seen before the crash
        assert res.obs["states"][2:, 1].tolist() == [0.0, 0.0]  # fresh episodes
        assert env.fault_stats()["worker_restarts"] == 1 and env.fault_stats()["lost_episodes"] == 2
        assert res.infos["lost_episodes"] == 2 and res.infos["restart_time_s"] > 0
        res = env.chunk_step(ACT)  # the run goes on
        assert res.obs["states"][:, 1].tolist() == [3.0, 3.0, 1.0, 1.0]
    finally:
        env.close()


def test_worker_dying_in_step_and_in_its_replacements_start_up_is_retried(tmp_path: Path) -> None:
    env = make(tmp_path)
    try:
        env.reset(reset_state_ids=[0, 1, 2, 3])
        plan(tmp_path, die_step=1, die_build=2)  # dies in a step, then twice while being restarted
        res = env.chunk_step(ACT)
        assert res.final_mask.sum() == 2 and env.worker_restarts == 3
        assert env.lost_episodes == 2
        assert env.chunk_step(ACT).rewards.sum() == 4.0
    finally:
        env.close()


def test_worker_dying_in_reset_and_in_the_restarts_reset(tmp_path: Path) -> None:
    env = make(tmp_path)
    try:
        plan(tmp_path, die_reset=2)  # the worker dies in reset, its replacement dies in its first reset too
        obs = env.reset(reset_state_ids=[4, 5, 6, 7])
        assert obs["states"][:, 0].tolist() == [4, 5, 6, 7]
        assert env.worker_restarts == 2 and env.lost_episodes == 0  # nothing was in flight
    finally:
        env.close()


def test_worker_dying_while_the_env_starts_is_started_again(tmp_path: Path) -> None:
    plan(tmp_path, die_build=1)  # one of the two workers dies while building its simulators
    env = make(tmp_path)
    try:
        assert env.worker_restarts == 1
        assert env.reset(reset_state_ids=[0, 1, 2, 3])["states"][:, 0].tolist() == [0, 1, 2, 3]
    finally:
        env.close()
    plan(tmp_path, die_build=10)
    with pytest.raises(SimulatorUnavailable, match=r"env rows \[0, 1\] failed to start 5 times in a row"):
        make(tmp_path)


def test_hung_worker_is_replaced_after_worker_timeout(tmp_path: Path) -> None:
    env = make(tmp_path)
    try:
        env.reset(reset_state_ids=[0, 1, 2, 3])
        plan(tmp_path, hang_step=1)
        t0 = time.time()
        res = env.chunk_step(ACT)
        assert res.final_mask.sum() == 2 and env.worker_restarts == 1
        assert time.time() - t0 < 10
    finally:
        env.close()


def test_simulator_that_cannot_start_ends_the_run_with_one_message(tmp_path: Path) -> None:
    env = make(tmp_path)
    try:
        env.reset(reset_state_ids=[0, 1, 2, 3])
        plan(tmp_path, die_step=1, raise_build=10)  # dies, then every replacement fails to build
        with pytest.raises(SimulatorUnavailable) as info:
            env.chunk_step(ACT)
        message = str(info.value)
        assert "\n" not in message
        assert "simulator 'counting'" in message and "env rows [" in message
        assert f"failed {worker_pool_mod.MAX_CONSECUTIVE_FAILURES} times in a row" in message
        assert message.endswith("RuntimeError: simulated build failure")
        assert env.worker_restarts == worker_pool_mod.MAX_CONSECUTIVE_FAILURES
    finally:
        env.close()


def test_crash_during_evaluation_keeps_ended_rows_and_restarts_the_rest(tmp_path: Path) -> None:
    env = make(tmp_path, auto_reset=False, num_envs=2, per_worker=2)
    try:
        env.reset(reset_state_ids=[10, 11])
        act = np.zeros((2, EPISODE, 2), np.float32)
        res = env.chunk_step(act)  # both episodes end (time limit): held until the next reset
        assert res.final_mask.all()
        os.kill(env.workers[0].pid, signal.SIGKILL)
        res = env.chunk_step(act)
        assert not res.final_mask.any() and env.lost_episodes == 0  # no episode was in flight
        env.reset(reset_state_ids=[12, 13])
        env.chunk_step(np.zeros((2, 2, 2), np.float32))
        plan(tmp_path, die_step=1, die_build=1)
        res = env.chunk_step(np.zeros((2, 1, 2), np.float32))
        assert res.truncated[:, 0].all() and env.lost_episodes == 2
        assert res.obs["states"][:, 0].tolist() == [12, 13]  # every (task, trial) is still covered
    finally:
        env.close()


def test_a_worker_killed_while_its_rows_are_recorded_loses_no_video(tmp_path: Path) -> None:
    """Rows 0-1 are recorded; their worker dies in the 2nd step. Each episode still gets its own file: the one
    cut by the crash ends at the last frame seen, the next starts fresh; a second env writing to the same folder
    (a resumed run) adds files and never overwrites one."""
    import imageio.v2 as imageio

    videos = tmp_path / "videos"
    cfg = VideoConfig(save_video=True, info_on_video=False, video_base_dir=str(videos), max_envs=2)
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir()
    env = make(plan_dir, video=cfg)
    try:
        env.reset(reset_state_ids=[0, 1, 2, 3])
        env.chunk_step(ACT)
        os.kill(env.workers[0].pid, signal.SIGKILL)
        res = env.chunk_step(ACT)
        assert res.truncated[:2, 0].all() and env.lost_episodes == 2
        cut = sorted(p.name for p in videos.iterdir())
        assert cut == ["episode_env0_ep0.mp4", "episode_env1_ep0.mp4"]
        for _ in range(EPISODE):  # the fresh episodes of rows 0-1 run to the time limit
            env.chunk_step(ACT)
    finally:
        env.close()
    first = {p.name: p.read_bytes() for p in videos.iterdir()}
    # the cut episode: reset frame, the 1st step, the last frame seen before the crash
    assert len(imageio.mimread(str(videos / "episode_env0_ep0.mp4"))) == 3
    assert len(imageio.mimread(str(videos / "episode_env0_ep1.mp4"))) == EPISODE + 1  # a whole episode
    again = make(plan_dir, video=cfg)
    try:
        again.reset(reset_state_ids=[0, 1, 2, 3])
        for _ in range(EPISODE):
            again.chunk_step(ACT)
    finally:
        again.close()
    after = {p.name: p.read_bytes() for p in videos.iterdir()}
    assert {k: after[k] for k in first} == first and len(after) > len(first)


def test_bad_actions_are_refused_naming_the_rows(tmp_path: Path) -> None:
    env = make(tmp_path)
    try:
        env.reset(reset_state_ids=[0, 1, 2, 3])
        bad = ACT.copy()
        bad[1, 0, 0] = np.nan
        bad[3, 0, 1] = np.inf
        with pytest.raises(ValueError, match=r"NaN/inf in env rows \[1, 3\] of 4"):
            env.chunk_step(bad)
        with pytest.raises(ValueError, match=r"must have shape \[num_envs=4, chunk>=1, action_dim=2\]"):
            env.chunk_step(np.zeros((3, 1, 2), np.float32))
        assert env.chunk_step(ACT).rewards.sum() == 4.0  # nothing was stepped by the refused calls
    finally:
        env.close()


@pytest.mark.parametrize("seed", [0, 1])
def test_random_kills_at_any_moment_are_survived(tmp_path: Path, seed: int, monkeypatch) -> None:
    """Kill worker processes from outside every ~0.15 s while the env steps, resets and restarts."""
    # a kill can land in a replacement's start-up: allow more failures in a row than the storm can cause
    monkeypatch.setattr(worker_pool_mod, "MAX_CONSECUTIVE_FAILURES", 8)
    env = make(tmp_path, num_envs=6, per_worker=2, step_sleep=0.002, build_sleep=0.05)
    rng = random.Random(seed)
    stop = threading.Event()
    kills = [0]

    def killer() -> None:
        while not stop.wait(rng.uniform(0.1, 0.2)):
            pid = env.workers[rng.randrange(len(env.workers))].pid
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                    kills[0] += 1
                except ProcessLookupError:
                    pass

    thread = threading.Thread(target=killer, daemon=True)
    ended = truncated_by_crash = 0
    try:
        env.reset(seed=seed)
        thread.start()
        t0 = time.time()
        while time.time() - t0 < 3.0 or kills[0] < 5:
            if rng.random() < 0.1:
                env.reset()
            res = env.chunk_step(np.zeros((6, 2, 2), np.float32))
            ended += int(res.final_mask.sum())
            truncated_by_crash += int((res.final_mask & (res.episode_metrics["episode_len"] < EPISODE)).sum())
            # every row's step count stays consistent with the episode boundary the env reported
            assert (res.obs["states"][:, 1] <= EPISODE).all()
    finally:
        stop.set()
        thread.join()
        env.close()
    stats = env.fault_stats()
    assert kills[0] >= 5 and stats["worker_restarts"] >= 1
    assert stats["lost_episodes"] == truncated_by_crash <= ended
