"""Subprocess workers: parallel stepping equals in-process, crashes and hangs give clean episode boundaries."""

from __future__ import annotations

import logging
import os
import signal

import numpy as np
import pytest

from vla_envs import EnvConfig, make_env  # first: sets MUJOCO_GL before metaworld imports mujoco

pytest.importorskip("metaworld")

BASE = {
    "env_type": "metaworld",
    "task": "reach-v3",
    "num_envs": 4,
    "envs_per_worker": 2,
    "image_size": 32,
    "max_episode_steps": 20,
}


@pytest.mark.slow
def test_workers_match_in_process_and_survive_kill_and_hang(caplog: pytest.LogCaptureFixture) -> None:
    ids = [3, 3, 9, 10]
    actions = np.random.default_rng(0).uniform(-1, 1, (4, 3, 4)).astype(np.float32)
    local = make_env(EnvConfig(**{**BASE, "envs_per_worker": 0}))
    try:
        ref_obs = local.reset(reset_state_ids=ids)
        ref = local.chunk_step(actions)
    finally:
        local.close()

    env = make_env(EnvConfig(**BASE, worker_timeout_s=5.0))
    try:
        assert len(env.workers) == 2 and len({w.pid for w in env.workers}) == 2
        obs = env.reset(reset_state_ids=ids)
        np.testing.assert_array_equal(obs["images"], ref_obs["images"])
        res = env.chunk_step(actions)
        np.testing.assert_allclose(res.obs["states"], ref.obs["states"], atol=1e-6)
        np.testing.assert_allclose(res.rewards, ref.rewards, atol=1e-6)

        # kill -9 worker 1 (rows 2, 3) mid-run: the next call returns a clean boundary for its rows
        old_pid = env.workers[1].pid
        os.kill(old_pid, signal.SIGKILL)
        with caplog.at_level(logging.WARNING, logger="vla_envs.worker_pool"):
            res = env.chunk_step(actions)
        assert env.worker_restarts == 1 and res.infos["worker_restarts"] == 1
        assert env.workers[1].pid != old_pid
        assert "env worker 1" in caplog.text and "exit code -9" in caplog.text
        np.testing.assert_array_equal(res.final_mask, [False, False, True, True])
        assert res.truncated[2:, 0].all() and not res.truncated[2:, 1:].any() and not res.terminated.any()
        assert (res.rewards[2:] == 0).all()
        assert (res.episode_metrics["episode_len"][2:] == 3).all()  # 3 decisions happened before the crash
        assert res.obs["images"].shape == (4, 32, 32, 3)
        res = env.chunk_step(actions)  # the run continues normally
        assert not res.final_mask.any()

        # a hung worker (SIGSTOP) is detected by the pipe timeout and replaced
        os.kill(env.workers[0].pid, signal.SIGSTOP)
        res = env.chunk_step(actions)
        assert env.worker_restarts == 2
        np.testing.assert_array_equal(res.final_mask, [True, True, False, False])
        assert not env.chunk_step(actions).final_mask.any()
    finally:
        env.close()
