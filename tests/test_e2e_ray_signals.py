"""How a run on the Ray backend ends when it is told to stop, with real Ray (a private instance on 127.0.0.1) and
real MetaWorld: SIGTERM (a scheduler's stop) and Ctrl-C end in one line naming the last complete checkpoint, which
stays intact, and stop every process the run started; after a SIGKILL of the driver, nothing of its Ray instance
outlives it by more than a few seconds (Ray's agents alone would live on for about a minute)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from train_embodied.testing import PPO_TINY

pytestmark = [pytest.mark.slow, pytest.mark.ray]
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")
pytest.importorskip("ray")

from run_watch import WatchedRun  # noqa: E402

from vla_infra import checkpoint_problem, latest_checkpoint  # noqa: E402

RUN = [
    *PPO_TINY,
    "cluster.backend=ray",
    "runner.max_epochs=50",
    "runner.save_interval=1",
    "runner.eval_before_train=false",
    "runner.eval_after_train=false",
    "algorithm.update_epoch=1",
]


@pytest.mark.parametrize(
    ("sig", "group", "code", "said"),
    [
        (signal.SIGTERM, False, 143, "terminated (SIGTERM)"),
        (signal.SIGINT, True, 130, "interrupted (Ctrl-C)"),
    ],
    ids=["sigterm", "ctrl-c"],
)
def test_stopping_a_ray_run_is_one_line_and_leaves_nothing(
    sig: int, group: bool, code: int, said: str, tmp_path: Path
) -> None:
    run = WatchedRun("metaworld_ppo_tiny_cpu", RUN, tmp_path / "run")
    try:
        run.wait_for_checkpoint(1)
        run.signal(sig, group=group)
        assert run.wait(120) == code, run.err
        left = run.left_behind(15.0)
    finally:
        run.kill_left_behind()
    lines = run.err_lines
    ours = [line for line in lines if line.startswith("vla-train:")]
    assert len(ours) == 1 and ours[0] == lines[-1], run.err
    assert "Traceback" not in run.err and "SIGTERM received" not in run.err, run.err  # no native stack dump
    last = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert last is not None and checkpoint_problem(last, checksums=True) is None
    assert ours[0].startswith(f"vla-train: {said}: workers stopped; last complete checkpoint: {last}"), ours[
        0
    ]
    assert left == [], left


def test_after_a_sigkill_of_the_driver_no_ray_process_lives_on(tmp_path: Path) -> None:
    run = WatchedRun("metaworld_ppo_tiny_cpu", RUN, tmp_path / "run")
    try:
        run.wait_for_checkpoint(1)
        killed = run.signal(signal.SIGKILL)
        assert run.wait(60) == -signal.SIGKILL
        left = run.left_behind(15.0)
        gone_after = time.monotonic() - killed
    finally:
        run.kill_left_behind()
    assert left == [], left
    assert "raylet" in run.names.values()  # the run's Ray instance was followed
    print(f"every process of the run gone {gone_after:.1f} s after the driver's SIGKILL")
