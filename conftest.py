"""Repository-wide pytest hooks.

``VLA_REQUIRE_ALL=1`` turns every skip into a failure that names the skip reason, except a skip for a missing
CUDA GPU (a reason that mentions "CUDA" or "GPU" and not Vulkan) and the guide tests' one skip where the reference
guides' text was not given (``VLA_GUIDES_DIR`` unset: their facts are checked from the repository's own test data,
only the comparison with the text is left out). CI sets it so that a broken install (a
simulator that no longer imports, a missing Vulkan driver, an optional dependency left out) fails the run
instead of silently skipping the tests that need it. Module-level skips (``pytest.importorskip`` at import
time, ``pytest.skip(..., allow_module_level=True)``) become one failing item ``<module>::REQUIRE_ALL``.
Expected failures (``xfail``) are left alone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from typing import Any

import pytest

# Keep every Ray instance the tests start on 127.0.0.1. Ray reads this when it is
# first imported, so it is set here, before any test module can import ray; otherwise one test importing ray
# early makes later clusters advertise the machine's address and multi-node fixtures time out.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

# A headless MuJoCo backend before any test module imports a simulator (`pytest.importorskip("metaworld")` at
# collection imports MuJoCo, which reads MUJOCO_GL once): without it in-process rendering fails in later tests.
try:
    from vla_envs.gl import configure_mujoco_gl
except ImportError:  # vla-envs not installed: no simulator tests to prepare
    pass
else:
    configure_mujoco_gl()

REQUIRE_ALL_ENV = "VLA_REQUIRE_ALL"
_GPU_REASON = re.compile(r"CUDA|GPU")
# ManiSkill's "no Vulkan device" help text mentions GPUs, but a missing Vulkan driver is an install problem
_NOT_GPU_REASON = re.compile(r"vulkan", re.IGNORECASE)
#: Skips for an input that was not given rather than an install that is broken, accepted word for word:
#: apps/train_embodied/tests/guide_facts.py GUIDES_NOT_SET.
_INPUT_NOT_GIVEN = frozenset(
    {
        "VLA_GUIDES_DIR is not set: the guide facts in data/guide_facts.yaml are not compared with the guides' text"
    }
)


def _require_all() -> bool:
    return os.environ.get(REQUIRE_ALL_ENV, "") == "1"


def _skip_reason(longrepr: Any) -> str:
    """The message of a skip report (``longrepr`` is ``(path, lineno, "Skipped: reason")`` for skips)."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _allowed(reason: str) -> bool:
    if reason in _INPUT_NOT_GIVEN:
        return True
    return bool(_GPU_REASON.search(reason)) and not _NOT_GPU_REASON.search(reason)


def _failure_text(reason: str) -> str:
    return (
        f"skipped with {REQUIRE_ALL_ENV}=1 (only a missing CUDA GPU or guides' text may skip): {reason}\n"
        "Install what the test needs (see scripts/setup.sh) or unset the variable."
    )


class _RequiredModuleSkipped(pytest.Item):
    """Stands in for the tests of a module that skipped at import time; fails with the skip reason."""

    def __init__(self, *, reason: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reason = reason

    def runtest(self) -> None:
        pytest.fail(_failure_text(self.reason), pytrace=False)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"{self.name}: {self.reason}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if _require_all() and report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report.longrepr)
        if not _allowed(reason):
            report.outcome = "failed"
            report.longrepr = _failure_text(reason)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    report = yield
    if _require_all() and report.skipped and isinstance(collector, pytest.Module):
        reason = _skip_reason(report.longrepr)
        if not _allowed(reason):
            item = _RequiredModuleSkipped.from_parent(collector, name="REQUIRE_ALL", reason=reason)
            report = pytest.CollectReport(collector.nodeid, "passed", None, [item])
    return report
