"""ManiSkill-specific settings read from `EnvConfig` (its generic fields plus `extra`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vla_envs.config import EnvConfig, check_extra_keys
from vla_envs.maniskill.put_on_plate import (
    ACTION_HIGH,
    ACTION_LOW,
    CAMERA,
    GRIPPER_ACTIONS,
    OBJ_SETS,
    is_put_on_plate,
)
from vla_envs.maniskill.put_on_plate_cost import GRASP_CHECKS, check_render_scale, scaled_hw

SIM_BACKENDS = ("cpu", "gpu")
REWARD_MODES = ("sparse", "dense", "normalized_dense")
STATE_MODES = ("proprio", "privileged")
# Panda controllers with a normalised [-1, 1] action space and their action dims.
CONTROL_MODES = {"pd_ee_delta_pose": 7, "pd_ee_target_delta_pose": 7, "pd_joint_delta_pos": 8}
DEFAULT_CAMERA = "base_camera"
WRIST_CAMERA = "hand_camera"  # the Panda hand camera of the `panda_wristcam` robot
# Camera names that mean "the adapter's default camera" (EnvConfig.camera=None is the default).
_DEFAULT_CAMERA_ALIASES = (None, "", "default", DEFAULT_CAMERA)
EXTRA_KEYS = (
    "sim_backend",
    "control_mode",
    "reward_mode",
    "states",
    "task_description",
    "robot_uids",
    "env_kwargs",
    "obj_set",
    "use_rel_reward",
    "asset_dir",
    "gripper_action",
    "grasp_check",
    "render_scale",
)
# Keys only the PutOnPlateInScene25 tasks read (see vla_envs.maniskill.put_on_plate and put_on_plate_cost).
PUT_ON_PLATE_KEYS = (
    "obj_set",
    "use_rel_reward",
    "asset_dir",
    "gripper_action",
    "grasp_check",
    "render_scale",
)


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ValueError(f"EnvConfig.{key}={value!r} is invalid for env_type='maniskill': {allowed}")


@dataclass(frozen=True)
class ManiSkillOptions:
    """Resolved ManiSkill settings.

    Attributes:
        task: ManiSkill env id (e.g. "PickCube-v1").
        sim_backend: "cpu" (one env per subprocess worker) or "gpu" (all envs in one GPU process).
        control_mode: Panda controller; "pd_ee_delta_pose" gives 7-D [dx, dy, dz, drx, dry, drz, gripper] in [-1, 1].
        reward_mode: "sparse" (success), "dense" or "normalized_dense" (ManiSkill's shaped rewards).
        states: "proprio" (tcp pose [7] + qpos [9] = 16-D) or "privileged" (ManiSkill's flat `state` obs: agent
            qpos/qvel plus task extras such as object and goal poses).
        camera: Sensor name of the main camera.
        wrist: Return the Panda hand camera as `wrist_images` (switches the robot to `panda_wristcam`).
        image_hw: (H, W) of every camera.
        render: Render cameras (False: obs_mode "state_dict"/"none", images [B, 0, 0, 3]).
        task_description: Instruction override (needed for a ManiSkill env not listed in `TASKS`).
        robot_uids: Robot override (None: the task default, or panda_wristcam when `wrist`).
        env_kwargs: More keyword arguments for `gym.make`.
        obj_set: PutOnPlateInScene25 tasks: the objects/overlays/instructions drawn, "train", "test" (the
            out-of-distribution set) or "all".
        use_rel_reward: PutOnPlateInScene25 tasks: reward = change of the per-step reward since the last step.
        asset_dir: PutOnPlateInScene25 tasks: the folder holding data/ and carrot/ (sets MS_ASSET_DIR and
            MANISKILL_ASSET_DIR in the process that builds the env); None: the environment's variables.
        tasks: PutOnPlateInScene25 tasks: every task of a `task_set` (rows switch between them; CPU backend).
        gripper_action: PutOnPlateInScene25 tasks: "threshold" (the reference's widowx_bridge policy setup:
            the 7th action in [0, 1], above 0.5 opens, else closes) or "signed" (the controller's [-1, 1]).
    """

    task: str
    sim_backend: str = "cpu"
    control_mode: str = "pd_ee_delta_pose"
    reward_mode: str = "sparse"
    states: str = "proprio"
    camera: str = DEFAULT_CAMERA
    wrist: bool = False
    image_hw: tuple[int, int] = (128, 128)
    render: bool = True
    task_description: str | None = None
    robot_uids: str | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    obj_set: str = "train"
    use_rel_reward: bool = True
    asset_dir: str | None = None
    gripper_action: str = "threshold"
    tasks: tuple[str, ...] = ()
    grasp_check: str = "source"
    render_scale: float = 1.0

    @property
    def task_list(self) -> list[str]:
        """Every task of the env: `tasks` (a PutOnPlateInScene25 set), else [task]."""
        return list(self.tasks) or [self.task]

    @property
    def put_on_plate(self) -> bool:
        """The task is one of the reference's PutOnPlateInScene25 family (WidowX, its own controller)."""
        return is_put_on_plate(self.task)

    @property
    def action_dim(self) -> int:
        """A."""
        return 7 if self.put_on_plate else CONTROL_MODES[self.control_mode]

    @property
    def action_bounds(self) -> tuple[Any, Any]:
        """float32 [A] low and high of the action space."""
        import numpy as np

        if self.put_on_plate:
            low, high = ACTION_LOW.copy(), ACTION_HIGH.copy()
            if self.gripper_action == "threshold":
                low[6] = 0.0
            return low, high
        return -np.ones(self.action_dim, dtype=np.float32), np.ones(self.action_dim, dtype=np.float32)

    @property
    def obs_mode(self) -> str:
        """ManiSkill obs_mode: "rgb" (+ "+state" for privileged states), or "state" / "none" without rendering."""
        state = self.states == "privileged"
        if self.render:
            return "rgb+state" if state else "rgb"
        return "state" if state else "none"

    def make_kwargs(self, num_envs: int) -> dict[str, Any]:
        """Keyword arguments for `gym.make(self.task, ...)`."""
        if self.put_on_plate:  # the task's own sensor (640 x 480), controller and reward ("none")
            return {
                "num_envs": num_envs,
                "obs_mode": "rgb+segmentation",
                "reward_mode": "none",
                "sim_backend": self.sim_backend,
                "render_mode": None,
                "sensor_configs": {"shader_pack": "default"},
                "obj_set": self.obj_set,
                **self.env_kwargs,
            }
        h, w = self.image_hw
        kwargs: dict[str, Any] = {
            "num_envs": num_envs,
            "obs_mode": self.obs_mode,
            "control_mode": self.control_mode,
            "reward_mode": self.reward_mode,
            "sim_backend": self.sim_backend,
            "render_mode": None,
        }
        if self.render:
            kwargs["sensor_configs"] = {"width": int(w), "height": int(h)}
        robot = self.robot_uids or ("panda_wristcam" if self.wrist else None)
        if robot is not None:
            kwargs["robot_uids"] = robot
        kwargs.update(self.env_kwargs)
        return kwargs


def resolve_options(cfg: EnvConfig) -> ManiSkillOptions:
    """Read and validate the ManiSkill settings of `cfg`.

    Raises:
        ValueError: naming the key, the bad value and what is allowed.
    """
    extra = dict(cfg.extra)
    check_extra_keys(extra, EXTRA_KEYS, "maniskill")
    tasks: tuple[str, ...] = ()
    if cfg.task_set is not None:
        several = not isinstance(cfg.task_set, str) and len(cfg.task_set) > 1
        if several and all(is_put_on_plate(str(t)) for t in cfg.task_set):
            tasks = tuple(str(t) for t in cfg.task_set)  # rows switch between these envs (CPU backend)
            if len(set(tasks)) != len(tasks):
                _fail("task_set", cfg.task_set, "distinct PutOnPlateInScene25 task ids")
        elif isinstance(cfg.task_set, str) or len(cfg.task_set) != 1:
            _fail(
                "task_set",
                cfg.task_set,
                "ManiSkill runs one task per env; set task='PickCube-v1' (or a one-item list); only the "
                "PutOnPlateInScene25 tasks form a set (CPU backend), e.g. the guides' evaluation splits",
            )
        task = cfg.task_set[0]
    else:
        task = cfg.task
    if not task:
        _fail("task", task, "a ManiSkill env id such as 'PickCube-v1' (see vla_envs.list_tasks('maniskill'))")
    sim_backend = extra.get("sim_backend", "cpu")
    if sim_backend not in SIM_BACKENDS:
        _fail("extra['sim_backend']", sim_backend, f"one of {SIM_BACKENDS}")
    if is_put_on_plate(task):
        if len(tasks) > 1 and sim_backend != "cpu":
            _fail(
                "task_set",
                list(tasks),
                "one task with sim_backend='gpu' (one batched env); use 'cpu' for a set",
            )
        return _resolve_put_on_plate(cfg, task, extra, sim_backend, tasks or (task,))
    for key in PUT_ON_PLATE_KEYS:
        if key in extra:
            _fail(
                f"extra[{key!r}]",
                extra[key],
                f"only the PutOnPlateInScene25 tasks read it, not task={task!r}",
            )
    control_mode = extra.get("control_mode", "pd_ee_delta_pose")
    if control_mode not in CONTROL_MODES:
        _fail("extra['control_mode']", control_mode, f"one of {sorted(CONTROL_MODES)}")
    reward_mode = extra.get("reward_mode", cfg.reward_mode)
    if reward_mode not in REWARD_MODES:
        _fail("extra['reward_mode']", reward_mode, f"one of {REWARD_MODES}")
    states = extra.get("states", "proprio")
    if states not in STATE_MODES:
        _fail("extra['states']", states, f"one of {STATE_MODES}")
    camera = DEFAULT_CAMERA if cfg.camera in _DEFAULT_CAMERA_ALIASES else cfg.camera
    if camera == WRIST_CAMERA:
        _fail(
            "camera",
            cfg.camera,
            f"the main camera must be a fixed camera (e.g. {DEFAULT_CAMERA!r}); use wrist_camera",
        )
    if cfg.wrist_camera not in (None, WRIST_CAMERA):
        _fail("wrist_camera", cfg.wrist_camera, f"None or {WRIST_CAMERA!r} (the Panda hand camera)")
    if cfg.action_repeat != 1 and sim_backend == "gpu":
        _fail(
            "action_repeat",
            cfg.action_repeat,
            "1 with sim_backend='gpu' (use ManiSkill's sim_config instead)",
        )
    env_kwargs = extra.get("env_kwargs", {})
    if not isinstance(env_kwargs, dict):
        _fail("extra['env_kwargs']", env_kwargs, "a dict of keyword arguments for gym.make")
    return ManiSkillOptions(
        task=task,
        sim_backend=sim_backend,
        control_mode=control_mode,
        reward_mode=reward_mode,
        states=states,
        camera=camera,
        wrist=cfg.wrist_camera is not None,
        image_hw=cfg.image_hw,
        render=cfg.render,
        task_description=extra.get("task_description"),
        robot_uids=extra.get("robot_uids"),
        env_kwargs=dict(env_kwargs),
    )


def _resolve_put_on_plate(
    cfg: EnvConfig, task: str, extra: dict[str, Any], sim_backend: str, tasks: tuple[str, ...]
) -> ManiSkillOptions:
    """Settings of the PutOnPlateInScene25 tasks: their own camera, robot, controller and reward."""
    if extra.get("control_mode") is not None:
        _fail(
            "extra['control_mode']",
            extra["control_mode"],
            f"unset: {task} uses its own WidowX controller (7-D)",
        )
    for key in ("robot_uids", "task_description"):
        if extra.get(key) is not None:
            _fail(f"extra[{key!r}]", extra[key], f"unset: {task} sets its own robot and instruction")
    reward_mode = extra.get("reward_mode", cfg.reward_mode)
    if reward_mode not in ("sparse", "dense"):
        _fail(
            "extra['reward_mode']",
            reward_mode,
            "'sparse' (success) or 'dense' (the reference's grasp-shaped reward) for the PutOnPlateInScene25 tasks",
        )
    if extra.get("states", "proprio") != "proprio":
        _fail("extra['states']", extra["states"], f"'proprio' (the WidowX joint positions) for {task}")
    if cfg.camera not in (None, "", "default", CAMERA):
        _fail("camera", cfg.camera, f"{CAMERA!r} (the task's only camera) or null")
    if cfg.wrist_camera is not None:
        _fail("wrist_camera", cfg.wrist_camera, f"null: {task} has no wrist camera")
    if not cfg.render:
        _fail("render", cfg.render, f"true: {task}'s observation is its rendered 3rd-view camera")
    if cfg.action_repeat != 1 and sim_backend == "gpu":
        _fail("action_repeat", cfg.action_repeat, "1 with sim_backend='gpu'")
    obj_set = extra.get("obj_set", "train")
    if obj_set not in OBJ_SETS:
        _fail(
            "extra['obj_set']", obj_set, f"one of {OBJ_SETS} (train objects, the held-out test set, or both)"
        )
    use_rel = extra.get("use_rel_reward", True)
    if not isinstance(use_rel, bool):
        _fail("extra['use_rel_reward']", use_rel, "true or false")
    asset_dir = extra.get("asset_dir")
    if asset_dir is not None and (not isinstance(asset_dir, str) or not asset_dir):
        _fail("extra['asset_dir']", asset_dir, "a folder holding data/ and carrot/, or null")
    gripper_action = extra.get("gripper_action", "threshold")
    if gripper_action not in GRIPPER_ACTIONS:
        _fail(
            "extra['gripper_action']",
            gripper_action,
            "'threshold' (action in [0, 1], > 0.5 opens: the reference's widowx_bridge setup) or 'signed' ([-1, 1])",
        )
    grasp_check = extra.get("grasp_check", "source")
    if grasp_check not in GRASP_CHECKS:
        _fail(
            "extra['grasp_check']",
            grasp_check,
            "'source' (the task's grasp flag asks only about the episode's object: same flags, cheaper) or 'all'",
        )
    render_scale = extra.get("render_scale", 1.0)
    problem = check_render_scale(render_scale)
    if problem is not None:
        _fail("extra['render_scale']", render_scale, problem)
    render_h, render_w = scaled_hw(render_scale)
    if render_h < cfg.image_hw[0] or render_w < cfg.image_hw[1]:
        _fail(
            "extra['render_scale']",
            render_scale,
            f"a scale whose render ({render_w} x {render_h}) is at least image_size {tuple(cfg.image_hw)}",
        )
    env_kwargs = extra.get("env_kwargs", {})
    if not isinstance(env_kwargs, dict):
        _fail("extra['env_kwargs']", env_kwargs, "a dict of keyword arguments for gym.make")
    return ManiSkillOptions(
        grasp_check=grasp_check,
        render_scale=float(render_scale),
        gripper_action=gripper_action,
        tasks=tasks,
        task=task,
        sim_backend=sim_backend,
        control_mode="pd_ee_target_delta_pose",  # unused: the task's own controller is kept
        reward_mode=reward_mode,
        states="proprio",
        camera=CAMERA,
        wrist=False,
        image_hw=cfg.image_hw,
        render=True,
        env_kwargs=dict(env_kwargs),
        obj_set=obj_set,
        use_rel_reward=use_rel,
        asset_dir=asset_dir,
    )


def check_offload(cfg: EnvConfig) -> None:
    """Offload (stop and rebuild the simulators between phases) needs the CPU backend: the GPU backend simulates
    every row inside the caller's process, where PhysX's GPU state cannot be released and built again.

    Raises:
        ValueError: with `extra['sim_backend']='gpu'`.
    """
    if resolve_options(cfg).sim_backend != "cpu":
        raise ValueError(
            "EnvConfig.extra['sim_backend']='gpu' cannot be offloaded (ManiSkill's GPU simulation runs in the env "
            "worker's own process, where its GPU memory cannot be released and rebuilt); offload works with "
            "sim_backend='cpu' (simulators in subprocess workers)"
        )
