"""Fixtures shared by the vla-infra tests."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

# the helper modules beside this file (tiny_transformer_jobs, weight_sync_workers, ...) import by name
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def two_rank() -> list[dict[str, Any]]:
    """Each rank's results of the two-process gloo FSDP run of `tiny_transformer_jobs` (run once per session and
    cached there: every test that reads it shares one run)."""
    import tiny_transformer_jobs

    return tiny_transformer_jobs.two_rank_results()["fsdp"]
