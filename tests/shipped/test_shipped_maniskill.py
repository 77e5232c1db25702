"""The shipped ManiSkill3 (PutOnPlateInScene25 on the stand-in assets; all `long`) configs train one iteration on the CPU, shrunk as `shipped_runs.shrunk_overrides` says."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# --import-mode=importlib: put the shared module beside this file on the path
sys.path.insert(0, str(Path(__file__).parent))
import shipped_runs


@pytest.mark.slow
@pytest.mark.parametrize("name", shipped_runs.shipped("maniskill"))
def test_shipped_config_trains_one_iteration_on_cpu(name: str, tmp_path: Path) -> None:
    shipped_runs.train_one_iteration_and_check(name, tmp_path)
