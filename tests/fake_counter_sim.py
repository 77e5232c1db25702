"""A deterministic simulator for fast tests of `VectorEnv` and the rollout collector (no MuJoCo).

Row state: the reset id and a step counter. Each step the counter advances; the episode succeeds (reward 1,
terminated) at step `SUCCESS_AT[reset_id % 4]` (never for reset ids = 3 mod 4, which run to the time limit).
An action whose first entry equals `CRASH` kills the worker process (a simulator segfault); so does the first step
that finds a file `die.*` in `extra["die_once_dir"]` (it removes the file, so its replacement lives). Observations encode
the state: `states = [reset_id, step]`, images filled with the step count.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from vla_envs import EnvAdapter, EnvConfig, register_adapter
from vla_envs.sim import SimSpec
from vla_envs.vector import VectorEnv

ENV_TYPE = "fake_counter"
SUCCESS_AT = (1, 2, 3, 10**9)
CRASH = 0.75
ACTION_DIM = 2


class CounterSim:
    """One deterministic env (see module docstring)."""

    def __init__(self, image_size: int, die_once_dir: str | None = None) -> None:
        self.image_size = image_size
        self.die_once_dir = die_once_dir
        self.reset_id = 0
        self.t = 0

    def _obs(self) -> dict:
        return {
            "images": np.full((self.image_size, self.image_size, 3), self.t % 256, np.uint8),
            "wrist_images": None,
            "states": np.array([self.reset_id, self.t], np.float32),
            "task_descriptions": "count",
        }

    def reset(self, reset_state_id: int) -> dict:
        self.reset_id, self.t = int(reset_state_id), 0
        return self._obs()

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool]:
        if float(action[0]) == CRASH or self._die_once():
            os._exit(1)
        self.t += 1
        success = self.t == SUCCESS_AT[self.reset_id % 4]
        return self._obs(), float(success), success, False

    def _die_once(self) -> bool:
        if self.die_once_dir is None:
            return False
        for token in sorted(Path(self.die_once_dir).glob("die.*")):
            try:
                token.unlink()  # atomic: of simulators stepping in parallel, one takes the token
                return True
            except FileNotFoundError:
                continue
        return False

    def close(self) -> None:
        pass


def build_counter_sims(cfg: EnvConfig, spec: SimSpec, rows: list[int]) -> list[CounterSim]:
    return [CounterSim(int(cfg.image_hw[0]), cfg.extra.get("die_once_dir")) for _ in rows]


def counter_spec(tasks: tuple[str, ...] = ("count",)) -> SimSpec:
    return SimSpec(
        builder=f"{__name__}:build_counter_sims",
        action_dim=ACTION_DIM,
        action_low=np.full(ACTION_DIM, -1.0, np.float32),
        action_high=np.full(ACTION_DIM, 1.0, np.float32),
        tasks=list(tasks),
    )


def make_counter_env(cfg: EnvConfig) -> VectorEnv:
    return VectorEnv(cfg, counter_spec())


def register() -> None:
    """Make `env_type="fake_counter"` available to `make_env` (and so to the app's env workers), and its
    three-task twin `fake_counter_3` (tasks "a", "b", "c"; reset id = task index * num_trials_per_task + trial)."""
    register_adapter(EnvAdapter(ENV_TYPE, make_counter_env, lambda: ["count"]), overwrite=True)
    register_adapter(
        EnvAdapter(
            f"{ENV_TYPE}_3",
            lambda cfg: VectorEnv(cfg, counter_spec(("a", "b", "c"))),
            lambda: ["a", "b", "c"],
        ),
        overwrite=True,
    )
