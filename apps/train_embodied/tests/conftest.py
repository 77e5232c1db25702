"""Fixtures shared by the app's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread inside the test, restored after it (a module opts in with
    `pytestmark = pytest.mark.usefixtures("one_thread")`): on 2 shared cores, two threads make the small passes of
    a tiny policy ~8x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
