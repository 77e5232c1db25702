"""A disk that refuses a write mid-run (full, or a file size limit: the kernel's RLIMIT_FSIZE makes every write past
the limit fail with EFBIG, as a full disk fails it with ENOSPC) ends the run in one line naming the file and the last
complete checkpoint (exit 1): an episode video, a checkpoint. No part of a video or of a checkpoint is left behind,
and older checkpoints stay intact."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from train_embodied.testing import PPO_TINY

pytestmark = pytest.mark.slow


def _train_with_file_limit(limit: int, run: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """`vla-train` on the tiny MetaWorld config, no file of it larger than `limit` bytes."""

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "train_embodied.cli", "metaworld_ppo_tiny_cpu", *PPO_TINY,
         f"runner.logger.log_dir={run}", *overrides],
        preexec_fn=limit_files, capture_output=True, text=True, timeout=600, cwd=run.parent,
    )  # fmt: skip


def test_a_video_the_disk_refuses_is_one_line(tmp_path: Path) -> None:
    # config.json (~6 KB) fits in 8 KB; the first held-out episode's video (40 frames, ~12 KB) does not
    videos = tmp_path / "videos"
    proc = _train_with_file_limit(
        8192,
        tmp_path / "run",
        "env.eval.video_cfg.save_video=true",
        f"env.eval.video_cfg.video_base_dir={videos}",
        "env.eval.max_episode_steps=40",
        "runner.only_eval=true",
    )
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1, proc.stderr[-3000:]
    assert err[0].startswith(f"vla-train: error: cannot write {videos}/eval_rank0_iter0_env0_ep0.mp4: "), err
    assert "; the run stopped; no complete checkpoint yet; run folder" in err[0], err
    assert list(videos.iterdir()) == []  # no part of a video


def test_a_checkpoint_the_disk_refuses_is_one_line_and_leaves_no_part(tmp_path: Path) -> None:
    # the metrics, config and tensorboard files fit in 64 KB; the tiny policy's weights (~4 MB) do not
    run = tmp_path / "run"
    proc = _train_with_file_limit(
        65536, run, "runner.max_epochs=1", "runner.save_interval=1", "runner.eval_before_train=false"
    )
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1, proc.stderr[-3000:]
    assert f"saving checkpoint {run}/checkpoints/global_step_1 failed: " in err[0], err
    assert "File too large" in err[0] and "older checkpoints are intact" in err[0], err
    assert list((run / "checkpoints").iterdir()) == []  # the temporary folder was removed
