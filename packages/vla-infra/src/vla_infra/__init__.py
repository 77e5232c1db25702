"""Placement, worker groups (local and Ray), channels, collectives (`dist`), offload, FSDP2, weight sync,
checkpoints, metric loggers.

Public names are imported lazily (on first access), so that an optional dependency of one module
(e.g. ``ray`` for :class:`RayBackend`) never breaks the others.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> module that defines it
_EXPORTS: dict[str, str] = {
    # placement, workers, channels
    "KNOWN_COMPONENTS": "vla_infra.placement",
    "ProcessPlacement": "vla_infra.placement",
    "resolve_placement": "vla_infra.placement",
    "Worker": "vla_infra.workers.worker",
    "WorkerInfo": "vla_infra.workers.worker",
    "register": "vla_infra.workers.dispatch",
    "DISPATCH_MODES": "vla_infra.workers.dispatch",
    "COLLECT_MODES": "vla_infra.workers.dispatch",
    "concat_values": "vla_infra.workers.dispatch",
    "unit_bounds": "vla_infra.workers.dispatch",
    "WorkerGroup": "vla_infra.workers.group",
    "GroupFuture": "vla_infra.workers.group",
    "WorkerLost": "vla_infra.workers.failures",
    "WorkerFailure": "vla_infra.workers.failures",
    "WorkerTimeout": "vla_infra.workers.failures",
    "NodeLost": "vla_infra.workers.failures",
    "phase": "vla_infra.workers.failures",
    "Backend": "vla_infra.workers.backend",
    "LocalBackend": "vla_infra.workers.local_backend",
    "RayBackend": "vla_infra.workers.ray_backend",
    "Channel": "vla_infra.channel",
    "LocalChannel": "vla_infra.channel",
    "RayChannel": "vla_infra.channel",
    "make_backend": "vla_infra.workers.factory",
}

# offload, FSDP2, weight sync, checkpoints, logging
_EXPORTS.update(
    {
        # offload (enable_offload)
        "offload_module": "vla_infra.offload",
        "reload_module": "vla_infra.offload",
        "offload_optimizer": "vla_infra.offload",
        "reload_optimizer": "vla_infra.offload",
        "offload_env": "vla_infra.offload",
        "reload_env": "vla_infra.offload",
        "is_offloaded": "vla_infra.offload",
        "ModelOffloader": "vla_infra.offload",
        "OffloadableEnv": "vla_infra.offload",
        # FSDP2
        "FSDPConfig": "vla_infra.fsdp",
        "apply_fsdp2": "vla_infra.fsdp",
        "enable_gradient_checkpointing": "vla_infra.fsdp",
        "mixed_precision_policy": "vla_infra.fsdp",
        "parse_dtype": "vla_infra.fsdp",
        "full_state_dict": "vla_infra.fsdp",
        "spawn_local_group": "vla_infra.fsdp",
        "find_free_port": "vla_infra.fsdp",
        # weight sync actor -> rollout
        "WeightSync": "vla_infra.weight_sync",
        "WeightSyncCoordinator": "vla_infra.weight_sync",
        "StaleWeightsError": "vla_infra.weight_sync",
        "WeightSenderWorker": "vla_infra.weight_sync",
        "WeightReceiverWorker": "vla_infra.weight_sync",
        # checkpoints
        "save_checkpoint": "vla_infra.checkpoint",
        "load_checkpoint": "vla_infra.checkpoint",
        "read_trainer_state": "vla_infra.checkpoint",
        "latest_checkpoint": "vla_infra.checkpoint",
        "checkpoint_dir": "vla_infra.checkpoint",
        "is_complete": "vla_infra.checkpoint",
        "capture_rng_state": "vla_infra.checkpoint",
        "restore_rng_state": "vla_infra.checkpoint",
        "LoadedCheckpoint": "vla_infra.checkpoint",
        "COMPLETE_MARKER": "vla_infra.checkpoint",
        "MANIFEST": "vla_infra.checkpoint",
        "MODEL_FILE": "vla_infra.checkpoint",
        "checkpoint_problem": "vla_infra.checkpoint",
        "checkpoint_tensor_shapes": "vla_infra.checkpoint",
        "CheckpointError": "vla_infra.checkpoint",
        "CheckpointSaveError": "vla_infra.checkpoint",
        # collectives over the default process group (identities without one)
        "gather_objects": "vla_infra.dist",
        "all_reduce_sum": "vla_infra.dist",
        "all_reduce_sums": "vla_infra.dist",
        "clip_grad_norm": "vla_infra.dist",
        "is_distributed": "vla_infra.dist",
        "collective_device": "vla_infra.dist",
        # metric logging
        "MetricLogger": "vla_infra.logging",
        "StepTimer": "vla_infra.logging",
        "namespaced": "vla_infra.logging",
    }
)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vla_infra' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = ["__version__", *_EXPORTS]
