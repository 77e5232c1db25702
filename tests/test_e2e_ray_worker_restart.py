"""A rollout or env Ray actor that dies is replaced and re-synced without ending the run. Real Ray on 127.0.0.1,
real MetaWorld env actors, the tiny OpenVLA-OFT; the actors are SIGKILLed (or `ray.kill`ed) from outside."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from train_embodied.testing import PPO_TINY, read_metrics, run_train

pytestmark = [pytest.mark.slow, pytest.mark.ray]
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")
ray = pytest.importorskip("ray")


def _pid(group, rank: int = 0) -> int:
    return int(group.execute_rank(rank, "ping")["pid"])


def test_killed_rollout_and_env_actors_are_replaced_and_resynced(tmp_path: Path, no_running_ray) -> None:
    from weights_compare import state_dicts_equal

    from train_embodied.config import load_train_config
    from train_embodied.run_workers import RunWorkers

    tc = load_train_config(
        "metaworld_ppo_tiny_cpu",
        [
            *PPO_TINY,
            "cluster.backend=ray",
            "cluster.component_placement={env: 0, rollout: '0:0-1', actor: 0}",
            "cluster.max_worker_restarts=2",
            f"runner.logger.log_dir={tmp_path}",
        ],
    )
    with RunWorkers(tc) as w:
        assert w.actor is not None
        actor = w.actor.state_dict()
        w.weights.sync(1)
        env = w.env_train[0]
        obs = env.reset(seed=3)

        # a rollout rank SIGKILLed between calls: the next predict replaces it, re-syncs version 1 to it over a new
        # peer group (the other rank, already at version 1, accepts the same version again), then runs
        old = _pid(w.rollout, 1)
        os.kill(old, signal.SIGKILL)
        out = w.rollout.predict(obs, mode="sample", weight_version=1)
        assert out.actions.shape[0] == 2
        assert w.rollout.restarts == [0, 1] and _pid(w.rollout, 1) != old
        for rank in range(2):
            assert w.rollout.execute_rank(rank, "weight_version") == 1
            assert state_dicts_equal(actor, w.rollout.execute_rank(rank, "state_dict")), rank

        # a rollout rank gone when the next sync starts: replaced first, then the new version reaches both ranks
        ray.kill(w.rollout.handles[0].actor)
        assert w.weights.sync(2) is not None
        assert w.rollout.restarts == [1, 1]
        assert [w.rollout.execute_rank(r, "weight_version") for r in range(2)] == [2, 2]
        assert all(state_dicts_equal(actor, w.rollout.execute_rank(r, "state_dict")) for r in range(2))
        w.rollout.predict(obs, mode="sample", weight_version=2)

        # an env actor SIGKILLed between a reset and a step: the replacement replays the reset (the same start
        # observations), and its first step ends the in-flight episodes as truncated and lost, not finished
        os.kill(_pid(env), signal.SIGKILL)
        res = env.chunk_step(out.actions.numpy())
        assert env.restarts == [1]
        assert res.lost.all() and res.final_mask.all()
        assert res.truncated[:, 0].all() and not res.terminated.any() and not res.rewards.any()
        np.testing.assert_array_equal(res.obs["states"], obs["states"])
        assert env.fault_stats()[0]["lost_episodes"] == 2.0
        nxt = env.chunk_step(out.actions.numpy())  # then it steps the simulators again
        assert not nxt.lost.any() and not np.array_equal(nxt.obs["states"], obs["states"])
        assert w.worker_restarts == 3
    assert not ray.is_initialized()


def test_run_survives_killed_rollout_and_env_actors(tmp_path: Path, no_running_ray) -> None:
    """A full Ray run: the rollout actor is SIGKILLed a second after the first iteration is logged and the training
    env actor as soon as the second is; the run completes and logs `cluster/actor_restarts`."""
    log_dir = tmp_path / "run"
    pid_file = log_dir / "worker_pids.json"
    killed: list[tuple[str, int]] = []

    def logged(step: int) -> bool:
        path = log_dir / "metrics.jsonl"
        return path.exists() and any(
            json.loads(line).get("step") == step and "train/actor/policy_loss" in line
            for line in path.read_text().splitlines()
        )

    def killer() -> None:
        # the rollout waits past the next iteration's weight sync (well under a second for the tiny model), so it
        # dies while it generates or idles during the update (a rollout killed inside a transfer is not covered);
        # the env dies at once: a second later can be past the last rollout that uses it on a loaded machine
        for step, group, delay in ((1, "rollout", 1.0), (2, "env_train_0", 0.0)):
            deadline = time.time() + 300
            while not logged(step) and time.time() < deadline:
                time.sleep(0.02)
            time.sleep(delay)
            pid = json.loads(pid_file.read_text())[group][0]
            os.kill(pid, signal.SIGKILL)
            killed.append((group, pid))

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    summary = run_train(
        "metaworld_ppo_tiny_cpu",
        [
            *PPO_TINY,
            "cluster.backend=ray",
            "runner.max_epochs=4",
            "runner.eval_greedy=false",
            "runner.eval_before_train=false",
        ],
        log_dir,
    )
    thread.join(timeout=10)
    assert [g for g, _ in killed] == ["rollout", "env_train_0"]
    assert summary["worker_restarts"] == 2 and summary["epochs"] == 4
    rows = [r for r in read_metrics(log_dir) if "train/actor/policy_loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[0]["cluster/actor_restarts"] == 0.0 and rows[-1]["cluster/actor_restarts"] == 2.0
    pids = json.loads(pid_file.read_text())  # rewritten after each restart: the replacements' processes
    assert pids["rollout"][0] != killed[0][1] and pids["env_train_0"][0] != killed[1][1]
    assert 0.0 <= summary["success_after_rl"] <= 1.0
