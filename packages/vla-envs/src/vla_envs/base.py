"""The batched environment contract: `BatchedEnv`, `StepResult` and observation/action helpers.

Observation dict (every adapter returns exactly these keys):
    images: uint8 [B, H, W, 3], upright.
    wrist_images: uint8 [B, K, H, W, 3] or None.
    states: float32 [B, D].
    task_descriptions: list[str] of length B.

Autoreset semantics (`autoreset_mode == "same_step"`): when an episode ends (terminated or truncated) at
chunk position t, `StepResult.final_obs` rows hold that episode's last observation, `final_mask` is True for
the row, `episode_metrics` hold its metrics, and, when `auto_reset=True`, `StepResult.obs` already is the
first observation of the next episode. The rest of that chunk's actions for that row are ignored (reward 0,
terminated/truncated False). With `auto_reset=False` an ended row stays ended: further actions are ignored
(reward 0, flags False) and its obs is the final obs until `reset()` is called.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Obs = dict[str, Any]

EPISODE_METRIC_KEYS = ("success_once", "return", "episode_len", "reward")

__all__ = [
    "EPISODE_METRIC_KEYS",
    "BatchedEnv",
    "Obs",
    "StepResult",
    "check_actions",
    "concat_obs",
    "empty_episode_metrics",
    "merge_obs_rows",
    "select_obs_rows",
    "stack_obs",
]


@dataclass
class StepResult:
    """Result of `BatchedEnv.step` / `chunk_step` (B rows, C chunk positions; C = 1 for `step`).

    Attributes:
        obs: Next observation dict (reset obs for rows that ended when auto_reset=True).
        rewards: float32 [B, C].
        terminated: bool [B, C] (success end; not bootstrapped).
        truncated: bool [B, C] (time limit or worker restart; bootstrapped).
        final_obs: Observation dict; rows where `final_mask` is True hold the ended episode's last obs.
        final_mask: bool [B], True where an episode ended during this call.
        episode_metrics: float32 [B] arrays `success_once`, `return`, `episode_len`, `reward`
            (mean step reward), valid where `final_mask`.
        infos: Extra per-call information (e.g. `worker_restarts`, `success` bool [B, C]).
        lost: bool [B], True where the episode ended because its simulator process died (a subset of
            `final_mask`; the row is reported truncated at chunk position 0 and starts again). A lost episode is
            not a finished one: it never counts in success metrics or evaluation tables. None: no row lost.
    """

    obs: Obs
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: Obs
    final_mask: np.ndarray
    episode_metrics: dict[str, np.ndarray]
    infos: dict[str, Any] = field(default_factory=dict)
    lost: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.lost is None:
            self.lost = np.zeros(len(self.final_mask), dtype=bool)

    @property
    def dones(self) -> np.ndarray:
        """bool [B, C]: terminated | truncated (convenience; keep both for bootstrapping)."""
        return np.logical_or(self.terminated, self.truncated)


class BatchedEnv(abc.ABC):
    """A batch of `num_envs` environments stepped together.

    Subclasses implement `reset`, `chunk_step` and `close`, and set the attributes below in `__init__`.

    Attributes:
        num_envs: Batch size B.
        action_dim: A.
        action_low, action_high: float32 [A] action range.
        autoreset_mode: Always "same_step" (see module docstring).
        worker_restarts: Number of worker processes restarted so far (0 for in-process envs).
        num_tasks: Number of tasks in the task set.
        num_reset_states: Valid reset_state_ids are `range(num_reset_states)`.
    """

    autoreset_mode: str = "same_step"
    num_envs: int
    action_dim: int
    action_low: np.ndarray
    action_high: np.ndarray
    worker_restarts: int = 0
    num_tasks: int = 1
    num_reset_states: int = 1

    @abc.abstractmethod
    def reset(
        self, seed: int | None = None, reset_state_ids: Sequence[int] | np.ndarray | None = None
    ) -> Obs:
        """Reset all envs.

        Args:
            seed: Re-seed the random start states (None keeps the running generator).
            reset_state_ids: int [B]; rows with equal ids get identical starts (states and images).

        Returns:
            The observation dict.
        """

    @abc.abstractmethod
    def chunk_step(self, actions: np.ndarray) -> StepResult:
        """Step every env through a chunk of actions.

        Args:
            actions: float32 [B, C, A] in [action_low, action_high].

        Returns:
            StepResult with [B, C] rewards/flags.
        """

    def step(self, actions: np.ndarray) -> StepResult:
        """One action per env: actions [B, A]; same as `chunk_step(actions[:, None])`."""
        actions = np.asarray(actions)
        if actions.ndim != 2:
            raise ValueError(
                f"step(actions) expects shape [num_envs={self.num_envs}, action_dim={self.action_dim}], "
                f"got {tuple(actions.shape)}; use chunk_step for [B, C, A]"
            )
        return self.chunk_step(actions[:, None, :])

    def fault_stats(self) -> dict[str, float]:
        """`worker_restarts`, `lost_episodes` (episodes in flight on a crashed worker, ended as truncated) and
        `restart_time_s` so far; zeros for envs without restartable workers."""
        return {"worker_restarts": float(self.worker_restarts), "lost_episodes": 0.0, "restart_time_s": 0.0}

    def set_video_tag(self, tag: str) -> None:
        """Name prefix of the video files written from now on (`{tag}_env{row}_ep{n}.mp4`), e.g. the run's env rank
        and iteration. Envs that record episode videos override it; an env that records none has nothing to name."""
        del tag

    @abc.abstractmethod
    def close(self) -> None:
        """Release simulators and worker processes (idempotent)."""

    def __enter__(self) -> BatchedEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_actions(
    actions: Any,
    *,
    num_envs: int,
    action_dim: int,
    low: np.ndarray,
    high: np.ndarray,
    out_of_range: str = "clip",
    tolerance: float = 1e-3,
) -> np.ndarray:
    """Validate a chunk of actions and return float32 [B, C, A] clipped to [low, high].

    Raises:
        ValueError: wrong shape, NaN/inf, or (with out_of_range="error") a value outside the range by more
            than `tolerance`.
    """
    if hasattr(actions, "detach"):  # a torch tensor; vla_envs does not import torch
        actions = actions.detach().cpu().numpy()
    arr = np.asarray(actions, dtype=np.float32)
    if arr.ndim != 3 or arr.shape[0] != num_envs or arr.shape[2] != action_dim or arr.shape[1] < 1:
        raise ValueError(
            f"actions must have shape [num_envs={num_envs}, chunk>=1, action_dim={action_dim}], "
            f"got {tuple(np.shape(actions))}; the simulators were not stepped"
        )
    if not np.all(np.isfinite(arr)):
        rows = np.flatnonzero(~np.isfinite(arr).all(axis=(1, 2))).tolist()
        bad = np.argwhere(~np.isfinite(arr))[0].tolist()
        raise ValueError(
            f"actions contain NaN/inf in env rows {rows} of {num_envs} (first at index {bad}); "
            "the simulators were not stepped"
        )
    lo = np.asarray(low, dtype=np.float32)
    hi = np.asarray(high, dtype=np.float32)
    if out_of_range == "error":
        excess = np.maximum(arr - hi, lo - arr)
        if np.any(excess > tolerance):
            idx = np.unravel_index(int(np.argmax(excess)), arr.shape)
            raise ValueError(
                f"action {arr[idx]:.4f} at index {list(map(int, idx))} is outside the action range "
                f"[{lo[idx[2]]}, {hi[idx[2]]}] by more than action_tolerance={tolerance} "
                "(set action_out_of_range='clip' to clip instead)"
            )
    elif out_of_range != "clip":
        raise ValueError(f"out_of_range={out_of_range!r} is invalid: one of ('clip', 'error')")
    return np.clip(arr, lo, hi)


def stack_obs(rows: Sequence[Obs]) -> Obs:
    """Stack per-env observations (images [H,W,3], wrist_images [K,H,W,3] or None, states [D], str) into a batch."""
    if not rows:
        raise ValueError("stack_obs needs at least one observation")
    wrist = rows[0].get("wrist_images")
    return {
        "images": np.stack([r["images"] for r in rows]).astype(np.uint8, copy=False),
        "wrist_images": None
        if wrist is None
        else np.stack([r["wrist_images"] for r in rows]).astype(np.uint8),
        "states": np.stack([r["states"] for r in rows]).astype(np.float32, copy=False),
        "task_descriptions": [str(r["task_descriptions"]) for r in rows],
    }


def concat_obs(parts: Sequence[Obs]) -> Obs:
    """Batched observation dicts joined along the batch axis, in order (arrays concatenated, lists joined, None
    kept: e.g. `wrist_images` without a wrist camera)."""
    out: Obs = {}
    for key, first in parts[0].items():
        if first is None:
            out[key] = None
        elif isinstance(first, list):
            out[key] = [x for p in parts for x in p[key]]
        else:
            out[key] = np.concatenate([np.asarray(p[key]) for p in parts])
    return out


def select_obs_rows(obs: Obs, rows: np.ndarray | Sequence[int]) -> Obs:
    """Rows `rows` of a batched observation dict."""
    idx = np.asarray(rows, dtype=np.int64)
    out: Obs = {}
    for key, value in obs.items():
        if value is None:
            out[key] = None
        elif isinstance(value, list):
            out[key] = [value[i] for i in idx]
        else:
            out[key] = value[idx]
    return out


def merge_obs_rows(dst: Obs, src: Obs, mask: np.ndarray) -> Obs:
    """A copy of `dst` with rows where `mask` (bool [B]) is True taken from `src` (same batch size)."""
    mask = np.asarray(mask, dtype=bool)
    out: Obs = {}
    for key, value in dst.items():
        other = src.get(key)
        if value is None or other is None:
            out[key] = value
        elif isinstance(value, list):
            out[key] = [o if m else v for v, o, m in zip(value, other, mask, strict=True)]
        else:
            out[key] = np.where(mask.reshape((-1,) + (1,) * (value.ndim - 1)), other, value)
    return out


def empty_episode_metrics(num_envs: int) -> dict[str, np.ndarray]:
    """Zeroed float32 [B] arrays for every key in `EPISODE_METRIC_KEYS`."""
    return {k: np.zeros(num_envs, dtype=np.float32) for k in EPISODE_METRIC_KEYS}
