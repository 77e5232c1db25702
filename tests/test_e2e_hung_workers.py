"""A hung worker ends the run instead of hanging it: `kill -STOP` stands in for a GPU kernel that never returns. On
the Ray backend the rollout actor's process is stopped, on the local backend the training env's simulator process (with
the env's own `worker_timeout_s` far longer, so that the driver's wait is what gives up). Either way the run ends
within `cluster.worker_timeout_s` plus a few seconds, in one line naming the stopped worker, the phase and the last
complete checkpoint, and no process of the run is left (the stopped one included). Real MetaWorld, the tiny
OpenVLA-OFT, a real private Ray instance on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from train_embodied.testing import PPO_TINY

pytestmark = pytest.mark.slow
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")

from run_watch import WatchedRun  # noqa: E402

from vla_infra import checkpoint_problem, latest_checkpoint  # noqa: E402

TIMEOUT_S = 30
RUN = [
    *PPO_TINY,
    "runner.max_epochs=50",
    "runner.save_interval=1",
    "runner.eval_before_train=false",
    "runner.eval_after_train=false",
    "algorithm.update_epoch=1",
    f"cluster.worker_timeout_s={TIMEOUT_S}",
    "env.train.worker_timeout_s=3600",  # the env's own wait for its simulator must not be what gives up
]


def _simulator_of_train_env(driver: int) -> int:
    """The training env's simulator process: the first child of the driver's fork server (the training envs are
    built before the evaluation envs)."""
    children = psutil.Process(driver).children(recursive=True)
    servers = [p for p in children if "forkserver" in " ".join(p.cmdline())]
    assert servers, [p.cmdline() for p in children]
    sims = sorted(servers[0].children(), key=lambda p: p.create_time())
    assert len(sims) == 2, sims  # one per env group: training and evaluation
    return sims[0].pid


def _one_line(run: WatchedRun) -> str:
    lines = run.err_lines
    ours = [line for line in lines if line.startswith("vla-train:")]
    assert len(ours) == 1 and ours[0] == lines[-1], run.err
    assert "Traceback" not in run.err, run.err
    return ours[0]


def _stop_a_worker(run: WatchedRun, find_pid: Callable[[], int]) -> tuple[int, str, Path]:
    """Stops (SIGSTOP) the worker `find_pid` names once the run has a checkpoint, waits for the run to end and checks
    that it ended with code 1, in one line, with a sound last checkpoint and no process left behind. Returns the
    stopped pid, the line and the last checkpoint."""
    try:
        run.wait_for_checkpoint(1)
        pid = find_pid()
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        assert run.wait(TIMEOUT_S + 150) == 1, run.err
        took = time.monotonic() - stopped
        left = run.left_behind(15.0)
    finally:
        run.kill_left_behind()
    line = _one_line(run)
    last = latest_checkpoint(run.log_dir / "checkpoints")
    assert last is not None and checkpoint_problem(last, checksums=True) is None
    assert took < TIMEOUT_S + 60, took
    assert left == [], left
    return pid, line, last


@pytest.mark.ray
def test_a_stopped_ray_actor_ends_the_run_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    run = WatchedRun("metaworld_ppo_tiny_cpu", [*RUN, "cluster.backend=ray"], tmp_path / "run")
    pid, line, last = _stop_a_worker(
        run, lambda: json.loads((tmp_path / "run" / "worker_pids.json").read_text())["rollout"][0]
    )
    # stopped while it generated (phase generate_rollouts) or while the actor sent it weights (sync_weights)
    assert line.startswith(f"vla-train: error: worker rollout rank 0 (pid {pid} on node 127.0.0.1) "), line
    assert f"no answer within cluster.worker_timeout_s={TIMEOUT_S} s (phase " in line, line
    assert re.search(r"\(phase (generate_rollouts|sync_weights)\)", line), line
    assert line.endswith(f"; last complete checkpoint: {last}; workers stopped"), line


def test_a_stopped_simulator_on_the_local_backend_ends_the_run_in_one_line(tmp_path: Path) -> None:
    run = WatchedRun("metaworld_ppo_tiny_cpu", RUN, tmp_path / "run")
    _, line, last = _stop_a_worker(run, lambda: _simulator_of_train_env(run.proc.pid))
    assert re.fullmatch(
        rf"vla-train: error: worker env_train_0 rank 0 in (reset|chunk_step): no answer within "
        rf"cluster.worker_timeout_s={TIMEOUT_S} s \(phase generate_rollouts\); last complete checkpoint: "
        rf"{re.escape(str(last))}; workers stopped",
        line,
    ), line
