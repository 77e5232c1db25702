"""Episode videos: mp4 files written with imageio, with an optional step/reward/success overlay (PIL)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import numpy as np

from vla_envs.config import VideoConfig

MIN_VIDEO_SIDE = 256  # small policy images are upscaled (nearest) so that the overlay stays readable


class VideoWriteError(OSError):
    """An episode video could not be written (a full disk, a read-only or unwritable folder): `filename` is the
    video's path, `errno` and `strerror` the cause (`OSError(errno, strerror, filename)`). No partial file is left
    behind."""


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


def _check_complete(path: Path, num_frames: int) -> None:
    """Raise OSError(EPIPE) unless the mp4 at `path` holds `num_frames` frames: ffmpeg can end without an error
    while the disk refused part of its output (a file size limit, a full disk at the end), leaving a cut file."""
    import imageio_ffmpeg

    try:
        found, _ = imageio_ffmpeg.count_frames_and_secs(str(path))
    except RuntimeError:  # unreadable: the file was cut before its index was written
        found = 0
    if found < num_frames:
        raise OSError(errno.EPIPE, f"the written video holds {found} of {num_frames} frames")


def _ffmpeg_failure(folder: Path) -> tuple[int, str]:
    """(errno, text) of an ffmpeg that stopped writing into `folder`: no space left when its file system has less
    than 1 MiB free, else an I/O error."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return errno.EIO, "ffmpeg stopped writing the episode video"
    if free < 2**20:
        return errno.ENOSPC, f"No space left on device ({free} bytes free; ffmpeg stopped writing)"
    return errno.EIO, f"ffmpeg stopped writing the episode video ({free} bytes free)"


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
        self.failed = False  # a write failed: `close` drops the episodes in progress instead of trying again

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

        folder = Path(str(self.cfg.video_base_dir))
        path = folder / f"{self.tag}_env{row}_ep{self.episode_index[row]}.mp4"
        tmp = path
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # the next free episode number: a second recorder on the same folder (a resumed run, a rebuilt env)
            # adds files after the ones there and never overwrites one
            while True:
                path = folder / f"{self.tag}_env{row}_ep{self.episode_index[row]}.mp4"
                self.episode_index[row] += 1
                if not path.exists():
                    break
            # written beside it, then renamed: a reader (or a full disk) never leaves a part of a video behind.
            # macro_block_size=1 keeps odd sizes; quality 7 keeps files small; ffmpeg quiet: errors are ours
            tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.mp4")
            imageio.mimwrite(
                tmp, frames, fps=self.cfg.fps, macro_block_size=1, quality=7, ffmpeg_log_level="quiet"
            )
            _check_complete(tmp, len(frames))
            os.replace(tmp, path)
        except OSError as exc:
            if tmp != path:
                tmp.unlink(missing_ok=True)
            code, cause = exc.errno, exc.strerror or " ".join(str(exc).split())[:200]
            if code == errno.EPIPE or (code is None and "Broken pipe" in str(exc)):
                # ffmpeg stopped before taking every frame: it could not write its output (a full disk, mostly)
                code, cause = _ffmpeg_failure(folder)
            self.failed = True
            raise VideoWriteError(code or errno.EIO, cause, str(path)) from None
        self.written.append(str(path))
        return str(path)

    def close(self) -> None:
        """Write the episodes still in progress (none after a failed write: the error was raised once)."""
        for r in self.rows:
            if not self.failed:
                self._write(r)
            self.frames[r] = []
