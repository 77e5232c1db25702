"""Hostile conditions around a real run (tiny PPO on real MetaWorld): a second run into a folder in use is refused
with one line naming the folder and the first run's process; a full disk during a checkpoint save is one line,
leaves the older checkpoint intact and no temporary folder; Ctrl-C is one line and a clean stop; the saved
config.json names `${oc.env:...}` instead of holding the variable's value."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from train_embodied.cli import train_main
from train_embodied.testing import PPO_TINY
from vla_infra import checkpoint_problem

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: the helper module beside this file
from run_watch import like_a_terminal_started_it

pytestmark = pytest.mark.slow
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")

CONFIG = "metaworld_ppo_tiny_cpu"
RUN = [*PPO_TINY, "runner.eval_before_train=false", "runner.eval_after_train=false", "runner.save_interval=1"]


def test_a_second_run_into_a_folder_in_use_is_refused(tmp_path: Path) -> None:
    log_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\nfrom train_embodied.run_folder import run_folder_lock\n"
         "with run_folder_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(120)\n",
         str(log_dir)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        second = subprocess.run(
            [sys.executable, "-m", "train_embodied.cli", CONFIG, *RUN, f"runner.logger.log_dir={log_dir}"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 2 and len(lines) == 1, second.stderr
    assert f"runner.logger.log_dir='{log_dir}' is in use by another run (pid {holder.pid}" in lines[0]
    assert not (log_dir / "metrics.jsonl").exists() and not (log_dir / "config.json").exists()


def test_a_full_disk_during_a_checkpoint_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The second iteration's save fails with ENOSPC (fault injection at the file write); the first checkpoint is
    intact and no temporary folder is left. The config reads a variable that must not reach config.json."""
    import vla_infra.checkpoint.state_files as ckpt_mod

    real = ckpt_mod.save_file

    def full_disk(tensors, filename, metadata=None):
        if "global_step_2.tmp-" in filename and filename.endswith("rank0.safetensors"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(ckpt_mod, "save_file", full_disk)
    monkeypatch.setenv("VLA_TEST_TOKEN", "s3cr3t-token-value")
    log_dir = tmp_path / "run"
    code = train_main(
        [CONFIG, *RUN, "runner.max_epochs=2", "runner.logger.project_name=${oc.env:VLA_TEST_TOKEN}",
         f"runner.logger.log_dir={log_dir}"]
    )  # fmt: skip
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(lines) == 1, lines
    assert f"saving checkpoint {log_dir / 'checkpoints' / 'global_step_2'} failed" in lines[0]
    assert "No space left on device" in lines[0] and "older checkpoints are intact" in lines[0]
    checkpoints = log_dir / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["global_step_1"]
    assert checkpoint_problem(checkpoints / "global_step_1") is None
    saved = (log_dir / "config.json").read_text()
    assert "s3cr3t-token-value" not in saved
    assert json.loads(saved)["runner"]["logger"]["project_name"] == "${oc.env:VLA_TEST_TOKEN}"


def test_ctrl_c_is_one_line_and_a_clean_stop(tmp_path: Path) -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it, once the workers are up."""
    log_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "train_embodied.cli", CONFIG, *RUN, "runner.max_epochs=50",
         f"runner.logger.log_dir={log_dir}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=like_a_terminal_started_it,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 180
        for line in proc.stdout:
            if "workers ready" in line or time.monotonic() > deadline:
                break
        time.sleep(2.0)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = err.strip().splitlines()
    assert proc.returncode == 130, err
    assert len(lines) == 1 and "interrupted (Ctrl-C)" in lines[0], err
    assert "Traceback" not in err
