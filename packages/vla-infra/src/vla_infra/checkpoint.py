"""Atomic checkpoints in formats that cannot run code: safetensors for tensors, JSON for everything else.

Layout of ``<root>/global_step_<N>/``::

    model.safetensors          full (unsharded) model weights, written by rank 0
    state/trainer.json         the trainer state (rank 0)
    state/rank<r>.json         rank r's optimizer state and RNG states, tensors replaced by references into ...
    state/rank<r>.safetensors  ... rank r's tensors (its local shards of a sharded optimizer state)
    manifest.json              format version, step, world size, every file with its size and sha256
    COMPLETE                   written last

Nothing is unpickled on load: JSON holds only numbers, strings, lists and dicts (tuples, numpy arrays and dicts
with non-string keys are tagged), and every tensor comes from a safetensors file. A sharded optimizer state is
saved as each rank's local shards; loading it needs the world size it was saved with (refused otherwise, one
line naming both sizes). Checkpoints of format 1 (PyTorch DCP, whose metadata is read with pickle) are refused.

Everything is written into ``<dir>.tmp-<uuid>`` first; after all files are fsync'ed the manifest and the
``COMPLETE`` marker are written and the directory is renamed to its final name (one atomic ``rename``), then
the parent directory is fsync'ed. A process killed at any point leaves either the previous checkpoints and a
``*.tmp-*`` directory (ignored by :func:`latest_checkpoint`, removed by :func:`remove_incomplete`) or the new
complete checkpoint. A save that fails (a full disk: ``OSError``) removes its temporary directory and raises
:class:`CheckpointSaveError`, one line naming the folder and the cause; older checkpoints are untouched. An
overwrite renames the old directory to ``<dir>.old-<uuid>`` before renaming the new one into place; if it is
killed between the two renames, :func:`latest_checkpoint` and :func:`remove_incomplete` move the complete copy
(the new ``.tmp-*`` if complete, else the ``.old-*``) back to ``<dir>``. With an initialised process group every
rank calls :func:`save_checkpoint` / :func:`load_checkpoint` together and writes its own optimizer shards.

:func:`load_checkpoint` checks every file against the manifest (size and sha256) and raises
:class:`CheckpointError` with one line naming a missing, truncated or altered file, a tensor whose shape differs
from the model's, or a file that is not what its name says; ``latest_checkpoint(root, verify=True)`` skips
damaged checkpoints (saying why in ``skipped``) and returns the newest intact one.
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

__all__ = [
    "COMPLETE_MARKER",
    "MANIFEST",
    "MODEL_FILE",
    "CheckpointError",
    "CheckpointSaveError",
    "LoadedCheckpoint",
    "capture_rng_state",
    "checkpoint_dir",
    "checkpoint_problem",
    "checkpoint_tensor_shapes",
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
TRAINER_FILE = "trainer.json"
_FORMAT_VERSION = 2
_HASH_CHUNK = 8 << 20


class CheckpointError(FileNotFoundError):
    """A checkpoint folder that is missing, incomplete (a save was interrupted), damaged, in a format this module
    does not read, or that does not fit the model; the message is one line naming the folder or the file."""


class CheckpointSaveError(OSError):
    """A save that failed (e.g. a full disk); its temporary folder is removed and older checkpoints are intact.
    The message is one line naming the folder and the cause."""


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


def _own_storage(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU, contiguous tensors with no shared storage (what safetensors accepts)."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()  # storages already owned by a saved tensor
    for name, tensor in state.items():
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


def _model_tensors(model_state: nn.Module | Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's weights as safetensors accepts them (an FSDP2 model's shards gathered)."""
    if isinstance(model_state, nn.Module):
        from vla_infra.fsdp import full_state_dict, is_fsdp_model

        if is_fsdp_model(model_state):
            state = full_state_dict(model_state, cpu_offload=True)
        else:
            state = model_state.state_dict()
    else:
        state = dict(model_state)
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"model_state[{name!r}] is {type(tensor).__name__}, expected a torch.Tensor")
    return _own_storage(state)


# JSON tags of the values JSON has no type for; a dict holding exactly one tag's keys is that value
_TENSOR, _TUPLE, _ITEMS, _NDARRAY = "__tensor__", "__tuple__", "__items__", "__ndarray__"


class _Encoder:
    """Splits a nested value into JSON data and a flat ``name -> tensor`` dict (a DTensor's local shard)."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}

    def encode(self, value: Any, where: str) -> Any:
        import numpy as np

        if isinstance(value, torch.Tensor):
            from torch.distributed.tensor import DTensor

            name = f"t{len(self.tensors)}"
            self.tensors[name] = value.to_local() if isinstance(value, DTensor) else value
            return {_TENSOR: name}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return {_NDARRAY: value.tolist(), "dtype": value.dtype.str}
        if isinstance(value, tuple):
            return {_TUPLE: [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if isinstance(value, list):
            return [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, Mapping):
            if all(isinstance(k, str) and not k.startswith("__") for k in value):
                return {k: self.encode(v, f"{where}.{k}") for k, v in value.items()}
            return {
                _ITEMS: [[self.encode(k, where), self.encode(v, f"{where}[{k!r}]")] for k, v in value.items()]
            }
        raise TypeError(
            f"{where} is a {type(value).__name__}: a checkpoint holds only tensors, numbers, strings, None, "
            "numpy arrays, and lists, tuples and dicts of them"
        )


def _decode(value: Any, tensors: Mapping[str, torch.Tensor], file: Path) -> Any:
    """The value :class:`_Encoder` encoded (tensors looked up in ``tensors``); anything else is an error."""
    import numpy as np

    if isinstance(value, list):
        return [_decode(v, tensors, file) for v in value]
    if not isinstance(value, dict):
        return value
    keys = set(value)
    if keys == {_TENSOR}:
        if value[_TENSOR] not in tensors:
            raise CheckpointError(f"{file} refers to tensor {value[_TENSOR]!r}, which its .safetensors lacks")
        return tensors[value[_TENSOR]]
    if keys == {_TUPLE} and isinstance(value[_TUPLE], list):
        return tuple(_decode(v, tensors, file) for v in value[_TUPLE])
    if keys == {_NDARRAY, "dtype"}:
        try:
            return np.asarray(value[_NDARRAY], dtype=np.dtype(str(value["dtype"])))
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"{file} holds an array that cannot be read: {exc}") from None
    if keys == {_ITEMS} and isinstance(value[_ITEMS], list):
        try:
            return {_decode(k, tensors, file): _decode(v, tensors, file) for k, v in value[_ITEMS]}
        except (TypeError, ValueError) as exc:  # an unhashable key or a malformed pair
            raise CheckpointError(f"{file} holds a malformed mapping: {exc}") from None
    return {k: _decode(v, tensors, file) for k, v in value.items()}


def _write_state(folder: Path, stem: str, value: Mapping[str, Any]) -> None:
    """``<stem>.json`` and ``<stem>.safetensors`` (tensor leaves) in ``folder``."""
    encoder = _Encoder()
    data = encoder.encode(dict(value), stem)
    save_file(_own_storage(encoder.tensors), str(folder / f"{stem}.safetensors"), metadata={"format": "pt"})
    (folder / f"{stem}.json").write_text(json.dumps(data))


def _read_tensors(file: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{file} is not a readable safetensors file: {_one_line(exc)}") from None


def _read_state(folder: Path, stem: str) -> dict[str, Any]:
    """What :func:`_write_state` wrote (JSON and safetensors only: nothing in them can run)."""
    file = folder / f"{stem}.json"
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{file} is not a readable JSON file: {_one_line(exc)}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{file} does not hold a JSON object")
    return _decode(data, _read_tensors(folder / f"{stem}.safetensors"), file)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


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
        optimizer: saved as each rank's (local) state under FQN keys; needs ``model_state`` to be the module.
        trainer_state: tensors, numbers, strings, None, numpy arrays, and lists, tuples and dicts of them (step,
            epoch, history, ...); a ``step`` entry goes to the manifest.
        save_rng: also save python/numpy/torch(/CUDA) RNG states (per rank) for exact resume.
        overwrite: replace an existing complete checkpoint at ``ckpt_dir`` (else FileExistsError).

    Returns:
        The final checkpoint directory.

    Raises:
        CheckpointSaveError: writing failed (e.g. no space left); the temporary folder is removed.
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
    try:
        _save_into(tmp, final, token[0], rank, model_state, optimizer, trainer_state, save_rng)
    except BaseException as exc:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and not isinstance(exc, (CheckpointSaveError, FileExistsError)):
            raise CheckpointSaveError(
                f"saving checkpoint {final} failed: {_one_line(exc)}; its temporary folder was removed and "
                "older checkpoints are intact"
            ) from exc
        raise
    return final


def _save_into(
    tmp: Path,
    final: Path,
    token: str,
    rank: int,
    model_state: nn.Module | Mapping[str, torch.Tensor],
    optimizer: torch.optim.Optimizer | None,
    trainer_state: Mapping[str, Any] | None,
    save_rng: bool,
) -> None:
    tensors = _model_tensors(model_state)  # a collective for FSDP: every rank runs it
    if rank == 0:
        (tmp / STATE_DIR).mkdir(parents=True)
        save_file(tensors, str(tmp / MODEL_FILE), metadata={"format": "pt"})
        _write_state(tmp / STATE_DIR, Path(TRAINER_FILE).stem, {"trainer": dict(trainer_state or {})})
    _barrier()
    del tensors

    state: dict[str, Any] = {}
    if save_rng:
        state["rng"] = capture_rng_state()
    if optimizer is not None:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        assert isinstance(model_state, nn.Module)
        state["optimizer"] = get_optimizer_state_dict(model_state, optimizer)
    _write_state(tmp / STATE_DIR, f"rank{rank}", state)
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
            old = final.parent / f"{final.name}.old-{token}"
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
        manifest = json.loads((path / MANIFEST).read_text())
        files = {str(rel): int(size) for rel, size in dict(manifest["files"]).items()}
        hashes = dict(manifest.get("sha256") or {})
        version = manifest.get("format_version")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{path / MANIFEST} is missing or unreadable ({type(exc).__name__}): the checkpoint cannot be checked"
    if version != _FORMAT_VERSION:
        return (
            f"{path} is in checkpoint format {version!r}; this version reads format {_FORMAT_VERSION} only "
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
                digest = _sha256(path / rel)
            except OSError as exc:
                return f"{path / rel} cannot be read: {_one_line(exc)}"
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
    files = json.loads((path / MANIFEST).read_text())["files"]
    shapes: dict[str, list[int]] = {}
    for rel in sorted(files):
        file = path / rel
        try:
            if rel.endswith(".json"):
                json.loads(file.read_text())
            elif rel.endswith(".safetensors"):
                with safe_open(str(file), framework="pt") as handle:
                    if rel == MODEL_FILE:
                        shapes = {name: list(handle.get_slice(name).get_shape()) for name in handle.keys()}  # noqa: SIM118
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise CheckpointError(
                f"{file} is not a readable {file.suffix[1:]} file: {_one_line(exc)}"
            ) from None
    return shapes


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
    """Load a complete checkpoint, into ``model``/``optimizer`` when given. Reads only JSON and safetensors.

    Args:
        ckpt_dir: a directory written by :func:`save_checkpoint`.
        model: loaded in place (an FSDP2 model gets its shards from the full weights).
        optimizer: loaded in place from this rank's saved state (needs ``model``, and the world size the
            checkpoint was saved with).
        restore_rng: set this rank's RNG states to the saved ones (exact resume).
        strict: the model's keys must match the file's.
        verify: compare every file's sha256 with the manifest first (reads the checkpoint once more).

    Raises:
        CheckpointError: ``ckpt_dir`` is missing, incomplete, in another format, has a missing, truncated,
            altered or unreadable file, or does not fit ``model`` / ``optimizer`` (one line naming the tensor).
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    from vla_infra.fsdp import is_fsdp_model

    path = Path(ckpt_dir)
    problem = checkpoint_problem(path, checksums=verify)
    if problem is not None:
        raise CheckpointError(problem)
    if optimizer is not None and model is None:
        raise ValueError("loading optimizer state needs the model (its keys are parameter names)")
    manifest = json.loads((path / MANIFEST).read_text())
    weights = _read_tensors(path / MODEL_FILE)
    result = LoadedCheckpoint(path=path, step=manifest.get("step"), trainer_state={}, manifest=manifest)
    if model is None:
        result.model_state = weights
    else:
        _check_model_fits(path / MODEL_FILE, model, weights, strict)
        if is_fsdp_model(model):
            set_model_state_dict(
                model, weights, options=StateDictOptions(full_state_dict=True, strict=strict)
            )
        else:
            model.load_state_dict(weights, strict=strict)
    del weights

    state_dir = path / STATE_DIR
    trainer = _read_state(state_dir, Path(TRAINER_FILE).stem).get("trainer", {})
    if not isinstance(trainer, dict):
        raise CheckpointError(f"{state_dir / TRAINER_FILE} holds no trainer state object")
    result.trainer_state = trainer
    world = dist.get_world_size() if _dist() else 1
    saved_world = manifest.get("world_size", 1)
    stem = f"rank{_rank()}"
    has_rank_file = (state_dir / f"{stem}.json").is_file()
    if optimizer is not None and (saved_world != world or not has_rank_file):
        raise CheckpointError(
            f"{path} was saved by {saved_world} rank(s) and is loaded by {world}: its optimizer state loads "
            "only with the world size it was saved with"
        )
    if optimizer is None and not (restore_rng and has_rank_file):
        return result
    rank_state = _read_state(state_dir, stem)
    if optimizer is not None:
        assert model is not None
        saved = rank_state.get("optimizer")
        if not isinstance(saved, dict):
            raise CheckpointError(
                f"{state_dir / (stem + '.json')} holds no optimizer state (saved without one)"
            )
        state = _optimizer_state_for(model, optimizer, saved, state_dir / f"{stem}.json")
        # strict=False: parameters that had no optimizer state at save time stay without state
        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(strict=False))
    if restore_rng and isinstance(rank_state.get("rng"), dict):
        try:
            restore_rng_state(rank_state["rng"])
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise CheckpointError(
                f"{state_dir / (stem + '.json')} holds unusable RNG states: {_one_line(exc)}"
            ) from None
    return result


def _check_model_fits(
    file: Path, model: nn.Module, weights: Mapping[str, torch.Tensor], strict: bool
) -> None:
    """One line naming the first tensor whose shape differs from the model's, or (``strict``) missing and
    unexpected names, instead of torch's multi-line error."""
    own = model.state_dict()
    for name, tensor in weights.items():
        if name in own and tuple(own[name].shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"{file}: tensor {name} has shape {list(tensor.shape)}, the model's is {list(own[name].shape)} "
                "(a checkpoint of another model size)"
            )
    if strict:
        missing = sorted(set(own) - set(weights))
        unexpected = sorted(set(weights) - set(own))
        if missing or unexpected:
            raise CheckpointError(
                f"{file} does not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
            )


def _optimizer_state_for(
    model: nn.Module, optimizer: torch.optim.Optimizer, saved: dict[str, Any], file: Path
) -> dict[str, Any]:
    """The saved optimizer state with each tensor on the device, dtype and sharding of the optimizer's own.

    ``get_optimizer_state_dict`` gives the optimizer's state for every trainable parameter; a parameter that
    never received a gradient before the save has no saved state and is loaded without state, as it was saved.
    """
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    from torch.distributed.tensor import DTensor

    template = get_optimizer_state_dict(model, optimizer)["state"]
    groups = saved.get("param_groups")
    entries = saved.get("state")
    if not isinstance(groups, list) or not isinstance(entries, dict):
        raise CheckpointError(f"{file}: the optimizer state lacks its 'state' or 'param_groups'")
    state: dict[str, Any] = {}
    for fqn, values in entries.items():
        if fqn not in template or not isinstance(values, dict):
            raise CheckpointError(f"{file}: optimizer state for {fqn!r}, which is not a trainable parameter")
        out = {}
        for key, value in values.items():
            ref = template[fqn].get(key)
            if isinstance(value, torch.Tensor) and isinstance(ref, torch.Tensor):
                local = ref.to_local() if isinstance(ref, DTensor) else ref
                if tuple(value.shape) != tuple(local.shape):
                    raise CheckpointError(
                        f"{file}: optimizer state {fqn}.{key} has shape {list(value.shape)}, the model's is "
                        f"{list(local.shape)}"
                    )
                value = value.to(device=local.device, dtype=local.dtype)
                if isinstance(ref, DTensor):
                    value = DTensor.from_local(
                        value,
                        ref.device_mesh,
                        ref.placements,
                        shape=ref.shape,
                        stride=ref.stride(),
                        run_check=False,
                    )
            out[key] = value
        state[fqn] = out
    return {"state": state, "param_groups": groups}
