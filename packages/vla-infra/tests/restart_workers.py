"""A worker class for the restart tests of the worker groups (it travels to Ray workers by value)."""

from __future__ import annotations

import os
from typing import Any

from vla_infra import Worker, register


class RestartProbe(Worker):
    """State set by replayed calls (`set_value`, then `scale`), changed by `add`; `recover` is recorded."""

    def __init__(self, start: float) -> None:
        self.value = start
        self.recovered = False

    @register("one_to_all", collect="none", replay=True)
    def set_value(self, value: float) -> None:
        self.value = value

    @register("one_to_all", collect="none", replay=True)
    def scale(self, factor: float) -> None:
        self.value *= factor

    @register("one_to_all", collect="list")
    def add(self, x: float) -> float:
        self.value += x
        return self.value

    @register("one_to_all", collect="list")
    def state(self) -> dict[str, Any]:
        return {"value": self.value, "recovered": self.recovered, "pid": os.getpid()}

    @register("one_to_all", collect="list", restart=False)
    def finish(self) -> None:
        """A call that must not bring a dead worker back."""

    def recover(self) -> None:
        self.recovered = True
