"""CPU backend: one ManiSkill env (`sim_backend="cpu"`, 1 sub-env) per batch row, driven by the shared
subprocess workers (`vla_envs.vector.VectorEnv` -> `vla_envs.runner.EnvRunner` -> `ManiSkillSim`)."""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import replace
from typing import Any

import numpy as np

from vla_envs.config import EnvConfig
from vla_envs.maniskill import put_on_plate
from vla_envs.maniskill.observations import batch_obs, to_numpy_row
from vla_envs.maniskill.options import ManiSkillOptions, resolve_options
from vla_envs.maniskill.runtime import make_task_env
from vla_envs.maniskill.tasks import TASKS
from vla_envs.sim import ObsRow, SimEnv, SimSpec

_SEED_STRIDE = 1_000_003  # keeps the reset seeds of different base seeds apart


def reset_seed(base_seed: int, reset_state_id: int) -> int:
    """The ManiSkill reset seed of a reset_state_id: same id (and base seed) -> same start state."""
    return int((base_seed * _SEED_STRIDE + int(reset_state_id)) % (2**31 - 1))


def instruction_for(opts: ManiSkillOptions) -> str:
    """The task description: the override, else the instruction in `TASKS`."""
    if opts.task_description:
        return opts.task_description
    return TASKS[opts.task].instruction


class ManiSkillSim:
    """One ManiSkill env implementing the `vla_envs.sim.SimEnv` protocol.

    Args:
        cfg: The env config (seed, action_repeat, ignore_terminations).
        opts: Resolved ManiSkill options (sim_backend must be "cpu").
    """

    def __init__(self, cfg: EnvConfig, opts: ManiSkillOptions) -> None:
        import torch

        torch.set_num_threads(1)  # many workers share few cores; torch only does small pose math here
        self.cfg = cfg
        self.opts = opts
        self.instruction = instruction_for(opts)
        self.env = make_task_env(opts, num_envs=1)
        self.base = self.env.unwrapped

    def _obs(self, raw_obs: Any) -> ObsRow:
        return to_numpy_row(batch_obs(self.base, raw_obs, self.opts, self.instruction))

    def reset(self, reset_state_id: int) -> ObsRow:
        """Start the episode seeded by `reset_seed(cfg.seed, reset_state_id)`."""
        raw_obs, _ = self.base.reset(seed=reset_seed(self.cfg.seed, reset_state_id))
        return self._obs(raw_obs)

    def step(self, action: np.ndarray) -> tuple[ObsRow, float, bool, bool]:
        """Run `cfg.action_repeat` simulator steps with `action` [A].

        Returns:
            (obs, reward summed over the repeats, success in any repeat, ManiSkill `fail` in any repeat).
        """
        total = 0.0
        success = failed = False
        raw_obs: Any = None
        for _ in range(self.cfg.action_repeat):
            raw_obs, reward, _, _, info = self.base.step(np.asarray(action, dtype=np.float32))
            total += float(reward.reshape(-1)[0])
            success |= bool(info["success"].reshape(-1)[0]) if "success" in info else False
            failed |= bool(info["fail"].reshape(-1)[0]) if "fail" in info else False
            if (success or failed) and not self.cfg.ignore_terminations:
                break
        return self._obs(raw_obs), total, success, failed

    def close(self) -> None:
        """Close the ManiSkill env."""
        self.env.close()


class PutOnPlateSim:
    """One env of the reference's PutOnPlateInScene25 family (see `vla_envs.maniskill.put_on_plate`).

    Trial t of `reset_state_id` is the task's `episode_id` `put_on_plate.episode_ids(t)` (carrot, plate,
    overlay, position and rotation); the reset seed is `reset_seed(cfg.seed, id)`.

    Args:
        cfg: The env config.
        opts: Resolved options of a PutOnPlateInScene25 task.
    """

    def __init__(self, cfg: EnvConfig, opts: ManiSkillOptions) -> None:
        import torch

        torch.set_num_threads(1)
        self.cfg = cfg
        self.opts = opts
        self.env = make_task_env(opts, num_envs=1)
        self.base = self.env.unwrapped
        self.total_num_trials = int(self.base.total_num_trials)
        if cfg.num_trials_per_task > self.total_num_trials:
            raise ValueError(
                f"EnvConfig.num_trials_per_task={cfg.num_trials_per_task} is invalid for {opts.task} with "
                f"obj_set={opts.obj_set!r}: it has {self.total_num_trials} episode ids; use at most that many"
            )
        self.instruction = ""
        self._prev_reward = 0.0

    def _obs(self, raw_obs: Any) -> ObsRow:
        return {
            "images": put_on_plate.frames(raw_obs, self.opts.image_hw)[0].cpu().numpy(),
            "wrist_images": None,
            "states": self.base.agent.robot.get_qpos()[0].cpu().numpy().astype(np.float32),
            "task_descriptions": self.instruction,
        }

    def reset(self, reset_state_id: int) -> ObsRow:
        """Start the episode whose task episode_id belongs to this id's trial."""
        trial = int(reset_state_id) % self.cfg.num_trials_per_task
        episode = put_on_plate.episode_ids(
            np.array([trial]), self.cfg.num_trials_per_task, self.total_num_trials
        )
        return self.reset_episode(int(episode[0]), reset_state_id)

    def reset_episode(self, episode_id: int, reset_state_id: int) -> ObsRow:
        """Start the task's episode `episode_id`, seeded by `reset_seed(cfg.seed, reset_state_id)`."""
        import torch

        raw_obs, _ = self.base.reset(
            seed=reset_seed(self.cfg.seed, reset_state_id),
            options={"episode_id": torch.as_tensor([int(episode_id)])},
        )
        self.instruction = str(self.base.get_language_instruction()[0])
        self._prev_reward = 0.0
        return self._obs(raw_obs)

    def step(self, action: np.ndarray) -> tuple[ObsRow, float, bool, bool]:
        """Run `cfg.action_repeat` steps of the task's controller with `action` [7].

        Returns:
            (obs, reward summed over the repeats, the task's success in any repeat, False).
        """
        import torch

        total = 0.0
        success = False
        raw_obs: Any = None
        act_np = np.array(action, dtype=np.float32)
        act_np[6] = put_on_plate.gripper_command(float(act_np[6]), self.opts.gripper_action)
        act = torch.as_tensor(act_np[None])
        for _ in range(self.cfg.action_repeat):
            raw_obs, _, _, _, info = self.base.step(act)
            reward = float(put_on_plate.step_reward(info, self.opts.reward_mode)[0])
            total += reward - self._prev_reward if self.opts.use_rel_reward else reward
            self._prev_reward = reward
            success |= bool(info["success"].reshape(-1)[0])
            if success and not self.cfg.ignore_terminations:
                break
        return self._obs(raw_obs), total, success, False

    def close(self) -> None:
        """Close the ManiSkill env."""
        self.env.close()


class PutOnPlateRow:
    """One batch row of a set of PutOnPlateInScene25 tasks (e.g. an evaluation split): each reset runs the task
    of its id (`task_index * num_trials_per_task + trial`); a task's env is built on first use and the last
    `TASK_CACHE_SIZE` are kept (building another takes 1-3 s after the first in a process).

    Args:
        cfg: The env config.
        opts: Resolved options (their `tasks`).
        first_task: The task built now (the row's task before any reset).
    """

    TASK_CACHE_SIZE = 2

    def __init__(self, cfg: EnvConfig, opts: ManiSkillOptions, first_task: str) -> None:
        self.cfg = cfg
        self.opts = opts
        self._sims: OrderedDict[str, PutOnPlateSim] = OrderedDict()
        self.current = self._sim(first_task)

    def _sim(self, task: str) -> PutOnPlateSim:
        if task in self._sims:
            self._sims.move_to_end(task)
            return self._sims[task]
        while len(self._sims) >= self.TASK_CACHE_SIZE:
            self._sims.popitem(last=False)[1].close()
        self._sims[task] = PutOnPlateSim(self.cfg, replace(self.opts, task=task))
        return self._sims[task]

    def reset(self, reset_state_id: int) -> ObsRow:
        """Switch to the id's task and start its trial."""
        self.current = self._sim(self.opts.tasks[int(reset_state_id) // self.cfg.num_trials_per_task])
        return self.current.reset(reset_state_id)

    def step(self, action: np.ndarray) -> tuple[ObsRow, float, bool, bool]:
        """Step the current task's env."""
        return self.current.step(action)

    def close(self) -> None:
        """Close every cached env."""
        for sim in self._sims.values():
            sim.close()
        self._sims.clear()


def build_maniskill_sims(cfg: EnvConfig, spec: SimSpec, rows: list[int]) -> list[SimEnv]:
    """`SimSpec.builder` entry point: one `ManiSkillSim` (or `PutOnPlateSim`) per row, inside a worker."""
    os.environ.setdefault("MS_SKIP_ASSET_DOWNLOAD_PROMPT", "1")
    opts = resolve_options(cfg)
    if opts.put_on_plate:  # the asset folders the parent resolved (a forkserver's environment may be older)
        roots = spec.options.get("asset_roots") or put_on_plate.asset_roots(opts.asset_dir)
        put_on_plate.prepare_process(*roots)
        if len(opts.task_list) > 1:
            row_tasks = cfg.row_tasks(len(opts.task_list))
            return [PutOnPlateRow(cfg, opts, opts.task_list[row_tasks[row]]) for row in rows]
        return [PutOnPlateSim(cfg, opts) for _ in rows]
    return [ManiSkillSim(cfg, opts) for _ in rows]
