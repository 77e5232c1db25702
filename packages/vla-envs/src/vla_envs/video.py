"""Episode videos: mp4 files written with imageio, with an optional step/reward/success overlay (PIL)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from vla_envs.config import VideoConfig

MIN_VIDEO_SIDE = 256  # small policy images are upscaled (nearest) so that the overlay stays readable


def overlay_text(frame: np.ndarray, lines: list[str]) -> np.ndarray:
    """Draw `lines` in the top-left corner of frame [H, W, 3] uint8 (white on a dark box); returns a copy."""
    from PIL import Image, ImageDraw  # pillow is a dependency of imageio

    image = Image.fromarray(np.ascontiguousarray(frame))
    draw = ImageDraw.Draw(image)
    line_h = 11
    width = max(6 * len(s) for s in lines) + 6
    draw.rectangle([0, 0, width, line_h * len(lines) + 4], fill=(0, 0, 0))
    for k, text in enumerate(lines):
        draw.text((3, 2 + k * line_h), text, fill=(255, 255, 255))
    return np.asarray(image)


def upscale(frame: np.ndarray, min_side: int = MIN_VIDEO_SIDE) -> np.ndarray:
    """Nearest-neighbour upscale by an integer factor so that the shorter side is >= min_side."""
    factor = max(1, -(-min_side // min(frame.shape[:2])))
    if factor == 1:
        return frame
    return np.repeat(np.repeat(frame, factor, axis=0), factor, axis=1)


class EpisodeVideoRecorder:
    """Collects frames of batch rows `0 .. cfg.max_envs-1` and writes one mp4 per finished episode.

    Files: `{video_base_dir}/{tag}_env{row}_ep{episode}.mp4`, episode numbers continuing after the files already
    in the folder (nothing is overwritten).
    """

    def __init__(self, cfg: VideoConfig, num_envs: int, tag: str = "episode") -> None:
        self.cfg = cfg
        self.tag = tag
        self.rows = list(range(min(cfg.max_envs, num_envs)))
        self.frames: dict[int, list[np.ndarray]] = {r: [] for r in self.rows}
        self.episode_index: dict[int, int] = dict.fromkeys(self.rows, 0)
        self.written: list[str] = []

    def _frame(self, image: np.ndarray, step: int, reward: float, success: bool) -> np.ndarray:
        frame = upscale(np.asarray(image, dtype=np.uint8))
        if self.cfg.info_on_video:
            frame = overlay_text(frame, [f"step {step}", f"reward {reward:.3f}", f"success {int(success)}"])
        return frame

    def start(self, images: np.ndarray) -> None:
        """New episodes for every recorded row (after reset): images [B, H, W, 3]."""
        for r in self.rows:
            self.frames[r] = [self._frame(images[r], 0, 0.0, False)]

    def add(self, row: int, image: np.ndarray, *, step: int, reward: float, success: bool) -> None:
        """Append one frame for `row` (ignored for rows not recorded)."""
        if row in self.frames:
            self.frames[row].append(self._frame(image, step, reward, success))

    def finish(self, row: int, next_image: np.ndarray | None) -> str | None:
        """Write `row`'s episode; start the next one from next_image (None: no next episode yet)."""
        if row not in self.frames:
            return None
        path = self._write(row)
        self.frames[row] = [] if next_image is None else [self._frame(next_image, 0, 0.0, False)]
        return path

    def _write(self, row: int) -> str | None:
        frames = self.frames[row]
        if len(frames) < 2:
            return None
        import imageio.v2 as imageio

        os.makedirs(self.cfg.video_base_dir, exist_ok=True)
        # the next free episode number: a second recorder on the same folder (a resumed run, a rebuilt env)
        # adds files after the ones there and never overwrites one
        while True:
            path = str(Path(self.cfg.video_base_dir) / f"{self.tag}_env{row}_ep{self.episode_index[row]}.mp4")
            self.episode_index[row] += 1
            if not os.path.exists(path):
                break
        # macro_block_size=1 keeps odd sizes; quality 7 keeps files small
        imageio.mimwrite(path, frames, fps=self.cfg.fps, macro_block_size=1, quality=7)
        self.written.append(path)
        return path

    def close(self) -> None:
        """Write the episodes still in progress."""
        for r in self.rows:
            self._write(r)
            self.frames[r] = []
