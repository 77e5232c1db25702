"""One LIBERO batch row (runs inside a worker; imports robosuite, MuJoCo and LIBERO).

Each task is a LIBERO `OffScreenRenderEnv` built once (`hard_reset=False`: a reset re-uses the compiled model
and GL context, 0.5 s instead of 20 s) and reset to one of the task's starts, then run `num_settle_steps` no-op
steps with the gripper open, as LIBERO policies are evaluated. With `init_states="fixed"` a start is
`env.reset()` then `env.set_init_state(init_states[trial])`; with "sampled" it is `env.reset()` alone, LIBERO's
own start sampler with robosuite's default joint noise on the arm. Either way LIBERO samples NumPy's global
generator during the reset (the fixtures' placement, which a saved state does not hold; the whole start when
sampled), so we seed it per (task, trial) during the reset, and we clear the gripper command robosuite keeps
between soft resets. Equal reset ids therefore give identical starts (state and images) regardless of what the
env did before.

Observations are LIBERO's own (robosuite samples its observables on its own clock inside a control step;
policies are trained on exactly these), only flipped upright and reduced to the 8-D proprio state. Speed on
llvmpipe (see the package README): the model's shadow map and multisampling are switched off before the GL
context is made (shadowsize=0, offsamples=0); cameras render only the frames observations return
(`vla_envs.libero.render`); meshes may be drawn on a coarser grid (`render_mesh_grid`).
"""

from __future__ import annotations

import contextlib
import math
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from vla_envs.config import EnvConfig
from vla_envs.libero.options import MAIN_CAMERA, WRIST_CAMERA, LiberoOptions
from vla_envs.libero.render import LazyCameraFrames
from vla_envs.libero.suites import LiberoTask, suite_benchmark
from vla_envs.sim import ObsRow, SimSpec

STATE_DIM = 8
ACTION_DIM = 7
#: robosuite's default initialization noise ("default": Gaussian, 0.02 rad per arm joint), which LIBERO's saved
#: initial states carry; LIBERO's `ControlEnv` switches it off, the "sampled" starts switch it back on.
SAMPLED_JOINT_NOISE = "default"


def quat2axisangle(quat: np.ndarray) -> np.ndarray:
    """Axis-angle [3] (unit axis times angle in radians) of a quaternion (x, y, z, w), as robosuite defines it."""
    x, y, z, w = (float(v) for v in quat)
    w = min(max(w, -1.0), 1.0)
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return np.array([x, y, z]) * 2.0 * math.acos(w) / den


def proprio_state(raw: dict[str, Any]) -> np.ndarray:
    """float32 [8]: end-effector position [3], axis-angle [3] and gripper finger positions [2] (OpenVLA-OFT)."""
    return np.concatenate(
        [raw["robot0_eef_pos"], quat2axisangle(raw["robot0_eef_quat"]), raw["robot0_gripper_qpos"]]
    ).astype(np.float32)


def upright(image: np.ndarray, flip: str) -> np.ndarray:
    """Make a raw robosuite frame (stored bottom row first) upright: "rotate180" or "vertical"."""
    image = image[::-1, ::-1] if flip == "rotate180" else image[::-1]
    return np.ascontiguousarray(image)


def decision_reward(success: bool, prev_success: bool, opts: LiberoOptions) -> float:
    """Reward of one policy decision: sparse success reward (or its change), minus the step penalty."""
    reward = opts.reward_coef * float(success)
    if opts.use_rel_reward:
        reward -= opts.reward_coef * float(prev_success)
    return reward - opts.step_penalty


def placement_seed(task: str, trial: int) -> int:
    """Seed of LIBERO's placement sampling for (task, trial), the same in every process and run."""
    return (zlib.crc32(task.encode()) * 1000 + int(trial)) % 2**32


@contextlib.contextmanager
def _seeded_global_numpy(seed: int) -> Iterator[None]:
    """Seed NumPy's global generator for the block (LIBERO's samplers use it), then restore its state."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


@contextlib.contextmanager
def fast_render_models(mesh_grid: float = 0.0) -> Iterator[None]:
    """While active, every robosuite `MjSim` is created with shadowsize=0 and offsamples=0 (5x faster on
    llvmpipe) and, with `mesh_grid` > 0 (metres), its meshes drawn on that grid (`simplify_drawn_meshes`, each
    face keeping its own corner normals). The render context reads these when it is made (it uploads the meshes
    then), so they must be set before, not after."""
    from robosuite.utils import binding_utils

    from vla_envs.metaworld.meshes import simplify_drawn_meshes

    original = binding_utils.MjSim.__dict__["from_xml_string"]

    def from_xml_string(cls: type, xml: str) -> Any:
        sim = original.__func__(cls, xml)
        quality = sim.model._model.vis.quality
        quality.shadowsize = 0
        quality.offsamples = 0
        if mesh_grid > 0:
            simplify_drawn_meshes(sim.model._model, mesh_grid, corners="face")
        return sim

    binding_utils.MjSim.from_xml_string = classmethod(from_xml_string)
    try:
        yield
    finally:
        binding_utils.MjSim.from_xml_string = original


class LiberoTaskEnv:
    """A LIBERO env of one task with its initial states.

    Args:
        task: The task.
        opts: Resolved LIBERO options.
    """

    def __init__(self, task: LiberoTask, opts: LiberoOptions) -> None:
        from libero.libero.envs import OffScreenRenderEnv

        self.task = task
        self.opts = opts
        bench = suite_benchmark(task.suite)
        self.init_states = np.asarray(bench.get_task_init_states(task.index))
        self.sampled = opts.init_states == "sampled"
        h, w = opts.image_hw
        with fast_render_models(opts.render_mesh_grid):
            self.env = OffScreenRenderEnv(
                bddl_file_name=bench.get_task_bddl_file_path(task.index),
                camera_names=opts.cameras or [MAIN_CAMERA],
                camera_heights=h,
                camera_widths=w,
                use_camera_obs=opts.render,
                hard_reset=False,
                ignore_done=True,  # episode length is enforced by the runner, not robosuite's horizon
                initialization_noise=SAMPLED_JOINT_NOISE if self.sampled else None,
            )
        self.lazy: LazyCameraFrames | None = None
        if opts.render and opts.lazy_render:
            self.lazy = LazyCameraFrames(self.env.env, [f"{camera}_image" for camera in opts.cameras])

    def observed(self, raw: dict[str, Any]) -> dict[str, Any]:
        """`raw` with the camera frames it returns rendered (lazy rendering leaves placeholders in it)."""
        if self.lazy is not None:
            raw.update(self.lazy.frames())
        return raw

    def reset(self, trial: int) -> dict[str, Any]:
        """Place start `trial`, run the settle steps; returns LIBERO's raw observation dict."""
        if not self.sampled and not 0 <= trial < len(self.init_states):
            raise ValueError(
                f"LIBERO task {self.task.name!r} has {len(self.init_states)} initial states, got trial {trial}; "
                "EnvConfig.num_trials_per_task must not exceed it"
            )
        if self.lazy is not None:
            self.lazy.install()
        with _seeded_global_numpy(placement_seed(self.task.name, trial)):
            raw = self.env.reset()
        for robot in self.env.env.robots:
            # robosuite keeps the gripper's last command between soft resets (a hard reset rebuilds the
            # gripper): clear it, so that a start does not depend on the previous episode.
            robot.gripper.current_action = np.zeros_like(robot.gripper.current_action)
        # The settle steps sample the cameras like any step: robosuite samples a camera on its own clock, and
        # switching cameras off for these steps changes which frames later steps return (measured), so we do not
        # (lazy rendering keeps the clocks and renders only the frame the last settle step returns).
        if not self.sampled:
            raw = self.env.set_init_state(self.init_states[trial])
        for _ in range(self.opts.num_settle_steps):
            raw, _, _, _ = self.env.step(self.opts.settle_action)
        return self.observed(raw)

    def step(self, action: np.ndarray, *, observe: bool = True) -> tuple[dict[str, Any], bool]:
        """One LIBERO step; returns (raw observation, success). `observe=False`: the caller does not read this
        step's camera frames (a repeat that is not a decision's last), which lazy rendering then skips."""
        raw, _, done, _ = self.env.step(action)  # LIBERO's `done` is its success predicate
        return (self.observed(raw) if observe else raw), bool(done)

    def close(self) -> None:
        self.env.close()


class LiberoSim:
    """One batch row: any task of the task set (per-task envs built lazily and cached, LRU).

    Args:
        cfg: The env config (action_repeat, ignore_terminations, num_trials_per_task).
        tasks: Tasks indexed by reset_state_id // num_trials_per_task.
        opts: Resolved LIBERO options.
    """

    def __init__(self, cfg: EnvConfig, tasks: list[LiberoTask], opts: LiberoOptions) -> None:
        self.cfg = cfg
        self.tasks = tasks
        self.opts = opts
        self._envs: OrderedDict[str, LiberoTaskEnv] = OrderedDict()
        self.current: LiberoTaskEnv | None = None
        self.raw_obs: dict[str, Any] | None = None  # LIBERO's last raw observation (for tests and tools)
        self._prev_success = False

    def task_env(self, task: LiberoTask) -> LiberoTaskEnv:
        """The (cached) env of `task`."""
        if task.name in self._envs:
            self._envs.move_to_end(task.name)
        else:
            self._envs[task.name] = LiberoTaskEnv(task, self.opts)
            while len(self._envs) > self.opts.task_cache_size:
                _, old = self._envs.popitem(last=False)
                old.close()
        return self._envs[task.name]

    def _obs(self, raw: dict[str, Any]) -> ObsRow:
        te = self.current
        assert te is not None
        self.raw_obs = raw
        flip = self.opts.image_flip
        image = (
            upright(raw[f"{MAIN_CAMERA}_image"], flip) if self.opts.render else np.zeros((0, 0, 3), np.uint8)
        )
        wrist = None
        if self.opts.render and self.opts.wrist:
            wrist = upright(raw[f"{WRIST_CAMERA}_image"], flip)[None]
        return {
            "images": image,
            "wrist_images": wrist,
            "states": proprio_state(raw),
            "task_descriptions": te.task.language,
        }

    def reset(self, reset_state_id: int) -> ObsRow:
        task_index, trial = divmod(int(reset_state_id), self.cfg.num_trials_per_task)
        self.current = self.task_env(self.tasks[task_index])
        self._prev_success = False
        return self._obs(self.current.reset(trial))

    def step(self, action: np.ndarray) -> tuple[ObsRow, float, bool, bool]:
        te = self.current
        assert te is not None, "step before reset"
        action = np.asarray(action, dtype=np.float64)
        success = False
        for _ in range(self.cfg.action_repeat):
            raw, succ = te.step(action, observe=False)
            success = success or succ
            if success and not self.cfg.ignore_terminations:
                break  # the episode ends here; further repeats would be wasted
        raw = te.observed(raw)  # the frames of the decision's last control step
        reward = decision_reward(success, self._prev_success, self.opts)
        self._prev_success = success
        return self._obs(raw), reward, success, False

    def close(self) -> None:
        for te in self._envs.values():
            te.close()
        self._envs.clear()


def build_libero_sims(cfg: EnvConfig, spec: SimSpec, rows: list[int]) -> list[LiberoSim]:
    """Worker-side builder: one LiberoSim per row, pre-building the env of the row's default task."""
    tasks: list[LiberoTask] = spec.options["tasks"]
    opts: LiberoOptions = spec.options["opts"]
    sims = []
    row_tasks = cfg.row_tasks(len(tasks))
    for row in rows:
        sim = LiberoSim(cfg, tasks, opts)
        sim.task_env(tasks[row_tasks[row]])
        sims.append(sim)
    return sims
