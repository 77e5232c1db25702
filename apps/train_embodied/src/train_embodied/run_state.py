"""What the training loop carries from one iteration to the next (`RunState`), and its form in a checkpoint.

One counter: `iteration`, the training iterations done. The metrics of iteration N (1-based) are logged at step
N, the checkpoint saved after it is `global_step_N`, and a run resumed from it goes on with iteration N + 1: the
x-axis `global_step` of the logs is this count. The actor's optimizer steps are another number
(`optimizer_steps`: several per iteration, `algorithm.update_epoch` x minibatches).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunState:
    """The trainer's state: saved with every checkpoint (`to_dict`), restored on resume (`from_dict`)."""

    iteration: int = 0  # training iterations done
    env_steps: int = 0  # env steps of every training rollout so far
    weight_version: int = 0  # the last weight version synced to the rollout (each sync is a new one)
    optimizer_steps: int = 0  # the actor's optimizer steps so far, as it reports them
    #: per iteration: {"iteration", "env_steps", a few curve metrics, the val check's `eval/success*`}
    history: list[dict[str, Any]] = field(default_factory=list)
    before: dict[str, float] = field(default_factory=dict)  # the evaluation before RL
    #: when ("before_rl", "after_rl", "eval") -> decoding mode -> `vla_envs.evaluation_table`
    eval_tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    # not saved: this process's
    start_time: float = field(default_factory=time.time)
    warned_no_groups: bool = False  # the filter-dropped-every-group warning was printed

    def to_dict(self) -> dict[str, Any]:
        """The trainer state a checkpoint holds (JSON-able); `step` (the iteration, the run's x-axis) is also the
        checkpoint manifest's step."""
        return {
            "step": self.iteration,
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "weight_version": self.weight_version,
            "optimizer_steps": self.optimizer_steps,
            "history": self.history,
            "before": self.before,
            "eval_tables": self.eval_tables,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        """The state `to_dict` wrote. A trainer state without `iteration`, `weight_version` or `optimizer_steps`
        gives them as `epoch`, `version` and `global_step` (the actor's optimizer steps); those are read too."""
        return cls(
            iteration=_count(data, "iteration", "epoch"),
            env_steps=_count(data, "env_steps"),
            weight_version=_count(data, "weight_version", "version"),
            optimizer_steps=_count(data, "optimizer_steps", "global_step"),
            history=list(data.get("history") or []),
            before=dict(data.get("before") or {}),
            eval_tables=dict(data.get("eval_tables") or {}),
        )


def _count(data: dict[str, Any], *keys: str) -> int:
    """The value of the first of `keys` that `data` holds (0 when none), which must be a count (an int >= 0).

    Raises:
        ValueError: naming the key and the value.
    """
    key = next((k for k in keys if data.get(k) is not None), None)
    if key is None:
        return 0
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"the trainer state's {key}={value!r} is not a count (an int >= 0)")
    return value
