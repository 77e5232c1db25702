"""Test double of RoboTwin's `robotwin/envs/vector_env.py` (see ../../README.md): RoboTwin's call contract and the
behaviour measured on the real code, with toy dynamics."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import yaml

HEAD_HW = (240, 320)  # RoboTwin's D435 head camera
WRIST_HW = (240, 320)
GRIPPERS = (6, 13)
HOME = np.array([0.0, -0.3, -2.2, 0.0, 1.9, 0.785, 1.0] * 2)  # the same for every seed; grippers open (1.0)


class _SubEnv:
    def __init__(self, task_name: str, step_lim: int, wrist: bool) -> None:
        self.task_name = task_name
        self.step_lim = step_lim
        self.wrist = wrist
        self.seed: int | None = (
            None  # as RoboTwin: the task is set up by the first reset, not the constructor
        )
        self.state = HOME.copy()
        self.run_steps = 0
        self.success = False
        self.step_calls: list[tuple[int, ...]] = []  # the shape of every step's actions

    def reset(self, seed: int) -> None:
        self.seed = int(seed)
        self.state = HOME.copy()
        self.run_steps = 0
        self.success = False

    def _image(self, hw: tuple[int, int], channel_offset: int) -> np.ndarray:
        h, w = hw
        img = np.zeros((h, w, 3), dtype=np.uint8)
        img[..., 0] = (np.arange(w)[None, :] * 255 // (w - 1)).astype(np.uint8)
        img[..., 1] = (np.arange(h)[:, None] * 255 // (h - 1)).astype(np.uint8)
        img[..., 2] = (
            self.seed * 37 + channel_offset + int(self.state[0] * 100)
        ) % 256  # the scene: the seed
        return img

    def obs(self) -> dict:
        if self.seed is None:
            raise AttributeError("'NoneType' object has no attribute 'get_obs' (no reset yet)")
        return {
            "full_image": self._image(HEAD_HW, 0),
            "left_wrist_image": self._image(WRIST_HW, 85) if self.wrist else None,
            "right_wrist_image": self._image(WRIST_HW, 170) if self.wrist else None,
            "state": self.state.copy(),
            "instruction": np.str_(f"{self.task_name.replace('_', ' ')} (test double, seed {self.seed})"),
        }

    def step(self, actions: np.ndarray) -> dict:
        # As RoboTwin: no simulation once succeeded (success is sticky) or at step_lim; the joints reach the
        # commanded positions; success is checked along the way; flags are arrays of shape (1,).
        self.step_calls.append(tuple(np.asarray(actions).shape))
        if not self.success and self.run_steps < self.step_lim:
            for action in np.asarray(actions).reshape(-1, 14):
                self.state = action.astype(np.float64).copy()
                self.run_steps += 1
                self.success |= bool(self.state[GRIPPERS[0]] < 0.1 and self.state[GRIPPERS[1]] < 0.1)
                if self.success or self.run_steps >= self.step_lim:
                    break
        return {
            "obs": self.obs(),
            "reward": np.array([float(self.success)], dtype=np.float32),
            "terminated": np.array([int(self.success)], dtype=np.int32),
            "truncated": np.array(
                [int(self.run_steps >= self.step_lim and not self.success)], dtype=np.int32
            ),
            "info": {"success": self.success},
        }


class VectorEnv:
    """RoboTwin's vector env interface over toy sub-envs."""

    def __init__(
        self, task_config: dict, n_envs: int, env_seeds: list | None = None, instruction_type: str = "seen"
    ):
        assets = Path(os.environ["ASSETS_PATH"])  # as RoboTwin's checkout: the directory holding assets/
        root = Path(__file__).resolve().parents[2]
        table = yaml.safe_load((root / "task_config/_embodiment_config.yml").read_text())
        for name in task_config["embodiment"][:2]:
            if isinstance(name, str):
                assert (assets / table[name]["file_path"] / "config.yml").is_file(), name
        task_config["save_path"] += f"/{task_config['task_name']}_reward"  # RoboTwin mutates its argument
        assert task_config["camera"]["collect_head_camera"], "RoboTwin reads observation['head_camera']"
        self.task_config = task_config
        self.instruction_type = instruction_type
        self.n_envs = n_envs
        self.env_seeds = env_seeds
        self.step_calls: list[tuple[int, ...]] = []
        wrist = bool(task_config["camera"]["collect_wrist_camera"])
        self.envs = [
            _SubEnv(task_config["task_name"], int(task_config["step_lim"]), wrist) for _ in range(n_envs)
        ]

    def reset(self, env_idx=None, env_seeds=None) -> None:
        env_idx = list(range(self.n_envs)) if env_idx is None else list(env_idx)
        for k, i in enumerate(env_idx):
            seed = env_seeds[k] if env_seeds is not None else self.envs[i].seed
            self.envs[i].reset(seed if seed is not None else self.env_seeds[i])

    def get_obs(self) -> list:
        return [env.obs() for env in self.envs]

    def step(self, actions):
        actions = np.asarray(actions)
        assert actions.ndim == 3 and actions.shape[0] == self.n_envs and actions.shape[2] == 14, actions.shape
        self.step_calls.append(tuple(actions.shape))
        results = [env.step(actions[i]) for i, env in enumerate(self.envs)]
        return (
            [r["obs"] for r in results],
            [r["reward"] for r in results],
            [r["terminated"] for r in results],
            [r["truncated"] for r in results],
            [r["info"] for r in results],
        )

    def close(self, clear_cache: bool = True) -> None:
        self.envs = []
