"""End to end through the Ray backend: the same worker classes as Ray actors (separate processes), a couple of
PPO iterations on real MetaWorld with the tiny OpenVLA-OFT. Ray is started privately on 127.0.0.1."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from train_embodied.testing import PPO_TINY, read_metrics, run_train

pytestmark = [pytest.mark.slow, pytest.mark.ray]
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")
ray = pytest.importorskip("ray")


def test_ppo_through_ray_workers(tmp_path: Path, no_running_ray) -> None:
    log_dir = tmp_path / "ray"
    summary = run_train(
        "metaworld_ppo_tiny_cpu",
        [
            *PPO_TINY,
            "cluster.backend=ray",
            "runner.max_epochs=2",
            "runner.eval_greedy=false",
            "runner.eval_before_train=false",
        ],
        log_dir,
    )
    assert summary["backend"] == "ray"
    pids = summary["worker_pids"]
    assert set(pids) == {"env_train_0", "env_eval", "rollout", "actor"}
    # every worker is a Ray actor: its own process, not this one
    assert all(pid != os.getpid() for group in pids.values() for pid in group)
    assert len({pid for group in pids.values() for pid in group}) == 4
    rows = [r for r in read_metrics(log_dir) if "train/actor/policy_loss" in r]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["train/actor/first_minibatch_approx_kl"] < 1e-6  # actor recomputes the rollout log-probs
    assert summary["env_steps"] == 32 and 0.0 <= summary["success_after_rl"] <= 1.0
    assert not ray.is_initialized()  # the run shut down the Ray instance it started
    assert json.loads((log_dir / "config.json").read_text())["cluster"]["backend"] == "ray"
