"""MetaWorld-specific settings read from `EnvConfig` (its generic fields plus `extra`), with their defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vla_envs.config import EnvConfig, check_extra_keys

CAMERAS = ("corner", "corner2", "corner3", "corner4", "topview", "behindGripper", "gripperPOV")
#: The main camera when `EnvConfig.camera` is None.
DEFAULT_CAMERA = "corner2"
MAX_IMAGE_SIDE = 1024
#: `EnvConfig.extra` keys MetaWorld reads.
EXTRA_KEYS = ("task_cache_size", "hide_far_meshes", "render_mesh_grid", "states", "progress_reward")
#: What `states` holds (`extra['states']`). MetaWorld's observation is 39-D: hand xyz [0:3], gripper opening [3],
#: the objects' poses now [4:18] and one control step earlier [18:36], the goal xyz [36:39] (zero where the task
#: set hides the goal).
STATE_MODES = ("full", "hand_goal")
#: `hand_goal` picks these entries of the 39-D observation: hand xyz, gripper opening, goal xyz (7-D).
HAND_GOAL_INDICES = (0, 1, 2, 3, 36, 37, 38)


@dataclass(frozen=True)
class MetaWorldOptions:
    """Resolved MetaWorld settings.

    Attributes:
        camera: Main camera, one of `CAMERAS` (`EnvConfig.camera`; None gives `DEFAULT_CAMERA`).
        wrist_camera: Second camera returned as `wrist_images`, or None.
        hide_far_meshes: Hide the robot base/pedestal/head meshes (`extra['hide_far_meshes']`; about 2x faster
            renders on llvmpipe; the arm and the scene are unchanged).
        render_mesh_grid: `extra['render_mesh_grid']`, metres (0: off): draw the meshes with their vertices merged
            on a grid of this size (`vla_envs.metaworld.meshes`; 0.005 makes a 64 px drawer-close step about 25%
            faster on llvmpipe, `benchmarks/render_mesh_grid.py`, with the images 0.12 grey levels apart on
            average; the physics is untouched).
        task_cache_size: Simulators of distinct tasks kept alive per batch row (`extra['task_cache_size']`).
        states: `extra['states']`, one of `STATE_MODES`: "full" (MetaWorld's 39-D observation) or "hand_goal"
            (7-D: hand xyz, gripper opening, goal xyz; the goal is what tells a reach or push target apart, and it
            is not drawn in the image).
        progress_reward: `extra['progress_reward']`, a coefficient >= 0 (0: off). With `reward_mode='sparse'` each
            decision's reward becomes its success (0 or 1) plus this coefficient times the change of the task's
            progress, MetaWorld's shaped reward of the state scaled to [0, 1] (potential-based shaping: an
            episode's progress terms sum to its last state's progress minus its first's, so lingering near the
            goal earns nothing, and with a coefficient below 1 an episode that ends in success is worth more than
            any that does not).
    """

    camera: str = DEFAULT_CAMERA
    wrist_camera: str | None = None
    hide_far_meshes: bool = False
    render_mesh_grid: float = 0.0
    task_cache_size: int = 4
    states: str = "full"
    progress_reward: float = 0.0


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ValueError(f"EnvConfig.{key}={value!r} is invalid for env_type='metaworld': {allowed}")


def resolve_options(cfg: EnvConfig) -> MetaWorldOptions:
    """Read and validate the MetaWorld settings of `cfg` (no simulator import).

    Raises:
        ValueError: an unknown camera, a too large image, a bad or unknown `extra` key (named, with what is
            allowed).
    """
    check_extra_keys(cfg.extra, EXTRA_KEYS, "metaworld")
    camera = DEFAULT_CAMERA if cfg.camera is None else cfg.camera
    for key, value in (("camera", camera), ("wrist_camera", cfg.wrist_camera)):
        if value is not None and value not in CAMERAS:
            raise ValueError(
                f"EnvConfig.{key}={value!r} is not a MetaWorld camera; valid cameras: {list(CAMERAS)}"
            )
    h, w = cfg.image_hw
    if max(h, w) > MAX_IMAGE_SIDE:
        raise ValueError(f"EnvConfig.image_size={cfg.image_size!r} is too large: at most {MAX_IMAGE_SIDE} px")
    hide = cfg.extra.get("hide_far_meshes", False)
    if not isinstance(hide, bool):
        _fail("extra['hide_far_meshes']", hide, "true or false")
    grid = cfg.extra.get("render_mesh_grid", 0.0)
    if isinstance(grid, bool) or not isinstance(grid, (int, float)) or not 0 <= grid <= 0.05:
        _fail(
            "extra['render_mesh_grid']",
            grid,
            "a cell size in metres, 0 <= x <= 0.05 (0: the meshes as loaded)",
        )
    cache = cfg.extra.get("task_cache_size", 4)
    if isinstance(cache, bool) or not isinstance(cache, int) or cache < 1:
        _fail("extra['task_cache_size']", cache, "an int >= 1")
    states = cfg.extra.get("states", "full")
    if states not in STATE_MODES:
        _fail("extra['states']", states, f"one of {list(STATE_MODES)}")
    progress = cfg.extra.get("progress_reward", 0.0)
    if isinstance(progress, bool) or not isinstance(progress, (int, float)) or not progress >= 0:
        _fail("extra['progress_reward']", progress, "a number >= 0 (0: off)")
    if progress > 0 and cfg.reward_mode != "sparse":
        _fail(
            "extra['progress_reward']",
            progress,
            f"0 with reward_mode={cfg.reward_mode!r}: it adds progress to the sparse success reward, "
            "and reward_mode='dense' already is MetaWorld's shaped reward",
        )
    return MetaWorldOptions(
        camera=camera,
        wrist_camera=cfg.wrist_camera,
        hide_far_meshes=hide,
        render_mesh_grid=float(grid),
        task_cache_size=cache,
        states=states,
        progress_reward=float(progress),
    )
