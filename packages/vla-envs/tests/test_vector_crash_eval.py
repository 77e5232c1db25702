"""auto_reset=False (evaluation): a worker crash keeps ended rows ended and restarts the others from their ids."""

from __future__ import annotations

import dataclasses
import os
import signal

import numpy as np
import pytest

from vla_envs import EnvConfig  # first: sets MUJOCO_GL before metaworld imports mujoco
from vla_envs.metaworld.env import metaworld_spec
from vla_envs.vector import VectorEnv

pytest.importorskip("metaworld")

END = 0.5  # an action whose first entry is exactly this ends the episode (sim_terminated)


class _EndingSim:
    """A real MetaWorld sim that reports termination on the END action (ends one row's episode early)."""

    def __init__(self, sim) -> None:
        self.sim = sim

    def reset(self, reset_state_id: int):
        return self.sim.reset(reset_state_id)

    def step(self, action: np.ndarray):
        obs, reward, success, terminated = self.sim.step(action)
        return obs, reward, success, terminated or float(action[0]) == END

    def close(self) -> None:
        self.sim.close()


def build_ending_sims(cfg, spec, rows):
    from vla_envs.metaworld.sim import build_metaworld_sims

    return [_EndingSim(s) for s in build_metaworld_sims(cfg, spec, rows)]


def test_crash_during_evaluation_keeps_ended_rows_and_reset_ids() -> None:
    cfg = EnvConfig(
        env_type="metaworld",
        task="reach-v3",
        num_envs=2,
        envs_per_worker=2,  # one worker holds both rows
        render=False,
        start_method="fork",  # the workers inherit this module, so the builder resolves by its name
        auto_reset=False,
        max_episode_steps=50,
        worker_timeout_s=60.0,
        worker_start_timeout_s=60.0,
    )
    spec = dataclasses.replace(metaworld_spec(cfg), builder=f"{__name__}:build_ending_sims")
    env = VectorEnv(cfg, spec)
    try:
        ids = [7, 31]
        start = env.reset(reset_state_ids=ids)
        actions = np.zeros((2, 2, 4), np.float32)
        actions[0, 0, 0] = END  # row 0 ends at its first step; row 1 keeps going
        res = env.chunk_step(actions)
        np.testing.assert_array_equal(res.final_mask, [True, False])
        held_state = res.obs["states"][0].copy()

        os.kill(env.workers[0].pid, signal.SIGKILL)
        actions = np.zeros((2, 2, 4), np.float32)
        res = env.chunk_step(actions)
        assert env.worker_restarts == 1
        # row 0 was already reported: not ended again (no zero-metric duplicate), still showing its final obs
        np.testing.assert_array_equal(res.final_mask, [False, True])
        assert not res.truncated[0].any() and res.truncated[1, 0]
        np.testing.assert_allclose(res.obs["states"][0], held_state, atol=1e-6)
        # row 1 restarted from the id given to reset(), not from a random trial
        np.testing.assert_allclose(res.obs["states"][1], start["states"][1], atol=1e-6)

        res = env.chunk_step(np.full((2, 2, 4), 0.3, np.float32))  # row 0 stays ended in the new worker
        np.testing.assert_array_equal(res.final_mask, [False, False])
        assert (res.rewards[0] == 0).all() and not res.truncated[0].any() and not res.terminated[0].any()
        np.testing.assert_allclose(res.obs["states"][0], held_state, atol=1e-6)
        assert not np.allclose(res.obs["states"][1], start["states"][1])  # row 1 moves again
    finally:
        env.close()
