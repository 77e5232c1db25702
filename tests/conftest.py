"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def no_running_ray():
    """No Ray instance before or after the test: the run under test starts (and stops) its own."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    yield
    if ray.is_initialized():
        ray.shutdown()
