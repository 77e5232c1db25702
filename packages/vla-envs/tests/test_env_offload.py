"""Env offload (`offload()` / `onload()`, the vla_infra `OffloadableEnv` protocol) on the real MetaWorld simulator:
the simulator processes are gone while offloaded, and rollouts that each start with a reset give the same
observations, rewards and episode ends as an env that stayed resident."""

from __future__ import annotations

import os

import numpy as np
import pytest

from vla_envs import EnvConfig, check_env_offload, make_env  # first: sets MUJOCO_GL before mujoco is imported

pytest.importorskip("metaworld")

# 4 rows in 2 subprocess workers; episodes of 3 decisions, so rows auto-reset inside a rollout and the batch's
# start-state generator is drawn from there (it must survive the offload)
CFG = EnvConfig(
    env_type="metaworld", task="reach-v3", num_envs=4, envs_per_worker=2, image_size=32, max_episode_steps=9,
    num_trials_per_task=20, auto_reset=True, seed=7,
)  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) holds no memory either
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _rollout(env, resets: dict, actions: np.ndarray) -> list[np.ndarray]:
    """One rollout as the trainer runs it: a reset, then chunk steps; every output that must match."""
    obs = env.reset(**resets)
    out = [obs["images"], obs["states"]]
    for a in actions:
        res = env.chunk_step(a)
        out += [
            res.obs["images"],
            res.obs["states"],
            res.rewards,
            res.terminated,
            res.truncated,
            res.final_mask,
        ]
        out += [res.final_obs["states"], res.episode_metrics["success_once"], res.episode_metrics["return"]]
    return out


def test_offload_stops_the_simulator_processes_and_the_next_rollouts_are_identical() -> None:
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (3, 5, 4, 4, 4)).astype(np.float32)  # 3 rollouts x 5 chunks [B=4, C=4, A=4]
    # rollout 1 seeded with explicit start states, rollout 2 drawn from the carried generator, rollout 3 reseeded
    resets = [{"seed": 11, "reset_state_ids": [0, 5, 5, 19]}, {}, {"seed": 12}]
    resident, offloaded = make_env(CFG), make_env(CFG)
    try:
        check_env_offload(CFG)  # MetaWorld can always be offloaded
        first_pids = offloaded.simulator_pids()
        assert len(first_pids) == 2 and all(_alive(p) for p in first_pids)
        for r in range(3):
            want = _rollout(resident, resets[r], actions[r])
            got = _rollout(offloaded, resets[r], actions[r])
            assert not offloaded.offloaded and len(offloaded.simulator_pids()) == 2
            assert len(want) == len(got)
            for k, (a, b) in enumerate(zip(want, got, strict=True)):
                np.testing.assert_array_equal(a, b, err_msg=f"rollout {r}, output {k}")
            # between rollouts (the actor trains): the simulator processes are gone
            pids = offloaded.simulator_pids()
            offloaded.offload()
            assert offloaded.offloaded and offloaded.simulator_pids() == []
            assert not any(_alive(p) for p in pids)
            with pytest.raises(RuntimeError, match="call reset"):
                offloaded.chunk_step(actions[r, 0])
            offloaded.offload()  # idempotent
        assert resident.fault_stats() == offloaded.fault_stats()  # an offload is not a crash
        offloaded.onload()  # explicit onload: rebuilt, but no episode until reset()
        assert len(offloaded.simulator_pids()) == 2 and not offloaded.offloaded
        with pytest.raises(RuntimeError, match="call reset"):
            offloaded.chunk_step(actions[0, 0])
    finally:
        resident.close()
        offloaded.close()
    assert offloaded.simulator_pids() == []


def test_maniskill_gpu_backend_is_refused_by_name() -> None:
    gpu = EnvConfig(env_type="maniskill", task="PickCube-v1", num_envs=2, extra={"sim_backend": "gpu"})
    with pytest.raises(ValueError, match=r"sim_backend'\]='gpu' cannot be offloaded.*sim_backend='cpu'"):
        check_env_offload(gpu)
    check_env_offload(gpu.replace(extra={"sim_backend": "cpu"}))
