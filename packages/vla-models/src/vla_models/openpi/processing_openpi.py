"""openpi's input and output transforms: normalisation, prompt tokens, images, action-space adapters.

* ``OpenPiNormalizer``: z-score ``(x - mean) / (std + 1e-6)`` (pi0) or quantile
  ``(x - q01) / (q99 - q01 + 1e-6) * 2 - 1`` (pi0.5), no clipping, on the first ``dim`` entries of the
  statistics (openpi ``transforms.py``); ``norm_stats.json`` is ``{"norm_stats": {"state": {...}, "actions": {...}}}``.
* Prompts: pi0 ``<bos> + task + "\\n"``; pi0.5 with the state in the prompt
  ``<bos> + "Task: {task}, State: {s_1 s_2 ...};\\nAction: "`` where ``s_i`` is the normalised state in 256 bins
  of ``[-1, 1]``; right-padded to ``max_token_len`` with a mask (openpi ``models/tokenizer.py``).
* Images: uint8 ``[B, N, H, W, 3]`` resized with padding to the model's size, then ``[-1, 1]`` in the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from vla_models.checkpoint_files import read_json

NORM_EPS = 1e-6
LEROBOT_NORM_EPS = 1e-8


class OpenPiNormalizer:
    """openpi's normalisation of one quantity (``state`` or ``actions``) over its first ``dim`` entries.

    ``style="lerobot"`` uses lerobot's epsilon instead: ``std + 1e-8``, and quantiles divided by ``q99 - q01``
    (1e-8 only where the two are equal).
    """

    def __init__(
        self, stats: Mapping[str, Sequence[float]], *, quantile: bool, style: str = "openpi"
    ) -> None:
        self.quantile = quantile
        self.style = style
        keys = ("q01", "q99") if quantile else ("mean", "std")
        missing = [k for k in keys if k not in stats]
        if missing:
            raise ValueError(f"normalisation statistics lack {missing} (have {sorted(stats)})")
        a, b = (torch.as_tensor(stats[k], dtype=torch.float32) for k in keys)
        for k, v in zip(keys, (a, b)):
            if v.ndim != 1 or not bool(v.isfinite().all()):
                raise ValueError(
                    f"normalisation statistic {k!r} must be a vector of finite numbers, got {v.tolist()}"
                )
        if a.shape != b.shape:
            raise ValueError(
                f"normalisation statistics {keys[0]!r} {list(a.shape)} and {keys[1]!r} {list(b.shape)} differ"
            )
        self.a, self.b = a, b
        self.dim = int(a.shape[0])

    def _ab(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(offset, scale, d): ``normalised = (x - offset) / scale`` (before the quantiles' ``* 2 - 1``)."""
        d = min(self.dim, x.shape[-1])
        a, b = self.a[:d].to(x.device), self.b[:d].to(x.device)
        if self.style == "lerobot":
            scale = torch.where(b == a, LEROBOT_NORM_EPS, b - a) if self.quantile else b + LEROBOT_NORM_EPS
        else:
            scale = b - a + NORM_EPS if self.quantile else b + NORM_EPS
        return a, scale, d

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        a, scale, d = self._ab(x)
        head = (x[..., :d] - a) / scale
        head = head * 2 - 1 if self.quantile else head
        return torch.cat([head, x[..., d:]], dim=-1)

    def unnormalize(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        a, scale, d = self._ab(x)
        head = (x[..., :d] + 1) / 2 if self.quantile else x[..., :d]
        return torch.cat([head * scale + a, x[..., d:]], dim=-1)


def read_norm_stats(path: str | Path) -> dict[str, Any]:
    """``{"state": {...}, "actions": {...}}`` from an openpi ``norm_stats.json``.

    Raises:
        ValueError: not an openpi statistics file, or a statistic that is not a vector of finite numbers (named).
    """
    d = read_json(Path(path), expect=dict)
    stats = d.get("norm_stats", d)
    if not isinstance(stats, dict) or not isinstance(stats.get("actions"), dict):
        raise ValueError(f"{path} is not an openpi norm_stats.json (no 'norm_stats.actions' object)")
    for quantity in ("actions", "state"):
        for name, vector in (stats.get(quantity) or {}).items():
            key = f"norm_stats.{quantity}.{name}"
            try:
                values = np.asarray(vector, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"{path}: {key} is not a vector of numbers") from None
            if values.ndim != 1:
                raise ValueError(f"{path}: {key} has shape {list(values.shape)}; a vector belongs there")
            if not np.isfinite(values).all():
                raise ValueError(
                    f"{path}: {key} holds {int((~np.isfinite(values)).sum())} non-finite value(s)"
                )
    return stats


def write_norm_stats(path: str | Path, stats: Mapping[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"norm_stats": stats}, indent=2))


def discretize_state(state: np.ndarray) -> np.ndarray:
    """pi0.5's state tokens: ``np.digitize(s, linspace(-1, 1, 257)[:-1]) - 1`` (ints in [0, 255])."""
    bins = np.linspace(-1, 1, 256 + 1)[:-1]
    return np.digitize(state, bins=bins) - 1


def clean_prompt(text: str) -> str:
    return text.strip().replace("_", " ").replace("\n", " ")


class PromptTokenizer:
    """Prompt strings (and the pi0.5 state) -> right-padded ``input_ids`` / ``text_mask`` of ``max_len``."""

    def __init__(self, tokenizer: Any, max_len: int, *, state_in_prompt: bool) -> None:
        self.tokenizer = tokenizer
        self.max_len = max_len
        self.state_in_prompt = state_in_prompt
        self.bos = tokenizer.bos_token_id
        self._cache: dict[str, list[int]] = {}

    def text(self, task: str, state: np.ndarray | None) -> str:
        if self.state_in_prompt:
            digits = " ".join(map(str, discretize_state(state).tolist())) if state is not None else ""
            return f"Task: {clean_prompt(task)}, State: {digits};\nAction: "
        return clean_prompt(task) + "\n"

    def ids(self, text: str) -> list[int]:
        if text not in self._cache:
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[text] = [self.bos, *self.tokenizer(text, add_special_tokens=False)["input_ids"]]
        return self._cache[text]

    def __call__(
        self, tasks: Sequence[str], states: torch.Tensor | None, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        st = states.detach().float().cpu().numpy() if (states is not None and self.state_in_prompt) else None
        b = len(tasks)
        ids = torch.zeros(b, self.max_len, dtype=torch.long)
        mask = torch.zeros(b, self.max_len, dtype=torch.bool)
        for i, task in enumerate(tasks):
            row = self.ids(self.text(task, None if st is None else st[i]))
            if len(row) > self.max_len:
                raise ValueError(
                    f"prompt of {len(row)} tokens exceeds max_token_len={self.max_len}: {tasks[i]!r}"
                )
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = True
        return ids.to(device), mask.to(device)


def resize_with_pad(images: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 ``[..., H, W, 3]`` -> uint8 ``[..., size, size, 3]``: aspect kept, bilinear, zero padding (openpi)."""
    h, w = images.shape[-3], images.shape[-2]
    if h == size and w == size:
        return images
    lead = images.shape[:-3]
    x = images.reshape(-1, h, w, 3).permute(0, 3, 1, 2).float()
    ratio = max(h / size, w / size)
    nh, nw = int(h / ratio), int(w / ratio)
    x = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False)
    top, left = (size - nh) // 2, (size - nw) // 2
    x = F.pad(x, (left, size - nw - left, top, size - nh - top))
    out = x.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
    return out.reshape(*lead, size, size, 3)


def stack_cameras(obs: Mapping[str, Any], num_images: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The base camera then the wrist cameras as uint8 ``[B, N, S, S, 3]`` and a presence mask ``[B, N]``;
    missing cameras are zero images, masked out of attention (openpi's ``image_mask``)."""
    base = torch.as_tensor(obs["images"])
    if base.dtype != torch.uint8:
        raise ValueError(f"obs['images'] must be uint8 [B, H, W, 3], got {base.dtype}")
    b = base.shape[0]
    cams = [resize_with_pad(base, size)]
    wrist = obs.get("wrist_images")
    if wrist is not None and num_images > 1:
        wrist = torch.as_tensor(wrist)
        for k in range(min(num_images - 1, wrist.shape[1])):
            cams.append(resize_with_pad(wrist[:, k], size))
    mask = torch.zeros(b, num_images, dtype=torch.bool)
    mask[:, : len(cams)] = True
    while len(cams) < num_images:
        cams.append(torch.zeros_like(cams[0]))
    return torch.stack(cams, dim=1), mask


# ---- ALOHA <-> pi0 space (``adapt_to_pi``; openpi's ``aloha_policy``) ------------------------------------------
# joints whose sign differs between the ALOHA runtime and pi0's training data (two arms of 6 joints + gripper)
ALOHA_JOINT_FLIP = (1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0)
ALOHA_GRIPPERS = (6, 13)


def _lin(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    return (x - lo) / (hi - lo)


def _unlin(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    return x * (hi - lo) + lo


def aloha_gripper_to_angular(x: torch.Tensor) -> torch.Tensor:
    """ALOHA's linear gripper position (normalised) -> pi0's angular gripper value in [0, 1] of its encoder range."""
    pos = _unlin(x, 0.01844, 0.05800)  # puppet gripper open / closed positions (m)
    arm, horn = 0.036, 0.022  # the Interbotix linkage
    rad = torch.asin(((horn**2 + pos**2 - arm**2) / (2 * horn * pos)).clamp(-1.0, 1.0))
    return _lin(rad, 0.5476, 1.6296)


def aloha_gripper_from_angular(x: torch.Tensor) -> torch.Tensor:
    """pi0's angular gripper value -> ALOHA's gripper joint value (normalised over its open / close joints)."""
    return _lin(x + 0.5476, -0.6213, 1.4910)


def aloha_gripper_from_angular_inv(x: torch.Tensor) -> torch.Tensor:
    return _unlin(x, -0.6213, 1.4910) - 0.5476


def _aloha_map(x: torch.Tensor, gripper_fn) -> torch.Tensor:
    if x.shape[-1] < 14:
        raise ValueError(f"adapt_to_pi needs the 14 ALOHA dims, got {x.shape[-1]}")
    flip = torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
    flip[:14] = torch.tensor(ALOHA_JOINT_FLIP, dtype=x.dtype, device=x.device)
    out = x * flip
    g = list(ALOHA_GRIPPERS)
    out[..., g] = gripper_fn(out[..., g])
    return out


def aloha_state_to_pi(state: torch.Tensor) -> torch.Tensor:
    """Env state -> pi0 state: joint flips, linear -> angular grippers."""
    return _aloha_map(state.float(), aloha_gripper_to_angular)


def aloha_actions_from_pi(actions: torch.Tensor) -> torch.Tensor:
    """pi0 actions -> env actions: joint flips, angular -> ALOHA gripper joints."""
    return _aloha_map(actions.float(), aloha_gripper_from_angular)


def aloha_actions_to_pi(actions: torch.Tensor) -> torch.Tensor:
    """Env actions -> pi0 actions (the inverse of ``aloha_actions_from_pi``, for supervised targets)."""
    return _aloha_map(actions.float(), aloha_gripper_from_angular_inv)
