"""What a checkpoint folder is named and holds, its errors, and the file and process-group primitives every part
of a save or load uses (hashing, fsync, which rank writes)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import torch.distributed as dist

MODEL_FILE = "model.safetensors"
STATE_DIR = "state"
MANIFEST = "manifest.json"
COMPLETE_MARKER = "COMPLETE"
STEP_DIR = re.compile(r"^global_step_(\d+)$")
LEFTOVER_DIR = re.compile(r"^(?P<final>.+)\.(?P<kind>tmp|old)-[0-9a-f]+$")
TRAINER_FILE = "trainer.json"
FORMAT_VERSION = 2
_HASH_CHUNK = 8 << 20


class CheckpointError(FileNotFoundError):
    """A checkpoint folder that is missing, incomplete (a save was interrupted), damaged, in a format this module
    does not read, or that does not fit the model; the message is one line naming the folder or the file."""


class CheckpointSaveError(OSError):
    """A save that failed (e.g. a full disk); its temporary folder is removed and older checkpoints are intact.
    The message is one line naming the folder and the cause."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_dir(root: str | os.PathLike[str], step: int) -> Path:
    """``<root>/global_step_<step>`` (the name :func:`latest_checkpoint` looks for)."""
    if step < 0:
        raise ValueError(f"step={step} must be >= 0")
    return Path(root) / f"global_step_{step}"


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def process_rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def barrier_if_distributed() -> None:
    if is_distributed():
        dist.barrier()


def fsync_tree(path: Path) -> None:
    """fsync every file below ``path``, then every directory (children before parents)."""
    dirs = []
    for dirpath, _, filenames in os.walk(path):
        dirs.append(dirpath)
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for dirpath in reversed(dirs):
        fsync_dir(Path(dirpath))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def read_json(path: Path) -> Any:
    """The parsed JSON file at ``path``. Text nested deeper than the parser allows raises ``ValueError`` like
    any other malformed JSON (``json`` itself raises ``RecursionError``), so every reader's one-line message for a
    malformed file covers it."""
    text = path.read_text()
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("it nests deeper than the JSON parser allows") from None
