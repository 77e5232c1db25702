"""The checks every policy's ``predict`` / ``values`` / ``sft_loss`` inputs pass before they reach a model: one
line naming the observation key and what is allowed, instead of a model error or NaN further down."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["check_observation"]


def check_observation(obs: Mapping[str, Any]) -> int:
    """The batch size of ``obs``, after checking what a model cannot check for itself.

    ``task_descriptions`` must be a list or tuple of strings with at least one row; ``states`` (when given) must
    have one row per task description and finite values; floating-point images (when given) must be finite
    (uint8 images are finite by type; their layout and batch size are the processor's check).

    Raises:
        ValueError: naming ``obs[key]``, what it holds and what is allowed.
    """
    if not isinstance(obs, Mapping):
        raise ValueError(f"obs must be a mapping of observation keys, got {type(obs).__name__}")
    tasks = obs.get("task_descriptions")
    if not isinstance(tasks, (list, tuple)):
        raise ValueError(f"obs['task_descriptions'] must be a list of strings, got {type(tasks).__name__}")
    bad = [i for i, t in enumerate(tasks) if not isinstance(t, str)]
    if bad:
        raise ValueError(
            f"obs['task_descriptions'] must hold strings; row {bad[0]} is {type(tasks[bad[0]]).__name__} "
            f"({tasks[bad[0]]!r})"
        )
    b = len(tasks)
    if b == 0:
        raise ValueError("obs has 0 rows (empty task_descriptions): a policy needs at least one observation")
    for key in ("states", "images", "wrist_images"):
        value = obs.get(key)
        if value is None:
            continue
        arr = value.detach().cpu() if isinstance(value, torch.Tensor) else np.asarray(value)
        if key == "states" and (
            len(arr.shape) == 0 or arr.shape[0] != b
        ):  # image layouts: the processor's check
            raise ValueError(
                f"obs[{key!r}] has shape {list(arr.shape)}: its first dimension must be the {b} rows of "
                "task_descriptions"
            )
        floating = (
            arr.is_floating_point()
            if isinstance(arr, torch.Tensor)
            else np.issubdtype(arr.dtype, np.floating)
        )
        if floating:
            finite = torch.isfinite(arr) if isinstance(arr, torch.Tensor) else np.isfinite(arr)
            if not bool(finite.all()):
                flat = (
                    np.asarray(finite).reshape(arr.shape[0], -1)
                    if len(arr.shape)
                    else np.asarray(finite).reshape(1, 1)
                )
                rows = sorted({int(r) for r in np.nonzero(~flat)[0]})
                raise ValueError(
                    f"obs[{key!r}] holds NaN or inf (rows {rows[:5]}); observations must be finite"
                )
    return b
