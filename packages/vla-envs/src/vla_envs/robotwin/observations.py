"""Turning RoboTwin's raw per-env observations into the vla_envs observation dict."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from vla_envs.base import Obs
from vla_envs.robotwin.options import STATE_DIM, RoboTwinOptions

CROP_AREA = 0.9  # OpenVLA-OFT's center crop keeps the central 90% of the image area


def center_crop(image: np.ndarray, area: float = CROP_AREA) -> np.ndarray:
    """The central `area` fraction of image [H, W, 3] (each side scaled by sqrt(area))."""
    h, w = image.shape[:2]
    ratio = math.sqrt(area)
    ch, cw = max(1, round(h * ratio)), max(1, round(w * ratio))
    top, left = (h - ch) // 2, (w - cw) // 2
    return image[top : top + ch, left : left + cw]


def process_image(image: Any, opts: RoboTwinOptions) -> np.ndarray:
    """uint8 [H, W, 3] at `opts.image_hw`: optional center crop, then a bilinear resize."""
    arr = np.asarray(image)
    if arr.dtype != np.uint8:  # float images in [0, 1]
        arr = (np.clip(arr, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    if arr.ndim != 3 or arr.shape[2] < 3:
        raise ValueError(f"RoboTwin returned an image of shape {arr.shape}; expected [H, W, 3]")
    arr = arr[..., :3]
    if opts.center_crop:
        arr = center_crop(arr)
    h, w = opts.image_hw
    if arr.shape[:2] != (h, w):
        arr = np.asarray(Image.fromarray(np.ascontiguousarray(arr)).resize((w, h), Image.Resampling.BILINEAR))
    return np.ascontiguousarray(arr, dtype=np.uint8)


def _wrist_keys(opts: RoboTwinOptions) -> list[str]:
    return {
        None: [],
        "both": ["left_wrist_image", "right_wrist_image"],
        "left": ["left_wrist_image"],
        "right": ["right_wrist_image"],
    }[opts.wrist]


def convert_obs(raw: Sequence[dict[str, Any]], opts: RoboTwinOptions) -> Obs:
    """Batch RoboTwin observations (`full_image`, `left_wrist_image`, `right_wrist_image`, `state`,
    `instruction` per env) into images [B,H,W,3], wrist_images [B,K,H,W,3] or None, states [B,14], descriptions."""
    keys = _wrist_keys(opts)
    images, wrists, states, texts = [], [], [], []
    for i, row in enumerate(raw):
        images.append(process_image(row["full_image"], opts))
        if keys:
            missing = [k for k in keys if row.get(k) is None]
            if missing:
                raise RuntimeError(
                    f"RoboTwin env {i} returned no {missing} although wrist images were requested "
                    "(task_config.camera.collect_wrist_camera must be true)"
                )
            wrists.append(np.stack([process_image(row[k], opts) for k in keys]))
        state = np.asarray(row["state"], dtype=np.float32).reshape(-1)
        if state.shape != (STATE_DIM,):
            raise RuntimeError(
                f"RoboTwin env {i} returned a state of shape {state.shape}; expected ({STATE_DIM},)"
            )
        states.append(state)
        texts.append(str(row["instruction"]) if opts.instruction is None else opts.instruction)
    return {
        "images": np.stack(images),
        "wrist_images": np.stack(wrists) if keys else None,
        "states": np.stack(states),
        "task_descriptions": texts,
    }
