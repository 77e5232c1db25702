"""benchmarks/algos_vs_sb3.py runs end to end at tiny size (one row per task, the last line, exit 0 or 1) and refuses
bad arguments with one line and exit 2. The figures themselves are benchmarks/RESULTS.md's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("stable_baselines3")
SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "algos_vs_sb3.py"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/ not in this checkout")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, check=False
    )


def test_tiny_run_prints_a_row_and_the_worst_line(tmp_path):
    out = _run("--tasks", "CartPole-v1", "--seeds", "2", "--steps", "512", "--json", str(tmp_path / "r.json"))
    assert out.returncode in (0, 1), out.stdout + out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    row = next(line for line in lines if line.startswith("CartPole-v1 | 512 steps x 2 seeds"))
    assert "held-out example" in row and "ratio" in row
    assert lines[-1].startswith("worst: return ratio") and lines[-1].endswith(("goal MET", "goal NOT MET"))
    assert (out.returncode == 0) == lines[-1].endswith("goal MET")
    saved = json.loads((tmp_path / "r.json").read_text())["CartPole-v1"]
    assert {len(v) for v in saved["runs"].values()} == {2} and set(saved["curves"]) == {"example", "sb3"}
    assert all(
        r["steps"] == 512 for v in saved["runs"].values() for r in v
    )  # the same env steps on both sides


@pytest.mark.parametrize("args", [("--tasks", "MountainCar-v0"), ("--seeds", "1"), ("--steps", "0")])
def test_bad_arguments_exit_2_with_one_line(args, capsys):
    spec = importlib.util.spec_from_file_location("algos_vs_sb3", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["algos_vs_sb3"] = module
    spec.loader.exec_module(module)
    assert module.main(list(args)) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: ") and len(out.splitlines()) == 1, out
