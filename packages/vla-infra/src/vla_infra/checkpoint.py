"""Atomic checkpoints: model weights in safetensors, optimizer and trainer state with DCP.

Layout of ``<root>/global_step_<N>/``::

    model.safetensors      full (unsharded) model weights, written by rank 0
    state/                 torch.distributed.checkpoint: {"optimizer", "trainer", "rng": {"rank<r>": ...}}
    manifest.json          step, world size, every file with its size and sha256
    COMPLETE               written last

Everything is written into ``<dir>.tmp-<uuid>`` first; after all files are fsync'ed the manifest and the
``COMPLETE`` marker are written and the directory is renamed to its final name (one atomic ``rename``), then
the parent directory is fsync'ed. A process killed at any point leaves either the previous checkpoints and a
``*.tmp-*`` directory (ignored by :func:`latest_checkpoint`, removed by :func:`remove_incomplete`) or the new
complete checkpoint. An overwrite renames the old directory to ``<dir>.old-<uuid>`` before renaming the new one
into place; if it is killed between the two renames, :func:`latest_checkpoint` and :func:`remove_incomplete`
move the complete copy (the new ``.tmp-*`` if complete, else the ``.old-*``) back to ``<dir>``. DCP needs no
process group (one process writes alone); with an initialised group every rank calls :func:`save_checkpoint` /
:func:`load_checkpoint` together and writes its own optimizer shards.

:func:`load_checkpoint` checks every file against the manifest (size and sha256) and raises
:class:`CheckpointError` with one line naming a missing, truncated or altered file;
``latest_checkpoint(root, verify=True)`` skips such checkpoints (saying why in ``skipped``) and returns the newest
intact one.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import time
import uuid
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

from vla_infra.fsdp import full_state_dict, is_fsdp_model

__all__ = [
    "COMPLETE_MARKER",
    "MANIFEST",
    "MODEL_FILE",
    "CheckpointError",
    "LoadedCheckpoint",
    "capture_rng_state",
    "checkpoint_dir",
    "checkpoint_problem",
    "is_complete",
    "latest_checkpoint",
    "load_checkpoint",
    "remove_incomplete",
    "restore_rng_state",
    "save_checkpoint",
]

MODEL_FILE = "model.safetensors"
STATE_DIR = "state"
MANIFEST = "manifest.json"
COMPLETE_MARKER = "COMPLETE"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_LEFTOVER_DIR = re.compile(r"^(?P<final>.+)\.(?P<kind>tmp|old)-[0-9a-f]+$")
_FORMAT_VERSION = 1
_HASH_CHUNK = 8 << 20


class CheckpointError(FileNotFoundError):
    """A checkpoint folder that is missing, incomplete (a save was interrupted) or damaged; the message is one
    line naming the folder or the file."""


def _sha256(path: Path) -> str:
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


def capture_rng_state() -> dict[str, Any]:
    """RNG states of python ``random``, numpy, torch CPU and (if present) every CUDA device."""
    import numpy as np

    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`capture_rng_state` captured (CUDA states only if CUDA is available)."""
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _dist() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    return dist.get_rank() if _dist() else 0


def _barrier() -> None:
    if _dist():
        dist.barrier()


def _fsync_tree(path: Path) -> None:
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
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _model_tensors(model_state: nn.Module | Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU, contiguous tensors with no shared storage (what safetensors accepts)."""
    if isinstance(model_state, nn.Module):
        if is_fsdp_model(model_state):
            state = full_state_dict(model_state, cpu_offload=True)
        else:
            state = model_state.state_dict()
    else:
        state = dict(model_state)
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()  # storages already owned by a saved tensor
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"model_state[{name!r}] is {type(tensor).__name__}, expected a torch.Tensor")
        t = tensor.detach().to("cpu").contiguous()
        storage = t.untyped_storage()
        partial = t.storage_offset() != 0 or t.numel() * t.element_size() != storage.nbytes()
        # safetensors refuses tensors sharing a storage (tied weights, or views of one buffer at any offset):
        # keep the first tensor covering a whole storage, give every other one its own copy
        if partial or storage.data_ptr() in seen:
            t = t.clone()
        else:
            seen.add(storage.data_ptr())
        out[name] = t
    return out


def save_checkpoint(
    ckpt_dir: str | os.PathLike[str],
    model_state: nn.Module | Mapping[str, torch.Tensor],
    optimizer: torch.optim.Optimizer | None = None,
    trainer_state: Mapping[str, Any] | None = None,
    *,
    save_rng: bool = True,
    overwrite: bool = False,
) -> Path:
    """Write a checkpoint atomically (see the module docstring for the layout).

    Args:
        ckpt_dir: final directory, e.g. ``checkpoint_dir(root, step)``.
        model_state: the model (an FSDP2 model's shards are gathered) or a name -> tensor mapping.
        optimizer: saved with DCP under FQN keys; needs ``model_state`` to be the module.
        trainer_state: picklable values (step, epoch, sampler state, ...); a ``step`` entry goes to the manifest.
        save_rng: also save python/numpy/torch(/CUDA) RNG states (per rank) for exact resume.
        overwrite: replace an existing complete checkpoint at ``ckpt_dir`` (else FileExistsError).

    Returns:
        The final checkpoint directory.
    """
    final = Path(ckpt_dir)
    if optimizer is not None and not isinstance(model_state, nn.Module):
        raise ValueError(
            "optimizer state is keyed by parameter names: pass the model (nn.Module) as model_state"
        )
    if final.exists() and not overwrite:
        raise FileExistsError(f"checkpoint directory {final} exists; pass overwrite=True to replace it")
    token = [uuid.uuid4().hex]
    if _dist():
        dist.broadcast_object_list(token, src=0)  # all ranks must write into the same temp dir
    tmp = final.parent / f"{final.name}.tmp-{token[0]}"
    rank = _rank()

    tensors = _model_tensors(model_state)  # a collective for FSDP: every rank runs it
    if rank == 0:
        tmp.mkdir(parents=True)
        save_file(tensors, str(tmp / MODEL_FILE), metadata={"format": "pt"})
    _barrier()
    del tensors

    state: dict[str, Any] = {"trainer": dict(trainer_state or {})}
    if save_rng:
        state["rng"] = {f"rank{rank}": capture_rng_state()}
    if optimizer is not None:
        assert isinstance(model_state, nn.Module)
        state["optimizer"] = get_optimizer_state_dict(model_state, optimizer)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        dcp.save(state, checkpoint_id=str(tmp / STATE_DIR), no_dist=not _dist())
    _barrier()

    if rank == 0:
        _fsync_tree(tmp)
        paths = [p for p in sorted(tmp.rglob("*")) if p.is_file()]
        files = {str(p.relative_to(tmp)): p.stat().st_size for p in paths}
        manifest = {
            "format_version": _FORMAT_VERSION,
            "step": (trainer_state or {}).get("step"),
            "world_size": dist.get_world_size() if _dist() else 1,
            "has_optimizer": optimizer is not None,
            "created_unix": time.time(),
            "files": files,
            "sha256": {str(p.relative_to(tmp)): _sha256(p) for p in paths},
        }
        _write_durable(tmp / MANIFEST, json.dumps(manifest, indent=1))
        _write_durable(tmp / COMPLETE_MARKER, "ok\n")
        _fsync_dir(tmp)
        old = None
        if final.exists():
            old = final.parent / f"{final.name}.old-{token[0]}"
            os.rename(final, old)
        try:
            os.rename(tmp, final)
        except FileNotFoundError:
            if not is_complete(
                final
            ):  # else a concurrent latest_checkpoint() moved our complete copy in place
                raise
        _fsync_dir(final.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    _barrier()
    return final


def checkpoint_problem(ckpt_dir: str | os.PathLike[str], *, checksums: bool = True) -> str | None:
    """None if ``ckpt_dir`` is a complete, intact checkpoint, else one line saying what is wrong with which file.

    Checks the ``COMPLETE`` marker, the manifest, and every file it lists: present, at its recorded size, and
    (``checksums=True``, reads every byte) with its recorded sha256. Checkpoints written before checksums were
    recorded are checked by size only.
    """
    path = Path(ckpt_dir)
    if not path.is_dir():
        return f"{path} is not a complete checkpoint: no such folder"
    if not (path / COMPLETE_MARKER).is_file():
        return f"{path} is not a complete checkpoint: no {COMPLETE_MARKER} marker (its save was interrupted)"
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        files = dict(manifest["files"])
        hashes = dict(manifest.get("sha256") or {})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{path / MANIFEST} is missing or unreadable ({type(exc).__name__}): the checkpoint cannot be checked"
    for rel, size in files.items():
        file = path / rel
        if not file.is_file():
            return f"{file} is missing (listed in {MANIFEST}): the checkpoint is damaged"
        actual = file.stat().st_size
        if actual != size:
            return f"{file} is truncated or altered: {actual} bytes, {MANIFEST} recorded {size}"
    if checksums:
        for rel, digest in hashes.items():
            if _sha256(path / rel) != digest:
                return f"{path / rel} is altered: its sha256 differs from the one recorded in {MANIFEST}"
    return None


def is_complete(ckpt_dir: str | os.PathLike[str]) -> bool:
    """True if ``ckpt_dir`` has its ``COMPLETE`` marker and every file listed in the manifest, at its size
    (cheap: no checksums; :func:`checkpoint_problem` also compares them)."""
    return checkpoint_problem(ckpt_dir, checksums=False) is None


def _recover_interrupted_overwrites(base: Path) -> list[Path]:
    """Rename a complete ``<dir>.tmp-*`` (preferred: the newer copy) or ``<dir>.old-*`` back to ``<dir>``
    where ``<dir>`` is missing (an overwrite killed between its two renames); returns the recovered dirs.

    Like :func:`remove_incomplete`, call it while no save into ``base`` is in flight."""
    candidates: dict[str, list[tuple[bool, float, str, Path]]] = {}
    for entry in base.iterdir():
        match = _LEFTOVER_DIR.match(entry.name)
        if match and entry.is_dir() and not (base / match["final"]).exists() and is_complete(entry):
            try:
                created = float(json.loads((entry / MANIFEST).read_text()).get("created_unix") or 0.0)
            except (OSError, ValueError, TypeError):
                created = 0.0
            candidates.setdefault(match["final"], []).append(
                (match["kind"] == "tmp", created, entry.name, entry)
            )
    recovered = []
    for final, found in candidates.items():
        source = max(found)[3]
        try:
            os.rename(source, base / final)
        except OSError:  # the final name appeared meanwhile (a save finished its rename)
            continue
        recovered.append(base / final)
    if recovered:
        _fsync_dir(base)
    return recovered


def latest_checkpoint(
    root: str | os.PathLike[str], *, verify: bool = False, skipped: list[str] | None = None
) -> Path | None:
    """The complete ``global_step_<N>`` directory under ``root`` with the largest N, or None.

    With ``verify=True`` the files' checksums are compared too; a damaged checkpoint is skipped and the newest
    intact one is returned. Each newer checkpoint passed over adds its :func:`checkpoint_problem` line to
    ``skipped`` (when given). A checkpoint whose overwrite was interrupted between its two renames is first moved
    back into place."""
    base = Path(root)
    if not base.is_dir():
        return None
    _recover_interrupted_overwrites(base)
    found = []
    for entry in base.iterdir():
        match = _STEP_DIR.match(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry))
    for _, entry in sorted(found, reverse=True):
        problem = checkpoint_problem(entry, checksums=verify)
        if problem is None:
            return entry
        if skipped is not None:
            skipped.append(problem)
    return None


def remove_incomplete(root: str | os.PathLike[str]) -> list[Path]:
    """Delete ``*.tmp-*`` / ``*.old-*`` leftovers of interrupted saves under ``root``; returns what was removed.

    A complete leftover whose final directory is missing (an overwrite killed between its two renames) is moved
    back into place instead of being deleted (see :func:`latest_checkpoint`). Call it while no save is in flight.
    """
    base = Path(root)
    removed = []
    if base.is_dir():
        _recover_interrupted_overwrites(base)
        for entry in base.iterdir():
            if entry.is_dir() and (".tmp-" in entry.name or ".old-" in entry.name):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


@dataclass
class LoadedCheckpoint:
    """What :func:`load_checkpoint` read.

    Attributes:
        path: the checkpoint directory.
        step: the manifest's step (from ``trainer_state["step"]``) or None.
        trainer_state: the saved trainer state dict.
        model_state: the weights (CPU tensors) when no model was given to load into, else None.
        manifest: the parsed manifest.
    """

    path: Path
    step: int | None
    trainer_state: dict[str, Any]
    model_state: dict[str, torch.Tensor] | None = None
    manifest: dict[str, Any] = field(default_factory=dict)


def load_checkpoint(
    ckpt_dir: str | os.PathLike[str],
    *,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    restore_rng: bool = True,
    strict: bool = True,
    verify: bool = True,
) -> LoadedCheckpoint:
    """Load a complete checkpoint, into ``model``/``optimizer`` when given.

    Args:
        ckpt_dir: a directory written by :func:`save_checkpoint`.
        model: loaded in place (an FSDP2 model gets its shards from the full weights).
        optimizer: loaded in place from DCP (needs ``model``).
        restore_rng: set this rank's RNG states to the saved ones (exact resume).
        strict: the model's keys must match the file's.
        verify: compare every file's sha256 with the manifest first (reads the checkpoint once more).

    Raises:
        CheckpointError: ``ckpt_dir`` is missing, incomplete, or has a missing, truncated or altered file.
    """
    path = Path(ckpt_dir)
    problem = checkpoint_problem(path, checksums=verify)
    if problem is not None:
        raise CheckpointError(problem)
    if optimizer is not None and model is None:
        raise ValueError("loading optimizer state needs the model (its keys are parameter names)")
    manifest = json.loads((path / MANIFEST).read_text())
    weights = load_file(str(path / MODEL_FILE))
    result = LoadedCheckpoint(path=path, step=manifest.get("step"), trainer_state={}, manifest=manifest)
    if model is None:
        result.model_state = weights
    elif is_fsdp_model(model):
        set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, strict=strict))
    else:
        model.load_state_dict(weights, strict=strict)

    state_dir = str(path / STATE_DIR)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed.*")
        if optimizer is not None:
            assert model is not None
            template = {"optimizer": _saved_optimizer_template(model, optimizer, state_dir)}
            dcp.load(template, checkpoint_id=state_dir, no_dist=not _dist())
            # strict=False: parameters that had no optimizer state at save time stay without state
            set_optimizer_state_dict(
                model, optimizer, template["optimizer"], options=StateDictOptions(strict=False)
            )
        keys = {"trainer"} | ({"rng"} if restore_rng and manifest_has_rng(state_dir) else set())
        saved = _load_state_dict_from_keys(keys, checkpoint_id=state_dir)
    result.trainer_state = dict(saved.get("trainer", {}))
    if restore_rng:
        rng = saved.get("rng", {}).get(f"rank{_rank()}")
        if rng is not None:
            restore_rng_state(rng)
    return result


def _saved_optimizer_template(model: nn.Module, optimizer: torch.optim.Optimizer, state_dir: str) -> Any:
    """The optimizer state dict to load into, keeping only the per-parameter entries the checkpoint holds.

    ``get_optimizer_state_dict`` gives a fresh optimizer state for every trainable parameter (it takes a zero-lr
    step), but a parameter that never received a gradient before the save (unused or frozen then) has no state
    in the checkpoint; DCP would fail with ``Missing key ... optimizer.state.<param>.step``. Such entries are
    left out of the template, so those parameters are loaded without state, as they were saved.
    """
    template = get_optimizer_state_dict(model, optimizer)
    saved = dcp.FileSystemReader(state_dir).read_metadata().state_dict_metadata
    state = template["state"]
    for fqn in list(state):
        entries = {key: value for key, value in state[fqn].items() if f"optimizer.state.{fqn}.{key}" in saved}
        if entries:
            state[fqn] = entries
        else:
            del state[fqn]
    return template


def manifest_has_rng(state_dir: str) -> bool:
    """Whether the DCP state in ``state_dir`` holds RNG states."""
    metadata = dcp.FileSystemReader(state_dir).read_metadata()
    return any(key.startswith("rng.") or key == "rng" for key in metadata.state_dict_metadata)
