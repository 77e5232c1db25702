"""The fast variant of the chaos campaign (`benchmarks/chaos.py --fast`): real MetaWorld simulator processes
SIGKILLed at random moments and the trainer SIGKILLed once; the run completes with `runner.resume_dir=auto`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")

ROOT = Path(__file__).resolve().parents[1]


def test_chaos_fast_survives_every_kill(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--fast", "--keep", str(tmp_path)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    assert "simulator kills: 3 delivered, 3 survived; trainer SIGKILL: yes" in out, out
    assert "run exit code 0" in out and "other transitions lost: 0" in out, out
