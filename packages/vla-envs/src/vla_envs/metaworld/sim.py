"""One MetaWorld env with fast offscreen rendering (runs inside a worker; imports mujoco and metaworld).

Speed settings (measured on llvmpipe, see the package README): shadowsize=0 and offsamples=0 on the model,
a private `mujoco.Renderer` with reflections off, and optionally the far robot meshes (pedestal, base, head,
l0, l1: about 37k of 68k faces) moved to a hidden geom group, and the meshes drawn coarser
(`vla_envs.metaworld.meshes`).
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from typing import Any

import numpy as np

from vla_envs.config import EnvConfig
from vla_envs.metaworld.meshes import simplify_drawn_meshes
from vla_envs.metaworld.options import HAND_GOAL_INDICES, MetaWorldOptions, resolve_options
from vla_envs.metaworld.tasks import TASK_DESCRIPTIONS
from vla_envs.sim import ObsRow, SimSpec

# MetaWorld's corner cameras are mounted upside down: their images must be rotated 180 degrees.
FLIPPED_CAMERAS = frozenset({"corner", "corner2", "corner3", "corner4"})
FAR_MESHES = frozenset({"pedestal", "base", "head", "l0", "l1"})
HIDDEN_GEOM_GROUP = 5
STATE_DIM = 39
#: MetaWorld's shaped reward lies in [0, 10] (10 once the task is solved): progress is that reward / 10.
MAX_SHAPED_REWARD = 10.0


def trial_rng(task: str, trial: int) -> np.random.Generator:
    """The generator that draws the goal/object variation of (task, trial): fixed for ever, independent of
    the config seed. MetaWorld's reset re-draws until the task's constraints hold (e.g. goal far enough from
    the object), so we seed its generator rather than setting a variation directly."""
    return np.random.default_rng([zlib.crc32(task.encode()), int(trial), 20240611])


def upright(image: np.ndarray, camera: str) -> np.ndarray:
    """Rotate images of the upside-down corner cameras by 180 degrees."""
    if camera in FLIPPED_CAMERAS:
        image = image[::-1, ::-1]
    return np.ascontiguousarray(image)


class _TaskEnv:
    """A metaworld env of one task plus its renderer(s)."""

    def __init__(self, task: str, cfg: EnvConfig, opts: MetaWorldOptions, goal_observable: bool) -> None:
        import mujoco
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS

        self.task = task
        env = ALL_V3_ENVIRONMENTS[task]()
        env._partially_observable = not goal_observable
        env.__dict__.pop("sawyer_observation_space", None)  # cached_property depends on observability
        env._set_task_called = True
        env._freeze_rand_vec = False
        env.seeded_rand_vec = True  # draw variations from env.np_random (seeded per reset_state_id)
        env.max_path_length = 10**9  # episode length is enforced by the runner
        self.env = env
        self.renderer = None
        self.wrist_renderer = None
        self.scene_option = None
        if cfg.render:
            model = env.model
            model.vis.quality.shadowsize = 0
            model.vis.quality.offsamples = 0
            h, w = cfg.image_hw
            model.vis.global_.offwidth = max(int(model.vis.global_.offwidth), w)
            model.vis.global_.offheight = max(int(model.vis.global_.offheight), h)
            self.scene_option = mujoco.MjvOption()
            if opts.hide_far_meshes:
                for g in range(model.ngeom):
                    if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_MESH:
                        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_MESH, model.geom_dataid[g])
                        if name in FAR_MESHES:
                            model.geom_group[g] = HIDDEN_GEOM_GROUP
                self.scene_option.geomgroup[HIDDEN_GEOM_GROUP] = 0
            if opts.render_mesh_grid > 0:
                simplify_drawn_meshes(model, opts.render_mesh_grid)
            self.renderer = mujoco.Renderer(model, h, w)
            self.renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
            if opts.wrist_camera is not None:
                # same size: one GL context and one upload of the model's meshes serve both cameras
                self.wrist_renderer = self.renderer

    def render(self, renderer: Any, camera: str) -> np.ndarray:
        renderer.update_scene(self.env.data, camera=camera, scene_option=self.scene_option)
        return upright(renderer.render(), camera)

    def close(self) -> None:
        if self.renderer is not None:
            self.renderer.close()
        self.env.close()


class MetaWorldSim:
    """One batch row: runs any task of the task set (per-task envs built lazily and cached, LRU).

    Args:
        cfg: Env config (image size, action_repeat, reward_mode, render settings; cameras and the rest of the
            MetaWorld settings through `resolve_options`).
        tasks: Task names indexed by reset_state_id // num_trials_per_task.
        goal_observable: Whether the goal position is part of the state (MT sets) or zeroed (ML sets).
        cache_size: Per-task envs kept alive for this row (None: `extra['task_cache_size']`).
    """

    def __init__(
        self, cfg: EnvConfig, tasks: list[str], goal_observable: bool, cache_size: int | None = None
    ) -> None:
        self.cfg = cfg
        self.opts = resolve_options(cfg)
        self.tasks = tasks
        self.goal_observable = goal_observable
        self.cache_size = self.opts.task_cache_size if cache_size is None else cache_size
        self._envs: OrderedDict[str, _TaskEnv] = OrderedDict()
        self._current: _TaskEnv | None = None
        self._progress = 0.0  # the current state's progress in [0, 1] (extra['progress_reward'])
        self.raw_state: np.ndarray | None = (
            None  # float64 [39] as metaworld returns it (for scripted experts)
        )

    def _task_env(self, task: str) -> _TaskEnv:
        if task in self._envs:
            self._envs.move_to_end(task)
        else:
            self._envs[task] = _TaskEnv(task, self.cfg, self.opts, self.goal_observable)
            while len(self._envs) > self.cache_size:
                _, old = self._envs.popitem(last=False)
                old.close()
        return self._envs[task]

    def _obs(self, state: np.ndarray) -> ObsRow:
        te = self._current
        assert te is not None
        if te.renderer is not None:
            image = te.render(te.renderer, self.opts.camera)
        else:
            image = np.zeros((0, 0, 3), dtype=np.uint8)
        wrist = None
        if te.wrist_renderer is not None and self.opts.wrist_camera is not None:
            wrist = te.render(te.wrist_renderer, self.opts.wrist_camera)[None]
        if self.opts.states == "hand_goal":
            state = state[list(HAND_GOAL_INDICES)]
        return {
            "images": image,
            "wrist_images": wrist,
            "states": np.asarray(state, dtype=np.float32),
            "task_descriptions": TASK_DESCRIPTIONS[te.task],
        }

    def reset(self, reset_state_id: int) -> ObsRow:
        task_index, trial = divmod(int(reset_state_id), self.cfg.num_trials_per_task)
        te = self._task_env(self.tasks[task_index])
        self._current = te
        env = te.env
        env.np_random = trial_rng(te.task, trial)
        state, _ = env.reset()
        self.raw_state = state
        if self.opts.progress_reward > 0:
            # the start state's progress; no simulator step: evaluate_state only reads the state
            shaped, _ = env.evaluate_state(state, np.zeros(4, dtype=np.float32))
            self._progress = float(shaped) / MAX_SHAPED_REWARD
        return self._obs(state)

    def step(self, action: np.ndarray) -> tuple[ObsRow, float, bool, bool]:
        te = self._current
        assert te is not None, "step before reset"
        total, success = 0.0, False
        action = np.asarray(action, dtype=np.float64)
        for _ in range(self.cfg.action_repeat):
            state, reward, _, _, info = te.env.step(action)
            total += float(reward)
            success = success or bool(info["success"] > 0)
            if success and not self.cfg.ignore_terminations:
                break  # the episode ends here; further repeats would be wasted
        self.raw_state = state
        if self.cfg.reward_mode != "sparse":
            reward_out = total
        elif self.opts.progress_reward > 0:
            progress = float(reward) / MAX_SHAPED_REWARD  # the last sim step's shaped reward: this state's
            reward_out = float(success) + self.opts.progress_reward * (progress - self._progress)
            self._progress = progress
        else:
            reward_out = float(success)
        return self._obs(state), reward_out, success, False

    def close(self) -> None:
        for te in self._envs.values():
            te.close()
        self._envs.clear()


def build_metaworld_sims(cfg: EnvConfig, spec: SimSpec, rows: list[int]) -> list[MetaWorldSim]:
    """Worker-side builder: one MetaWorldSim per row, pre-building the row's default task env."""
    sims = []
    row_tasks = cfg.row_tasks(len(spec.tasks))
    for row in rows:
        sim = MetaWorldSim(cfg, spec.tasks, spec.options["goal_observable"])
        sim._task_env(spec.tasks[row_tasks[row]])
        sims.append(sim)
    return sims
