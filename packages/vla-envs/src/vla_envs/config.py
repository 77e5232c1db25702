"""Typed configuration for batched environments (`env.train` / `env.eval` in the app config)."""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vla_envs.registry import list_env_types

REWARD_MODES = ("sparse", "dense")
ACTION_OUT_OF_RANGE_MODES = ("clip", "error")
START_METHODS = ("forkserver", "spawn", "fork")


# `EnvConfig.extra` keys every adapter accepts: read by the shared VectorEnv / workers, not by the simulator.
GENERIC_EXTRA_KEYS = ("video_tag", "lp_num_threads")


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ValueError(f"EnvConfig.{key}={value!r} is invalid: {allowed}")


def _check_env_type(env_type: Any) -> None:
    """`env_type` must name a registered adapter; the message lists them (and the closest one to a typo)."""
    known = list_env_types()
    if env_type is None:
        raise ValueError(f"EnvConfig.env_type is required: one of: {', '.join(known)}")
    if env_type not in known:
        close = difflib.get_close_matches(str(env_type), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"EnvConfig.env_type={env_type!r} is not one of: {', '.join(known)}{hint}")


def check_extra_keys(extra: dict[str, Any], adapter_keys: tuple[str, ...], env_type: str) -> None:
    """Raise ValueError naming the `EnvConfig.extra` keys that neither `env_type`'s adapter nor the shared
    worker layer reads (a misspelt option must not be silently ignored)."""
    unknown = sorted(set(extra) - set(adapter_keys) - set(GENERIC_EXTRA_KEYS))
    if unknown:
        raise ValueError(
            f"EnvConfig.extra has unknown keys {unknown} for env_type={env_type!r}; known: "
            f"{list(adapter_keys + GENERIC_EXTRA_KEYS)}"
        )


@dataclass
class VideoConfig:
    """Episode video recording (`video_cfg` in the reference configs).

    Attributes:
        save_video: Record episodes to mp4 files.
        info_on_video: Draw step, reward and success on every frame.
        video_base_dir: Directory the mp4 files go to (created on demand).
        fps: Frames per second of the written files.
        max_envs: Record only the first `max_envs` rows of the batch (recording is not free on a CPU).
    """

    save_video: bool = False
    info_on_video: bool = True
    video_base_dir: str = "videos"
    fps: int = 20
    max_envs: int = 1

    def __post_init__(self) -> None:
        if self.fps <= 0:
            raise ValueError(f"VideoConfig.fps={self.fps!r} is invalid: must be > 0")
        if self.max_envs < 1:
            raise ValueError(f"VideoConfig.max_envs={self.max_envs!r} is invalid: must be >= 1")


@dataclass
class EnvConfig:
    """Everything needed to build one `BatchedEnv`. Simulator-specific settings and their defaults live with
    each adapter (its options, read from the fields below and from `extra`).

    Attributes:
        env_type: Registered simulator adapter ("metaworld", "maniskill", ...); required, one of
            `vla_envs.list_env_types()`.
        task: A single task name (`vla_envs.list_tasks(env_type)`). Exclusive with `task_set`.
        task_set: A named set of tasks of the adapter (e.g. MetaWorld's "MT10") or a list of task names.
            Batch row `i` runs task `tasks[(first_row + i) % len(tasks)]` unless `reset_state_ids` say otherwise;
            with `use_fixed_reset_state_ids` a whole group shares one: `tasks[((first_row + i) // group_size) %
            len(tasks)]`, so the groups take the tasks in turn (`row_tasks`).
        num_envs: Batch size B.
        first_row: Index of this batch's row 0 in a larger batch split over env ranks or pipeline stages, so
            the tasks go round the whole batch (every task trains even when a rank has fewer rows than tasks).
        envs_per_worker: Envs simulated in each subprocess worker; 0 runs every env in this process (debugging).
        start_method: multiprocessing start method for workers ("forkserver" or "spawn" are safe with torch
            loaded in the parent; "fork" is fastest to start but unsafe once threads exist).
        worker_timeout_s: Seconds to wait for one worker reply before treating the worker as hung.
        worker_start_timeout_s: Seconds to wait for a (re)started worker to build its simulators.
        image_size: Square image side in pixels (or (H, W)).
        camera: Main camera name; None: the adapter's default camera.
        wrist_camera: Optional second camera name returned as `wrist_images` [B, 1, H, W, 3]; None disables it.
        max_episode_steps: Policy decisions per episode before truncation.
        action_repeat: Simulator steps per policy action (the reward is summed, success is OR-ed).
        auto_reset: Reset envs whose episode ended inside `step`/`chunk_step` (same-step autoreset).
        ignore_terminations: Never end an episode on success; only `max_episode_steps` ends it.
        reward_mode: "sparse" (1.0 on a success step, else 0.0) or "dense" (the simulator's shaped reward).
        seed: Base seed; with it every reset is reproducible.
        use_fixed_reset_state_ids: On `reset()` without ids, rows of the same group (`group_size` consecutive
            rows) get the same reset state (GRPO), task included.
        group_size: Rows per same-start group; must divide `num_envs`.
        num_trials_per_task: Distinct start states per task that `reset_state_id`s enumerate (ids run over
            `num_tasks * num_trials_per_task`).
        action_out_of_range: "clip" clips actions to the action range; "error" raises when an action is out
            of range by more than `action_tolerance`. NaN/inf always raise.
        action_tolerance: Slack beyond the action range that is silently clipped even in "error" mode.
        render: Render images (False gives `images` of shape [B, 0, 0, 3] — state-only runs).
        video: Video settings.
        extra: Adapter-specific options (e.g. ManiSkill `sim_backend`, `obs_mode`, `control_mode`).
    """

    env_type: str | None = None
    task: str | None = None
    task_set: str | list[str] | None = None
    num_envs: int = 1
    first_row: int = 0
    envs_per_worker: int = 1
    start_method: str = "forkserver"
    worker_timeout_s: float = 120.0
    worker_start_timeout_s: float = 300.0
    image_size: int | tuple[int, int] = 64
    camera: str | None = None
    wrist_camera: str | None = None
    max_episode_steps: int = 100
    action_repeat: int = 1
    auto_reset: bool = True
    ignore_terminations: bool = False
    reward_mode: str = "sparse"
    seed: int = 0
    use_fixed_reset_state_ids: bool = False
    group_size: int = 1
    num_trials_per_task: int = 50
    action_out_of_range: str = "clip"
    action_tolerance: float = 1e-3
    render: bool = True
    video: VideoConfig = field(default_factory=VideoConfig)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.video, dict):
            self.video = VideoConfig(**self.video)
        if isinstance(self.image_size, list):
            self.image_size = tuple(self.image_size)
        self.validate()

    @property
    def image_hw(self) -> tuple[int, int]:
        """(H, W) of rendered images."""
        if isinstance(self.image_size, int):
            return (self.image_size, self.image_size)
        return (int(self.image_size[0]), int(self.image_size[1]))

    @property
    def num_workers(self) -> int:
        """Subprocess workers used (0 = in-process)."""
        if self.envs_per_worker == 0:
            return 0
        return -(-self.num_envs // self.envs_per_worker)

    def row_tasks(self, num_tasks: int) -> np.ndarray:
        """Task index [num_envs] of each batch row before any `reset_state_ids`: the tasks go round the rows of the
        whole batch (`first_row`), or round its same-start groups with `use_fixed_reset_state_ids` (a group is one
        task, and the groups take the tasks in turn so that every task gets groups)."""
        rows = self.first_row + np.arange(self.num_envs)
        if self.use_fixed_reset_state_ids:
            rows = rows // self.group_size
        return rows % num_tasks

    def validate(self) -> None:
        """Raise ValueError naming the key, the bad value and what is allowed."""
        _check_env_type(self.env_type)
        if self.task is not None and self.task_set is not None:
            _fail("task", self.task, f"give either task or task_set, not both (task_set={self.task_set!r})")
        if self.num_envs < 1:
            _fail("num_envs", self.num_envs, "must be >= 1")
        if isinstance(self.first_row, bool) or not isinstance(self.first_row, int) or self.first_row < 0:
            _fail("first_row", self.first_row, "an int >= 0")
        if self.envs_per_worker < 0:
            _fail("envs_per_worker", self.envs_per_worker, "must be >= 0 (0 = in-process)")
        if self.start_method not in START_METHODS:
            _fail("start_method", self.start_method, f"one of {START_METHODS}")
        if not (0 < self.worker_timeout_s < math.inf):  # NaN fails this too
            _fail("worker_timeout_s", self.worker_timeout_s, "must be a finite number > 0")
        if not (0 < self.worker_start_timeout_s < math.inf):  # NaN fails this too
            _fail("worker_start_timeout_s", self.worker_start_timeout_s, "must be a finite number > 0")
        h, w = self.image_hw
        if h < 1 or w < 1:
            _fail("image_size", self.image_size, "positive int or (H, W)")
        if self.max_episode_steps < 1:
            _fail("max_episode_steps", self.max_episode_steps, "must be >= 1")
        if self.action_repeat < 1:
            _fail("action_repeat", self.action_repeat, "must be >= 1")
        if self.reward_mode not in REWARD_MODES:
            _fail("reward_mode", self.reward_mode, f"one of {REWARD_MODES}")
        if self.group_size < 1 or self.num_envs % self.group_size != 0:
            _fail("group_size", self.group_size, f"must be >= 1 and divide num_envs={self.num_envs}")
        if self.num_trials_per_task < 1:
            _fail("num_trials_per_task", self.num_trials_per_task, "must be >= 1")
        if self.action_out_of_range not in ACTION_OUT_OF_RANGE_MODES:
            _fail("action_out_of_range", self.action_out_of_range, f"one of {ACTION_OUT_OF_RANGE_MODES}")
        if not (0 <= self.action_tolerance < math.inf):
            _fail("action_tolerance", self.action_tolerance, "must be a finite number >= 0")

    def replace(self, **changes: Any) -> EnvConfig:
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EnvConfig:
        """Build from a plain dict (e.g. an `env.train` section); `video_cfg` is accepted as alias of `video`.

        Unknown keys raise ValueError listing the known ones.
        """
        data = dict(data)
        if "video_cfg" in data:
            data["video"] = data.pop("video_cfg")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"EnvConfig got unknown keys {unknown}; known keys: {sorted(known)}")
        return cls(**data)
