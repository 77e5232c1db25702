"""Actor training with FSDP2 (``torch.distributed.fsdp.fully_shard``).

:func:`apply_fsdp2` shards every transformer block (chosen by class name or by a predicate) and then the root
module, with a mixed-precision policy built from config strings ("bf16", "fp16", "fp32"), optional
activation checkpointing of the blocks and an optional CPU offload policy. :func:`full_state_dict` gathers
the unsharded weights (for checkpoints and weight sync). :func:`spawn_local_group` runs a function in N local
processes joined in a process group on 127.0.0.1 (gloo on the CPU), which is how the tests train with two
ranks on a machine without GPUs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.utils.checkpoint import checkpoint

from vla_infra.workers.worker import find_free_port  # re-exported: spawn_local_group's rendezvous port

__all__ = [
    "DTYPES",
    "FSDPConfig",
    "apply_fsdp2",
    "enable_gradient_checkpointing",
    "find_free_port",
    "full_state_dict",
    "is_fsdp_model",
    "mixed_precision_policy",
    "parse_dtype",
    "spawn_local_group",
]

DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
}

LayerPredicate = Callable[[str, nn.Module], bool]


def parse_dtype(name: str | torch.dtype, *, key: str = "dtype") -> torch.dtype:
    """Turn a config string ("bf16", "fp16", "fp32" or the long torch names) into a ``torch.dtype``.

    Raises:
        ValueError: naming ``key``, the bad value and the allowed strings.
    """
    if isinstance(name, torch.dtype):
        return name
    dtype = DTYPES.get(str(name).lower())
    if dtype is None:
        raise ValueError(f"{key}={name!r} is not a known dtype; allowed: {sorted(DTYPES)}")
    return dtype


@dataclass(frozen=True, kw_only=True)
class FSDPConfig:
    """FSDP2 settings of the actor (``actor.fsdp_config``).

    Attributes:
        param_dtype: dtype of the unsharded parameters in forward/backward ("bf16" or "fp32").
        reduce_dtype: dtype of the gradient reduce-scatter.
        output_dtype: dtype the root module's outputs are cast to; None keeps them.
        gradient_checkpointing: recompute each block's activations in backward.
        cpu_offload: keep sharded parameters, grads and optimizer state on the CPU (``CPUOffloadPolicy``).
        reshard_after_forward: free the unsharded parameters after forward (ZeRO-3) or keep them (ZeRO-2).
        wrap_classes: class names of the blocks to shard one by one (e.g. ``("LlamaDecoderLayer",)``).
        cast_root_inputs: cast the floating-point inputs of the root module's forward (and of its registered
            forward methods) to ``param_dtype``. False when the model casts its own inputs, e.g. to keep a
            sampling temperature in fp32 (bf16 turns 1.6 into 1.6015625). Blocks always cast their inputs.
    """

    param_dtype: str = "fp32"
    reduce_dtype: str = "fp32"
    output_dtype: str | None = None
    gradient_checkpointing: bool = False
    cpu_offload: bool = False
    reshard_after_forward: bool = True
    wrap_classes: tuple[str, ...] = field(default_factory=tuple)
    cast_root_inputs: bool = True

    def __post_init__(self) -> None:
        parse_dtype(self.param_dtype, key="param_dtype")
        parse_dtype(self.reduce_dtype, key="reduce_dtype")
        if self.output_dtype is not None:
            parse_dtype(self.output_dtype, key="output_dtype")
        if isinstance(self.wrap_classes, str):
            object.__setattr__(self, "wrap_classes", (self.wrap_classes,))
        object.__setattr__(self, "wrap_classes", tuple(self.wrap_classes))

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any]) -> FSDPConfig:
        """Build from a plain mapping; a nested ``mixed_precision`` dict (param_dtype, reduce_dtype) is accepted.

        Raises:
            ValueError: for a key that is not a field of this class.
        """
        flat = dict(cfg)
        mixed = flat.pop("mixed_precision", None) or {}
        flat.update(
            {k: v for k, v in dict(mixed).items() if k in ("param_dtype", "reduce_dtype", "output_dtype")}
        )
        allowed = {f.name for f in fields(cls)}
        unknown = sorted(set(flat) - allowed)
        if unknown:
            raise ValueError(f"unknown fsdp_config keys {unknown}; allowed: {sorted(allowed)}")
        return cls(**flat)


def mixed_precision_policy(
    param_dtype: str | torch.dtype = "fp32",
    reduce_dtype: str | torch.dtype = "fp32",
    output_dtype: str | torch.dtype | None = None,
    *,
    cast_forward_inputs: bool = True,
) -> MixedPrecisionPolicy:
    """``MixedPrecisionPolicy`` from dtype strings (e.g. ``("bf16", "fp32")``: bf16 compute, fp32 reduction)."""
    return MixedPrecisionPolicy(
        param_dtype=parse_dtype(param_dtype, key="param_dtype"),
        reduce_dtype=parse_dtype(reduce_dtype, key="reduce_dtype"),
        output_dtype=None if output_dtype is None else parse_dtype(output_dtype, key="output_dtype"),
        cast_forward_inputs=cast_forward_inputs,
    )


def _select_blocks(
    model: nn.Module, *, wrap_classes: Iterable[str], layer_predicate: LayerPredicate | None
) -> list[tuple[str, nn.Module]]:
    classes = set(wrap_classes)
    blocks = [
        (name, mod)
        for name, mod in model.named_modules()
        if mod is not model
        and (type(mod).__name__ in classes or (layer_predicate is not None and layer_predicate(name, mod)))
    ]
    if not blocks and (classes or layer_predicate is not None):
        present = sorted({type(m).__name__ for m in model.modules()})
        raise ValueError(
            f"no submodule matched wrap_classes={sorted(classes)} / layer_predicate; module classes present: {present}"
        )
    return blocks


def enable_gradient_checkpointing(
    model: nn.Module,
    *,
    wrap_classes: Iterable[str] = (),
    layer_predicate: LayerPredicate | None = None,
) -> int:
    """Recompute the activations of each selected block in backward (non-reentrant checkpointing).

    The block's ``forward`` is replaced on the instance, so parameter names and state-dict keys do not change
    and FSDP2's hooks (which run around ``__call__``) still unshard the block before the recomputation.

    Returns:
        The number of blocks switched to checkpointing.
    """
    blocks = _select_blocks(model, wrap_classes=wrap_classes, layer_predicate=layer_predicate)
    for _, block in blocks:
        if getattr(block, "_vla_checkpointed", False):
            continue
        original = block.forward

        @functools.wraps(original)
        def checkpointed_forward(*args: Any, _fwd: Callable[..., Any] = original, **kwargs: Any) -> Any:
            return checkpoint(_fwd, *args, use_reentrant=False, **kwargs)

        block.forward = checkpointed_forward  # type: ignore[method-assign]
        block._vla_checkpointed = True  # type: ignore[attr-defined]
    return len(blocks)


def apply_fsdp2(
    model: nn.Module,
    config: FSDPConfig | None = None,
    *,
    mesh: Any | None = None,
    layer_predicate: LayerPredicate | None = None,
) -> nn.Module:
    """Shard ``model`` with FSDP2: each selected block first, then the root.

    Args:
        model: the module to shard, in place (its class becomes an ``FSDPModule``).
        config: precision, checkpointing, offload and block selection; defaults to ``FSDPConfig()``.
        mesh: a 1-D ``DeviceMesh``; default: all ranks of the default process group on the current device type.
        layer_predicate: ``(qualified_name, module) -> bool`` choosing blocks, in addition to
            ``config.wrap_classes``.

    Returns:
        ``model`` itself, sharded.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "apply_fsdp2 needs an initialised process group (torch.distributed.init_process_group)"
        )
    cfg = config or FSDPConfig()
    blocks = _select_blocks(model, wrap_classes=cfg.wrap_classes, layer_predicate=layer_predicate)
    if cfg.gradient_checkpointing:
        if not blocks:
            raise ValueError("gradient_checkpointing=True needs blocks: set wrap_classes or layer_predicate")
        enable_gradient_checkpointing(model, wrap_classes=cfg.wrap_classes, layer_predicate=layer_predicate)
    kwargs: dict[str, Any] = {
        "mesh": mesh,
        "reshard_after_forward": cfg.reshard_after_forward,
        "mp_policy": mixed_precision_policy(cfg.param_dtype, cfg.reduce_dtype, cfg.output_dtype),
        "offload_policy": CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
        if cfg.cpu_offload
        else OffloadPolicy(),
    }
    # Inner blocks before outer ones: fully_shard must see a nested block before its parent.
    for _, block in reversed(blocks):
        fully_shard(block, **kwargs)
    root_mp = mixed_precision_policy(
        cfg.param_dtype, cfg.reduce_dtype, cfg.output_dtype, cast_forward_inputs=cfg.cast_root_inputs
    )
    fully_shard(model, **{**kwargs, "mp_policy": root_mp})
    return model


def is_fsdp_model(model: nn.Module) -> bool:
    """Whether ``fully_shard`` was applied to ``model`` or one of its submodules."""
    return any(type(m).__name__.startswith("FSDP") for m in model.modules())


def full_state_dict(model: nn.Module, *, cpu_offload: bool = True) -> dict[str, torch.Tensor]:
    """The unsharded state dict of a (possibly FSDP2-sharded) model, keyed by parameter/buffer FQN.

    A collective on a sharded model: every rank of its mesh must call it. With ``cpu_offload=True`` the
    tensors are on the CPU and only rank 0 receives them (other ranks get ``{}``); with False every rank
    gets the full tensors on the device.
    """
    return get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload)
    )


def _group_entry(
    rank: int, fn: Callable[..., Any], world_size: int, port: int, backend: str, args: tuple[Any, ...]
) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
    )
    if "OMP_NUM_THREADS" not in os.environ:
        # Like torchrun: do not let every rank start one thread per core (oversubscription on the CPU).
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    if backend == "nccl":
        torch.cuda.set_device(rank)
    from vla_infra.rendezvous import tcp_store

    if backend == "gloo":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # local ranks: gloo's connections on loopback
    store = tcp_store("127.0.0.1", port, world_size, is_master=rank == 0)  # loopback only
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


def spawn_local_group(
    fn: Callable[..., Any], *, world_size: int, args: tuple[Any, ...] = (), backend: str = "gloo"
) -> None:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` new processes joined in one process group.

    The group rendezvous on 127.0.0.1 at a free port. ``fn`` must be importable by name (a module-level
    function) because the processes are started with ``spawn``. Raises if any process fails.
    """
    if world_size < 1:
        raise ValueError(f"world_size={world_size} must be >= 1")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend={backend!r} is not supported; allowed: 'gloo', 'nccl'")
    mp.spawn(
        _group_entry, args=(fn, world_size, find_free_port(), backend, args), nprocs=world_size, join=True
    )
