"""RoboTwin-specific settings read from `EnvConfig` (its generic fields plus `extra`).

`extra` keys (the names of the reference configs where it has them): `task_config` (RoboTwin's task
configuration; merged over `DEFAULT_TASK_CONFIG`), `assets_path` (else `$ROBOTWIN_ASSETS_ROOT`, `$ASSETS_PATH`,
the checkout), `robotwin_path` (a checkout; else `$ROBOTWIN_PATH`; unset: the installed `robotwin` package),
`robotwin_python` (the interpreter of RoboTwin's environment; else `$ROBOTWIN_PYTHON`, else this one),
`center_crop`, `reward_coef`, `use_rel_reward`, `seeds_path` (the reference's verified seed list, json),
`seed_base`, `instruction_type`, `instruction`, `chunk_execution`, `camera_shader`, `construct_timeout_s`, `call_timeout_s`.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from typing import Any

from vla_envs.config import EnvConfig, check_extra_keys
from vla_envs.robotwin.tasks import DENSE_REWARD_TASKS, check_task

ACTION_DIM = 14
STATE_DIM = 14
HEAD_CAMERA = "head_camera"
WRIST_CHOICES = ("both", "left", "right")
_DEFAULT_CAMERA_ALIASES = (None, "", "default", "head", HEAD_CAMERA)
# RoboTwin's task configuration as the reference config writes it (OpenVLA-OFT setting: two piper arms 0.6 m
# apart, D435 cameras, no wrist images). pi0/pi0.5 use embodiment ["aloha-agilex"] and collect_wrist_camera true.
DEFAULT_TASK_CONFIG: dict[str, Any] = {
    "task_name": None,
    "step_lim": 200,
    "embodiment": ["piper", "piper", 0.6],
    "planner_backend": "mplib",  # as every reference config; cuRobo needs CUDA just to build an env
    "render_freq": 0,
    "episode_num": 100,
    "use_seed": False,
    "save_freq": 15,
    "language_num": 100,
    "domain_randomization": {
        "random_background": True,
        "cluttered_table": True,
        "clean_background_rate": 0.02,
        "random_head_camera_dis": 0,
        "random_table_height": 0.03,
        "random_light": True,
        "crazy_random_light_rate": 0.02,
    },
    "camera": {
        "head_camera_type": "D435",
        "wrist_camera_type": "D435",
        "collect_head_camera": True,
        "collect_wrist_camera": False,
    },
    "data_type": {
        "rgb": True,
        "third_view": False,
        "depth": False,
        "pointcloud": False,
        "observer": False,
        "endpose": False,
        "qpos": True,
        "mesh_segmentation": False,
        "actor_segmentation": False,
    },
    "pcd_down_sample_num": 1024,
    "pcd_crop": True,
    "save_path": "./data",
    "clear_cache_freq": 8,
    "collect_data": True,
    "eval_video_log": False,
}
EXTRA_KEYS = (
    "task_config",
    "assets_path",
    "robotwin_path",
    "center_crop",
    "reward_coef",
    "use_rel_reward",
    "seeds_path",
    "seed_base",
    "instruction_type",
    "instruction",
    "robotwin_python",
    "chunk_execution",
    "camera_shader",
    "construct_timeout_s",
    "call_timeout_s",
)
CHUNK_EXECUTION = ("chunk", "position")
# Native (H, W) of RoboTwin's head camera types (its _camera_config.yml).
CAMERA_HW = {"D435": (240, 320), "L515": (180, 320), "Large_D435": (480, 640), "Large_L515": (360, 640)}
# Seeds when no seeds_path is given: training draws from seed_base + [0, num_trials_per_task); the reference
# framework's evaluation seeds start at EVAL_SEED_BASE, so an eval section should set seed_base to it.
TRAIN_SEED_BASE = 100000
EVAL_SEED_BASE = 100100000
SEVEN_DOF_EMBODIMENTS = ("franka-panda",)


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ValueError(f"EnvConfig.{key}={value!r} is invalid for env_type='robotwin': {allowed}")


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass(frozen=True)
class RoboTwinOptions:
    """Resolved RoboTwin settings.

    Attributes:
        task: Task name (one of the 46 supported).
        task_config: RoboTwin task configuration passed to its vector env (`task_name`, `step_lim`,
            `embodiment`, `camera`, ...).
        robotwin_path: RoboTwin checkout (the RLinf_support branch), or None when unset.
        assets_path: Directory holding RoboTwin's downloaded `assets/` (embodiments, objects, textures).
        image_hw: (H, W) of the returned head (and wrist) images; RoboTwin policies use 224 x 224.
        center_crop: Crop the central 90% of the image area before resizing (OpenVLA-OFT preprocessing;
            pi0/pi0.5 configs set it False).
        wrist: Which wrist images to return: None, "both" (left then right), "left" or "right".
        reward_coef: Reward of a success step.
        use_rel_reward: Reward the change of `reward_coef * success` instead (RLinf's `use_rel_reward`).
        seed_base: RoboTwin seed of trial t is `seed_base + t` (RoboTwin moves on to the next seed by itself
            when a seed gives an unstable scene).
        instruction_type: RoboTwin instruction set ("seen" or "unseen").
        instruction: One instruction for every episode instead of RoboTwin's, which it words anew for each
            episode from 50 templates and the object's own description; None (the default): RoboTwin's. For a
            policy without language pretraining, whose per-episode wording is a cue it can memorise in place of
            the picture (`benchmarks/robotwin_arm_cue.py`). Pictures, states, rewards and success are unchanged.
        dense_reward: Pay RoboTwin's dense task reward (`reward_mode: dense`, DENSE_REWARD_TASKS): after each
            RoboTwin step, `reward_coef` times the task's normalised reward level in [0, 1] (1 once it succeeded).
    """

    task: str
    task_config: dict[str, Any] = field(default_factory=dict)
    robotwin_path: str | None = None
    assets_path: str | None = None
    image_hw: tuple[int, int] = (224, 224)
    center_crop: bool = True
    wrist: str | None = None
    reward_coef: float = 1.0
    use_rel_reward: bool = False
    dense_reward: bool = False
    seed_base: int = TRAIN_SEED_BASE
    seeds: tuple[int, ...] | None = None
    instruction_type: str = "seen"
    instruction: str | None = None
    robotwin_python: str | None = None
    chunk_execution: str = "chunk"
    camera_shader: str | None = None
    construct_timeout_s: float = 900.0
    call_timeout_s: float = 600.0

    @property
    def num_wrist_images(self) -> int:
        """K of `wrist_images` [B, K, H, W, 3] (0 = None)."""
        return {None: 0, "both": 2, "left": 1, "right": 1}[self.wrist]


def resolve_options(cfg: EnvConfig) -> RoboTwinOptions:
    """Read and validate the RoboTwin settings of `cfg` (no RoboTwin import).

    Raises:
        ValueError: naming the key, the bad value and what is allowed; an unsupported task.
    """
    extra = dict(cfg.extra)
    check_extra_keys(extra, EXTRA_KEYS, "robotwin")
    user_tc = extra.get("task_config", {})
    if not isinstance(user_tc, dict):
        _fail("extra['task_config']", user_tc, "a dict (RoboTwin's task configuration)")
    if cfg.task_set is not None:
        _fail(
            "task_set",
            cfg.task_set,
            "RoboTwin runs one task per env; set task or extra['task_config']['task_name']",
        )
    task = cfg.task or user_tc.get("task_name")
    if cfg.task and user_tc.get("task_name") not in (None, cfg.task):
        _fail(
            "task", cfg.task, f"the same task as extra['task_config']['task_name']={user_tc['task_name']!r}"
        )
    if not task:
        _fail(
            "task", task, "a RoboTwin task name, e.g. 'place_empty_cup' (see vla_envs.list_tasks('robotwin'))"
        )
    check_task(task)
    tc = _merge(DEFAULT_TASK_CONFIG, user_tc)
    tc["task_name"] = task
    if not isinstance(tc["step_lim"], int) or tc["step_lim"] < 1:
        _fail("extra['task_config']['step_lim']", tc["step_lim"], "an int >= 1")
    emb = tc["embodiment"]
    ok_one = isinstance(emb, list) and len(emb) == 1 and isinstance(emb[0], str)
    ok_three = (
        isinstance(emb, list) and len(emb) == 3 and all(isinstance(e, str) for e in emb[:2])
        and isinstance(emb[2], (int, float))
    )  # fmt: skip
    if not (ok_one or ok_three):
        _fail(
            "extra['task_config']['embodiment']", emb,
            "[name] (one dual-arm robot, e.g. ['aloha-agilex']) or [left, right, distance] (e.g. ['piper', 'piper', 0.6])",
        )  # fmt: skip
    camera = tc["camera"]
    for key in ("head_camera_type", "wrist_camera_type"):
        if not isinstance(camera.get(key), str):
            _fail(
                f"extra['task_config']['camera']['{key}']",
                camera.get(key),
                "a RoboTwin camera type, e.g. 'D435'",
            )
    if not isinstance(camera.get("collect_wrist_camera"), bool):
        _fail(
            "extra['task_config']['camera']['collect_wrist_camera']",
            camera.get("collect_wrist_camera"),
            "true/false",
        )
    if cfg.camera not in _DEFAULT_CAMERA_ALIASES:
        _fail("camera", cfg.camera, f"{HEAD_CAMERA!r} (wrist images come from wrist_camera)")
    wrist = cfg.wrist_camera
    if wrist is not None and wrist not in WRIST_CHOICES:
        _fail("wrist_camera", wrist, f"None or one of {WRIST_CHOICES}")
    # one setting under two names: collect_wrist_camera true alone means both wrist cameras; a wrist camera with
    # collect_wrist_camera given false is a contradiction
    if wrist is not None and (user_tc.get("camera") or {}).get("collect_wrist_camera") is False:
        _fail(
            "wrist_camera", wrist,
            "None while extra['task_config']['camera']['collect_wrist_camera'] is false: they are one setting "
            "(set collect_wrist_camera true, or wrist_camera None)",
        )  # fmt: skip
    if wrist is None and camera["collect_wrist_camera"]:
        wrist = "both"
    camera["collect_wrist_camera"] = wrist is not None
    if cfg.reward_mode == "dense" and task not in DENSE_REWARD_TASKS:
        _fail(
            "reward_mode", cfg.reward_mode,
            f"'sparse' for {task!r}: RoboTwin defines a dense reward for {list(DENSE_REWARD_TASKS)} only",
        )  # fmt: skip
    if cfg.reward_mode == "dense" and extra.get("use_rel_reward"):
        _fail(
            "extra['use_rel_reward']", extra.get("use_rel_reward"),
            "false with reward_mode 'dense' (RoboTwin's dense reward is a level; the relative reward is defined for "
            "success)",
        )  # fmt: skip
    for key in ("collect_head_camera",):
        if camera.get(key) is not True:
            _fail(
                f"extra['task_config']['camera']['{key}']",
                camera.get(key),
                "true (images come from the head camera)",
            )
    for key in ("rgb", "qpos"):
        if tc["data_type"].get(key) is not True:
            _fail(
                f"extra['task_config']['data_type']['{key}']",
                tc["data_type"].get(key),
                "true (images and states)",
            )
    names = emb[:1] if len(emb) == 1 else emb[:2]
    seven = [n for n in names if n in SEVEN_DOF_EMBODIMENTS]
    if seven:
        _fail(
            "extra['task_config']['embodiment']", emb,
            f"6-DOF arms ({seven} have 7 joints; the 14-D actions and states need 6 + 1 gripper per arm)",
        )  # fmt: skip
    center = extra.get("center_crop", True)
    if not isinstance(center, bool):
        _fail("extra['center_crop']", center, "true/false")
    native = CAMERA_HW.get(camera["head_camera_type"])
    if not center and native is not None and cfg.image_hw != native:
        _fail(
            "image_size", cfg.image_size,
            f"the native {list(native)} of the {camera['head_camera_type']} camera when extra['center_crop'] is "
            "false (the frame is kept as RoboTwin renders it, as the reference feeds pi0); or center_crop true",
        )  # fmt: skip
    chunk_execution = extra.get("chunk_execution", "chunk")
    if chunk_execution not in CHUNK_EXECUTION:
        _fail("extra['chunk_execution']", chunk_execution, f"one of {CHUNK_EXECUTION}")
    shader = extra.get("camera_shader")
    if shader is not None and not isinstance(shader, str):
        _fail(
            "extra['camera_shader']",
            shader,
            "null (RoboTwin's ray tracing) or a SAPIEN shader, e.g. 'default'",
        )
    timeouts = {}
    for key, default in (("construct_timeout_s", 900.0), ("call_timeout_s", 600.0)):
        value = extra.get(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            _fail(f"extra['{key}']", value, "seconds > 0")
        timeouts[key] = float(value)
    seeds = _read_seeds(extra.get("seeds_path"), task, cfg.num_trials_per_task)
    robotwin_path = extra.get("robotwin_path") or os.environ.get("ROBOTWIN_PATH") or None
    assets_path = (
        extra.get("assets_path")
        or os.environ.get("ROBOTWIN_ASSETS_ROOT")
        or os.environ.get("ASSETS_PATH")
        or robotwin_path
    )
    return RoboTwinOptions(
        task=task,
        task_config=tc,
        robotwin_path=robotwin_path,
        assets_path=assets_path,
        image_hw=cfg.image_hw,
        center_crop=center,
        wrist=wrist,
        reward_coef=float(extra.get("reward_coef", 1.0)),
        use_rel_reward=bool(extra.get("use_rel_reward", False)),
        dense_reward=cfg.reward_mode == "dense",
        seed_base=int(extra.get("seed_base", TRAIN_SEED_BASE)),
        seeds=seeds,
        instruction_type=str(extra.get("instruction_type", "seen")),
        instruction=_instruction(extra.get("instruction")),
        robotwin_python=extra.get("robotwin_python") or os.environ.get("ROBOTWIN_PYTHON") or None,
        chunk_execution=chunk_execution,
        camera_shader=shader,
        **timeouts,
    )


def _instruction(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        _fail(
            "extra['instruction']",
            value,
            "a non-empty string (every episode's instruction) or null (RoboTwin's own)",
        )
    return value


def _read_seeds(path: Any, task: str, num_trials: int) -> tuple[int, ...] | None:
    """The first `num_trials` seeds of `task` in a seed list of the reference framework
    (`{task: {"success_seeds": [...]}}`, e.g. its train_seeds.json / eval_seeds.json), or None without a path."""
    if path is None:
        return None
    file = os.path.expanduser(str(path))
    if not os.path.isfile(file):
        _fail("extra['seeds_path']", path, "an existing json seed list ({task: {'success_seeds': [...]}})")
    with open(file, encoding="utf-8") as f:
        data = json.load(f)
    seeds = (data.get(task) or {}).get("success_seeds") if isinstance(data, dict) else None
    if not isinstance(seeds, list) or not all(isinstance(x, int) for x in seeds):
        _fail("extra['seeds_path']", path, f"a json seed list with {task!r}: {{'success_seeds': [int, ...]}}")
    if num_trials > len(seeds):
        _fail(
            "num_trials_per_task", num_trials,
            f"at most the {len(seeds)} seeds that extra['seeds_path'] lists for {task!r}",
        )  # fmt: skip
    return tuple(seeds[:num_trials])
