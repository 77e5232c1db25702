"""The fast variant of the chaos campaign (`benchmarks/chaos.py --fast`): real MetaWorld simulator processes
SIGKILLed at random moments and the trainer SIGKILLed once; the run completes with `runner.resume_dir=auto`."""

from __future__ import annotations

import re
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
    # How many kills land before the 4 iterations end depends on the machine's speed; every one must be survived
    # (the trainer SIGKILL and its resume are checked deterministically in test_e2e_train_local.py).
    kills = re.search(r"simulator kills: (\d+) delivered, (\d+) survived", out)
    assert kills is not None, out
    assert int(kills.group(1)) >= 1 and kills.group(1) == kills.group(2), out
    assert "run exit code 0" in out and "other transitions lost: 0" in out, out
