"""The per-env simulator protocol that subprocess workers drive (one `SimEnv` per batch row)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

ObsRow = dict[
    str, Any
]  # images [H,W,3] uint8, wrist_images [K,H,W,3] uint8 or None, states [D] f32, task str


class SimEnv(Protocol):
    """One simulated env. `step` runs `cfg.action_repeat` simulator steps for one policy action."""

    def reset(self, reset_state_id: int) -> ObsRow:
        """Start an episode from reset state `reset_state_id` (deterministic: same id -> same start)."""
        ...

    def step(self, action: np.ndarray) -> tuple[ObsRow, float, bool, bool]:
        """Apply action [A]; return (obs, reward in the configured reward mode, success, sim_terminated)."""
        ...

    def close(self) -> None:
        """Free the simulator."""
        ...


@dataclass
class SimSpec:
    """What the parent process knows about an adapter without building a simulator.

    Attributes:
        builder: "module:attr" of `build(cfg, spec, rows) -> list[SimEnv]`, importable in a fresh process.
        action_dim: A.
        action_low, action_high: float32 [A].
        tasks: Task names; reset_state_id = task_index * cfg.num_trials_per_task + trial.
        options: Adapter data passed through to the builder (e.g. goal observability).
    """

    builder: str
    action_dim: int
    action_low: np.ndarray
    action_high: np.ndarray
    tasks: list[str]
    options: dict[str, Any] = field(default_factory=dict)
