"""Whether a checkpoint folder is complete and intact, checked against its manifest before anything is read."""

from __future__ import annotations

import os
from pathlib import Path

from safetensors import SafetensorError

from vla_infra.checkpoint.files import (
    COMPLETE_MARKER,
    FORMAT_VERSION,
    MANIFEST,
    MODEL_FILE,
    STATE_DIR,
    TRAINER_FILE,
    CheckpointError,
    one_line,
    read_json,
    sha256_file,
)


def checkpoint_problem(ckpt_dir: str | os.PathLike[str], *, checksums: bool = True) -> str | None:
    """None if ``ckpt_dir`` is a complete, intact checkpoint, else one line saying what is wrong with which file.

    Checks the ``COMPLETE`` marker, the manifest (its format version, a sha256 for every file), that the files
    the loader reads are listed, and every listed file: inside the folder, present, at its recorded size, and
    (``checksums=True``, reads every byte) with its recorded sha256.
    """
    path = Path(ckpt_dir)
    if not path.is_dir():
        return f"{path} is not a complete checkpoint: no such folder"
    if not (path / COMPLETE_MARKER).is_file():
        return f"{path} is not a complete checkpoint: no {COMPLETE_MARKER} marker (its save was interrupted)"
    try:
        manifest = read_json(path / MANIFEST)
        files = {str(rel): int(size) for rel, size in dict(manifest["files"]).items()}
        hashes = dict(manifest.get("sha256") or {})
        version = manifest.get("format_version")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return (
            f"{path / MANIFEST} is missing or unreadable ({one_line(exc)}): the checkpoint cannot be checked"
        )
    if version != FORMAT_VERSION:
        return (
            f"{path} is in checkpoint format {version!r}; this version reads format {FORMAT_VERSION} only "
            "(format 1 keeps its state with PyTorch DCP, which is read with pickle and can run code)"
        )
    for required in (MODEL_FILE, f"{STATE_DIR}/{TRAINER_FILE}", f"{STATE_DIR}/trainer.safetensors"):
        if required not in files:
            return f"{path / MANIFEST} does not list {required}: the checkpoint is damaged"
    for rel, size in files.items():
        file = path / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            return f"{path / MANIFEST} lists {rel!r}, which is outside the checkpoint folder"
        if rel not in hashes:
            return f"{path / MANIFEST} has no sha256 for {rel}: the checkpoint cannot be checked"
        if not file.is_file():
            return f"{file} is missing (listed in {MANIFEST}): the checkpoint is damaged"
        actual = file.stat().st_size
        if actual != size:
            return f"{file} is truncated or altered: {actual} bytes, {MANIFEST} recorded {size}"
    if checksums:
        for rel in files:
            try:
                digest = sha256_file(path / rel)
            except OSError as exc:
                return f"{path / rel} cannot be read: {one_line(exc)}"
            if digest != hashes[rel]:
                return f"{path / rel} is altered: its sha256 differs from the one recorded in {MANIFEST}"
    return None


def checkpoint_tensor_shapes(ckpt_dir: str | os.PathLike[str]) -> dict[str, list[int]]:
    """The shape of every model tensor of a complete checkpoint, read from the safetensors headers only; every
    JSON file and safetensors header of its state is parsed too, so a file that is not what its name says is
    found before anything is built (:func:`load_checkpoint` reads the same files).

    Raises:
        CheckpointError: :func:`checkpoint_problem` (sizes only) or an unreadable file, one line naming it.
    """
    from safetensors import safe_open

    path = Path(ckpt_dir)
    problem = checkpoint_problem(path, checksums=False)
    if problem is not None:
        raise CheckpointError(problem)
    files = read_json(path / MANIFEST)["files"]
    shapes: dict[str, list[int]] = {}
    for rel in sorted(files):
        file = path / rel
        try:
            if rel.endswith(".json"):
                read_json(file)
            elif rel.endswith(".safetensors"):
                with safe_open(str(file), framework="pt") as handle:
                    if rel == MODEL_FILE:
                        shapes = {name: list(handle.get_slice(name).get_shape()) for name in handle.keys()}  # noqa: SIM118
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise CheckpointError(
                f"{file} is not a readable {file.suffix[1:]} file: {one_line(exc)}"
            ) from None
    return shapes


def is_complete(ckpt_dir: str | os.PathLike[str]) -> bool:
    """True if ``ckpt_dir`` has its ``COMPLETE`` marker and every file listed in the manifest, at its size
    (cheap: no checksums; :func:`checkpoint_problem` also compares them)."""
    return checkpoint_problem(ckpt_dir, checksums=False) is None
