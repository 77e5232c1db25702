"""Functions run inside the RoboTwin process hosting the test double (`RoboTwinProcess.run(file, function)`)."""

from __future__ import annotations

import time
from typing import Any


def stall_steps(venv: Any, row: int, seconds: float) -> None:
    """Every later step of sub-env `row` first sleeps `seconds` (a sub-env stuck in its physics or planner)."""
    sub = venv.envs[row]
    step = sub.step

    def slow(action: Any) -> Any:
        time.sleep(seconds)
        return step(action)

    sub.step = slow


def exceed_step_bound(venv: Any) -> None:
    """What the process's own step bound raises when a sub-env's step passes it (`server.Host.step_rows`)."""
    raise TimeoutError("a sub-env's step took more than 1 s (raise the env's extra.call_timeout_s ...)")
