"""LIBERO-specific settings read from `EnvConfig` (its generic fields plus `extra`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vla_envs.config import EnvConfig, check_extra_keys

MAIN_CAMERA = "agentview"
WRIST_CAMERA = "robot0_eye_in_hand"
# Camera names that mean "the adapter's default camera" (EnvConfig.camera=None is the default).
_DEFAULT_CAMERA_ALIASES = (None, "", "default", MAIN_CAMERA)
_WRIST_ALIASES = ("wrist", "eye_in_hand", WRIST_CAMERA)
# "rotate180": img[::-1, ::-1], the preprocessing of OpenVLA / OpenVLA-OFT / RLinf LIBERO checkpoints;
# "vertical": img[::-1], the geometrically faithful view (OpenGL rows run bottom-up). Both are upright.
IMAGE_FLIPS = ("rotate180", "vertical")
#: Where a trial's start comes from (`extra['init_states']`): "fixed", LIBERO's 50 saved initial states per task
#: (trial = index); "sampled", LIBERO's own start sampler seeded by (task, trial), any number of trials.
INIT_STATE_MODES = ("fixed", "sampled")
#: Initial states every task of the five standard suites ships (the `.pruned_init` files).
FIXED_INIT_STATES = 50
MAX_IMAGE_SIDE = 1024
EXTRA_KEYS = (
    "num_settle_steps",
    "settle_gripper",
    "reward_coef",
    "step_penalty",
    "use_rel_reward",
    "image_flip",
    "task_cache_size",
    "init_states",
    "lazy_render",
    "render_mesh_grid",
)


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ValueError(f"EnvConfig.{key}={value!r} is invalid for env_type='libero': {allowed}")


@dataclass(frozen=True)
class LiberoOptions:
    """Resolved LIBERO settings.

    Attributes:
        image_hw: (H, W) of both cameras (LIBERO policies use 128 or 224; 256 for OpenVLA's regenerated data).
        wrist: Also render the wrist camera (`wrist_images` [B, 1, H, W, 3]).
        render: Render cameras (False: `images` [B, 0, 0, 3], about 7x faster steps).
        num_settle_steps: No-op steps after placing the initial state, before the first observation (objects
            settle; LIBERO policies are trained and evaluated with 10). They do not count as episode steps.
        settle_gripper: Gripper command of the no-op settle action (-1 = open, LIBERO's convention).
        reward_coef: Reward of a success decision.
        step_penalty: Subtracted from every decision's reward (0 = pure sparse reward).
        use_rel_reward: Reward the change of `reward_coef * success` (RLinf's `use_rel_reward`): +coef when
            success is reached, -coef if it is lost, 0 otherwise. Matters with `ignore_terminations=True`.
        image_flip: How raw (upside-down) frames are made upright, one of `IMAGE_FLIPS`.
        task_cache_size: LIBERO envs (one per task) kept alive per batch row in multi-task sets.
        init_states: One of `INIT_STATE_MODES`. "fixed": trial t is LIBERO's saved initial state t of the task
            (`num_trials_per_task` at most `FIXED_INIT_STATES`). "sampled": trial t is a fresh draw of LIBERO's own
            start sampler, seeded by (task, trial): the BDDL regions' object and fixture placements, the
            articulated objects' initial ranges (an open drawer is 14-16 cm out) and robosuite's default joint noise
            (Gaussian, 0.02 rad) on the arm, the distribution LIBERO's saved states were drawn from (they carry that
            joint spread). Distinct trial ranges then give disjoint training, held-out and demo starts.
        lazy_render: Render a camera only for the frames an observation returns (`vla_envs.libero.render`): the
            images are bit-identical to rendering at every control step, as robosuite does, which costs one render
            per control step (`action_repeat` per decision, plus the settle steps).
        render_mesh_grid: Metres (0: off). Draw every mesh with its vertices merged on a grid of this size, each
            face keeping its own corner normals (`vla_envs.metaworld.meshes.simplify_drawn_meshes`); collision
            shapes, masses and inertias stay as compiled, so physics, rewards and success are unchanged. The
            pictures change a little (5 mm: 1.5 grey levels on average at 64 px), so it is off unless set.
    """

    image_hw: tuple[int, int] = (128, 128)
    wrist: bool = False
    render: bool = True
    num_settle_steps: int = 10
    settle_gripper: float = -1.0
    reward_coef: float = 1.0
    step_penalty: float = 0.0
    use_rel_reward: bool = False
    image_flip: str = "rotate180"
    task_cache_size: int = 2
    init_states: str = "fixed"
    lazy_render: bool = True
    render_mesh_grid: float = 0.0

    @property
    def cameras(self) -> list[str]:
        """robosuite camera names to render."""
        if not self.render:
            return []
        return [MAIN_CAMERA] + ([WRIST_CAMERA] if self.wrist else [])

    @property
    def settle_action(self) -> list[float]:
        """The 7-D no-op action of the settle steps."""
        return [0.0] * 6 + [float(self.settle_gripper)]


def resolve_options(cfg: EnvConfig) -> LiberoOptions:
    """Read and validate the LIBERO settings of `cfg`.

    Raises:
        ValueError: naming the key, the bad value and what is allowed.
    """
    extra = dict(cfg.extra)
    check_extra_keys(extra, EXTRA_KEYS, "libero")
    if cfg.reward_mode != "sparse":
        _fail(
            "reward_mode", cfg.reward_mode, "'sparse' (LIBERO has no dense reward; see extra['step_penalty'])"
        )
    if cfg.camera not in _DEFAULT_CAMERA_ALIASES:
        _fail("camera", cfg.camera, f"{MAIN_CAMERA!r} (the main camera; the wrist camera is wrist_camera)")
    if cfg.wrist_camera is not None and cfg.wrist_camera not in _WRIST_ALIASES:
        _fail("wrist_camera", cfg.wrist_camera, f"None or {WRIST_CAMERA!r}")
    h, w = cfg.image_hw
    if max(h, w) > MAX_IMAGE_SIDE:
        _fail("image_size", cfg.image_size, f"at most {MAX_IMAGE_SIDE} px")
    num_settle = extra.get("num_settle_steps", 10)
    if not isinstance(num_settle, int) or num_settle < 0:
        _fail("extra['num_settle_steps']", num_settle, "an int >= 0")
    settle_gripper = float(extra.get("settle_gripper", -1.0))
    if not -1.0 <= settle_gripper <= 1.0:
        _fail("extra['settle_gripper']", settle_gripper, "a value in [-1, 1] (-1 = open)")
    step_penalty = float(extra.get("step_penalty", 0.0))
    if step_penalty < 0:
        _fail("extra['step_penalty']", step_penalty, "a value >= 0 (it is subtracted)")
    image_flip = extra.get("image_flip", "rotate180")
    if image_flip not in IMAGE_FLIPS:
        _fail("extra['image_flip']", image_flip, f"one of {IMAGE_FLIPS}")
    cache = extra.get("task_cache_size", 2)
    if not isinstance(cache, int) or cache < 1:
        _fail("extra['task_cache_size']", cache, "an int >= 1")
    init_states = extra.get("init_states", "fixed")
    if init_states not in INIT_STATE_MODES:
        _fail("extra['init_states']", init_states, f"one of {INIT_STATE_MODES}")
    if init_states == "fixed" and cfg.num_trials_per_task > FIXED_INIT_STATES:
        _fail(
            "num_trials_per_task",
            cfg.num_trials_per_task,
            f"at most {FIXED_INIT_STATES}: every LIBERO task has {FIXED_INIT_STATES} fixed initial states "
            "(extra['init_states']='sampled' draws any number of starts from LIBERO's start sampler)",
        )
    lazy_render = extra.get("lazy_render", True)
    if not isinstance(lazy_render, bool):
        _fail("extra['lazy_render']", lazy_render, "true or false")
    grid = extra.get("render_mesh_grid", 0.0)
    if isinstance(grid, bool) or not isinstance(grid, int | float) or not 0.0 <= grid <= 0.05:
        _fail("extra['render_mesh_grid']", grid, "metres in [0, 0.05] (0: meshes drawn as loaded)")
    return LiberoOptions(
        image_hw=(int(h), int(w)),
        wrist=cfg.wrist_camera is not None,
        render=cfg.render,
        num_settle_steps=num_settle,
        settle_gripper=settle_gripper,
        reward_coef=float(extra.get("reward_coef", 1.0)),
        step_penalty=step_penalty,
        use_rel_reward=bool(extra.get("use_rel_reward", False)),
        image_flip=image_flip,
        task_cache_size=cache,
        init_states=init_states,
        lazy_render=lazy_render,
        render_mesh_grid=float(grid),
    )
