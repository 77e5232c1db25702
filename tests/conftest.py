"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# --import-mode=importlib: the helper modules beside this file (weights_compare, fake_counter_sim) import by name
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def no_running_ray():
    """No Ray instance before or after the test: the run under test starts (and stops) its own."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    yield
    if ray.is_initialized():
        ray.shutdown()
