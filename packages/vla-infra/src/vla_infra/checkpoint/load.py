"""Reading a checkpoint back into a model, its optimizer and the RNG states, after checking it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from vla_infra.checkpoint.files import (
    MANIFEST,
    MODEL_FILE,
    STATE_DIR,
    TRAINER_FILE,
    CheckpointError,
    is_distributed,
    one_line,
    process_rank,
    read_json,
)
from vla_infra.checkpoint.rng import restore_rng_state
from vla_infra.checkpoint.state_files import read_state, read_tensors
from vla_infra.checkpoint.verify import checkpoint_problem


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
    manifest = read_json(path / MANIFEST)
    weights = read_tensors(path / MODEL_FILE)
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
    result.trainer_state = _trainer_state(path)
    world = dist.get_world_size() if is_distributed() else 1
    saved_world = manifest.get("world_size", 1)
    stem = f"rank{process_rank()}"
    has_rank_file = (state_dir / f"{stem}.json").is_file()
    if optimizer is not None and (saved_world != world or not has_rank_file):
        raise CheckpointError(
            f"{path} was saved by {saved_world} rank(s) and is loaded by {world}: its optimizer state loads "
            "only with the world size it was saved with"
        )
    if optimizer is None and not (restore_rng and has_rank_file):
        return result
    rank_state = read_state(state_dir, stem)
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
                f"{state_dir / (stem + '.json')} holds unusable RNG states: {one_line(exc)}"
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


def read_trainer_state(ckpt_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The trainer state saved with a checkpoint (what ``save_checkpoint`` got as ``trainer_state``), read without
    the model or optimizer files (sizes checked, no checksums: a cheap look before a resume).

    Raises:
        CheckpointError: the checkpoint is incomplete or damaged, or its trainer state is unreadable (one line).
    """
    path = Path(ckpt_dir)
    problem = checkpoint_problem(path, checksums=False)
    if problem is not None:
        raise CheckpointError(problem)
    return _trainer_state(path)


def _trainer_state(path: Path) -> dict[str, Any]:
    state_dir = path / STATE_DIR
    trainer = read_state(state_dir, Path(TRAINER_FILE).stem).get("trainer", {})
    if not isinstance(trainer, dict):
        raise CheckpointError(f"{state_dir / TRAINER_FILE} holds no trainer state object")
    return trainer
