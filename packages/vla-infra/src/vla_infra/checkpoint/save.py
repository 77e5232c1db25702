"""Writing a checkpoint: into a temporary folder, fsync'ed, manifest and marker last, renamed into place."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from safetensors.torch import save_file
from torch import nn

from vla_infra.checkpoint.files import (
    COMPLETE_MARKER,
    FORMAT_VERSION,
    MANIFEST,
    MODEL_FILE,
    STATE_DIR,
    TRAINER_FILE,
    CheckpointSaveError,
    barrier_if_distributed,
    fsync_dir,
    fsync_tree,
    is_distributed,
    one_line,
    process_rank,
    sha256_file,
    write_durable,
)
from vla_infra.checkpoint.rng import capture_rng_state
from vla_infra.checkpoint.state_files import own_storage, write_state
from vla_infra.checkpoint.verify import is_complete


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
    return own_storage(state)


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
    if is_distributed():
        dist.broadcast_object_list(token, src=0)  # all ranks must write into the same temp dir
    tmp = final.parent / f"{final.name}.tmp-{token[0]}"
    rank = process_rank()
    try:
        _save_into(tmp, final, token[0], rank, model_state, optimizer, trainer_state, save_rng)
    except BaseException as exc:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        # safetensors reports a failed write (a full disk, a file size limit) as its own SafetensorError
        write_failed = isinstance(exc, OSError) or type(exc).__name__ == "SafetensorError"
        if write_failed and not isinstance(exc, (CheckpointSaveError, FileExistsError)):
            raise CheckpointSaveError(
                f"saving checkpoint {final} failed: {one_line(exc)}; its temporary folder was removed and "
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
        write_state(tmp / STATE_DIR, Path(TRAINER_FILE).stem, {"trainer": dict(trainer_state or {})})
    barrier_if_distributed()
    del tensors

    state: dict[str, Any] = {}
    if save_rng:
        state["rng"] = capture_rng_state()
    if optimizer is not None:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        assert isinstance(model_state, nn.Module)
        state["optimizer"] = get_optimizer_state_dict(model_state, optimizer)
    write_state(tmp / STATE_DIR, f"rank{rank}", state)
    barrier_if_distributed()

    if rank == 0:
        fsync_tree(tmp)
        paths = [p for p in sorted(tmp.rglob("*")) if p.is_file()]
        files = {str(p.relative_to(tmp)): p.stat().st_size for p in paths}
        manifest = {
            "format_version": FORMAT_VERSION,
            "step": (trainer_state or {}).get("step"),
            "world_size": dist.get_world_size() if is_distributed() else 1,
            "has_optimizer": optimizer is not None,
            "created_unix": time.time(),
            "files": files,
            "sha256": {str(p.relative_to(tmp)): sha256_file(p) for p in paths},
        }
        write_durable(tmp / MANIFEST, json.dumps(manifest, indent=1))
        write_durable(tmp / COMPLETE_MARKER, "ok\n")
        fsync_dir(tmp)
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
        fsync_dir(final.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    barrier_if_distributed()
