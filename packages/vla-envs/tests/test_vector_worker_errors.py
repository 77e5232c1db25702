"""A Python exception inside one worker (a simulator bug) must not leave the other workers' replies unread."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vla_envs import EnvConfig  # first: sets MUJOCO_GL before metaworld imports mujoco
from vla_envs.metaworld.env import metaworld_spec
from vla_envs.vector import VectorEnv
from vla_envs.workers import WorkerError

pytest.importorskip("metaworld")

FAULT = 0.5  # an action whose first entry is exactly this makes the simulator raise


class _FaultySim:
    """A real MetaWorld sim that raises on the FAULT action (stands in for a simulator bug)."""

    def __init__(self, sim) -> None:
        self.sim = sim

    def reset(self, reset_state_id: int):
        return self.sim.reset(reset_state_id)

    def step(self, action: np.ndarray):
        if float(action[0]) == FAULT:
            raise RuntimeError("simulated simulator failure")
        return self.sim.step(action)

    def close(self) -> None:
        self.sim.close()


def build_faulty_sims(cfg, spec, rows):
    from vla_envs.metaworld.sim import build_metaworld_sims

    return [_FaultySim(s) for s in build_metaworld_sims(cfg, spec, rows)]


def test_worker_exception_does_not_desynchronise_other_workers() -> None:
    cfg = EnvConfig(
        env_type="metaworld",
        task="reach-v3",
        num_envs=2,
        envs_per_worker=1,
        render=False,
        start_method="fork",
        max_episode_steps=50,
        worker_timeout_s=60.0,  # bounds a hang instead of the 120 s / 300 s defaults
        worker_start_timeout_s=60.0,
    )
    # fork: the workers inherit this test module, so the builder resolves by its module name
    spec = dataclasses.replace(metaworld_spec(cfg), builder=f"{__name__}:build_faulty_sims")
    env = VectorEnv(cfg, spec)
    try:
        env.reset(reset_state_ids=[0, 1])
        actions = np.zeros((2, 1, 4), np.float32)
        actions[0, 0, 0] = FAULT  # worker 0 raises, worker 1 steps normally
        with pytest.raises(WorkerError, match="simulated simulator failure"):
            env.chunk_step(actions)
        # every worker must be answering the command it was just sent, not a stale reply
        obs = env.reset(reset_state_ids=[0, 1])
        assert obs["states"].shape == (2, 39)
        res = env.chunk_step(np.zeros((2, 1, 4), np.float32))
        assert res.rewards.shape == (2, 1) and res.obs["states"].shape == (2, 39)
    finally:
        env.close()
