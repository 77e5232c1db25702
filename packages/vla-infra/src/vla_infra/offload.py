"""Offload and reload of a worker's tensors between phases (`enable_offload`).

Three kinds of state leave the accelerator while another phase runs on it:

- the actor's parameters, gradients and optimizer state (``offload_module`` / ``offload_optimizer``),
- the rollout model (``offload_module``),
- the env simulators, released through the :class:`OffloadableEnv` protocol (``offload()`` / ``onload()``,
  implemented by the ``vla_envs`` envs); :func:`offload_env` / :func:`reload_env` call it.

Every tensor is *copied* into host memory (pinned when CUDA exists, so the reload can be asynchronous) and the
device copy is dropped; the reload copies the bytes back to the exact device the tensor came from (an
optimizer's ``step`` counter that lived on the CPU stays on the CPU). Values are bit-identical after the round
trip because nothing is cast. On a CPU-only machine the "device" and the host are both the CPU: the same code
runs, the tensors are still moved into fresh storage, nothing is freed in total.
"""

from __future__ import annotations

import weakref
from typing import Protocol, runtime_checkable

import torch
from torch import nn

__all__ = [
    "ModelOffloader",
    "OffloadableEnv",
    "is_offloaded",
    "offload_env",
    "offload_module",
    "offload_optimizer",
    "reload_env",
    "reload_module",
    "reload_optimizer",
]

# Original device of each offloaded tensor, keyed by the owning module / optimizer (weakly, so that an
# offloaded object that is garbage collected does not leak its record).
_MODULE_DEVICES: weakref.WeakKeyDictionary[nn.Module, list[torch.device]] = weakref.WeakKeyDictionary()
_OPTIM_DEVICES: weakref.WeakKeyDictionary[torch.optim.Optimizer, dict[tuple[int, str], torch.device]] = (
    weakref.WeakKeyDictionary()
)


def _default_pin() -> bool:
    return torch.cuda.is_available()


def _to_host(tensor: torch.Tensor, *, pin_memory: bool) -> torch.Tensor:
    """Copy ``tensor`` into new host storage (pinned if asked); always a copy, never an alias."""
    if _is_dtensor(tensor):
        # DTensor: move its local shard, keep mesh and placements (FSDP2 parameters are DTensors).
        return tensor.to("cpu", copy=True)
    host = torch.empty_like(tensor, device="cpu", pin_memory=pin_memory and tensor.device.type != "cpu")
    host.copy_(tensor, non_blocking=tensor.device.type != "cpu")
    return host


def _to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    if _is_dtensor(tensor):
        return tensor.to(device, copy=True)
    out = torch.empty_like(tensor, device=device)
    out.copy_(tensor, non_blocking=tensor.is_pinned())
    return out


def _is_dtensor(tensor: torch.Tensor) -> bool:
    return type(tensor).__name__ == "DTensor"


def _sync(device_types: set[str]) -> None:
    if "cuda" in device_types and torch.cuda.is_available():
        torch.cuda.synchronize()


def is_offloaded(obj: nn.Module | torch.optim.Optimizer) -> bool:
    """Whether ``obj`` (a module or an optimizer) is currently offloaded by this module's helpers."""
    registry = _MODULE_DEVICES if isinstance(obj, nn.Module) else _OPTIM_DEVICES
    return obj in registry


def offload_module(module: nn.Module, *, pin_memory: bool | None = None, empty_cache: bool = True) -> None:
    """Move a module's parameters, gradients and buffers into host memory.

    Goes through ``nn.Module._apply`` (what ``module.to()`` uses), so parameter objects keep their identity
    (an optimizer holding them stays valid) and FSDP2 modules re-point their sharded storage at the moved
    tensors (``FSDPModule._apply`` calls ``reset_sharded_param``), which is what frees the device memory.

    Args:
        module: the model (plain or FSDP2-sharded).
        pin_memory: pin the host copies of plain tensors; default True when CUDA is available.
        empty_cache: release cached CUDA blocks afterwards so another phase can use the memory.

    Raises:
        RuntimeError: if ``module`` is already offloaded.
    """
    if module in _MODULE_DEVICES:
        raise RuntimeError(f"module {type(module).__name__} is already offloaded; call reload_module first")
    pin = _default_pin() if pin_memory is None else pin_memory
    devices: list[torch.device] = []  # in _apply's visiting order, replayed by reload_module

    def to_host(tensor: torch.Tensor) -> torch.Tensor:
        devices.append(tensor.device)
        return _to_host(tensor, pin_memory=pin)

    module._apply(to_host)
    _sync({d.type for d in devices})
    _MODULE_DEVICES[module] = devices
    if empty_cache and torch.cuda.is_available():
        torch.cuda.empty_cache()


def reload_module(module: nn.Module) -> None:
    """Move everything :func:`offload_module` moved back to the device each tensor came from.

    Raises:
        RuntimeError: if ``module`` is not offloaded, or its tensors changed while it was offloaded.
    """
    devices = _MODULE_DEVICES.pop(module, None)
    if devices is None:
        raise RuntimeError(f"module {type(module).__name__} is not offloaded; nothing to reload")
    visited = 0

    def to_device(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal visited
        if visited >= len(devices):
            raise RuntimeError("module gained tensors while offloaded; cannot tell where they belong")
        visited += 1
        return _to_device(tensor, devices[visited - 1])

    module._apply(to_device)
    if visited != len(devices):
        raise RuntimeError(f"module lost tensors while offloaded ({visited} of {len(devices)} reloaded)")
    _sync({d.type for d in devices})


def offload_optimizer(
    optimizer: torch.optim.Optimizer, *, pin_memory: bool | None = None, empty_cache: bool = True
) -> None:
    """Move every tensor of ``optimizer.state`` (e.g. Adam moments, step counters) into host memory.

    Raises:
        RuntimeError: if ``optimizer`` is already offloaded.
    """
    if optimizer in _OPTIM_DEVICES:
        raise RuntimeError(f"optimizer {type(optimizer).__name__} is already offloaded")
    pin = _default_pin() if pin_memory is None else pin_memory
    devices: dict[tuple[int, str], torch.device] = {}
    for param, state in optimizer.state.items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                devices[(id(param), key)] = value.device
                state[key] = _to_host(value, pin_memory=pin)
    _sync({d.type for d in devices.values()})
    _OPTIM_DEVICES[optimizer] = devices
    if empty_cache and torch.cuda.is_available():
        torch.cuda.empty_cache()


def reload_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Move the optimizer state back to the devices it had before :func:`offload_optimizer`.

    Raises:
        RuntimeError: if ``optimizer`` is not offloaded.
    """
    devices = _OPTIM_DEVICES.pop(optimizer, None)
    if devices is None:
        raise RuntimeError(f"optimizer {type(optimizer).__name__} is not offloaded; nothing to reload")
    for param, state in optimizer.state.items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and (id(param), key) in devices:
                state[key] = _to_device(value, devices[(id(param), key)])
    _sync({d.type for d in devices.values()})


@runtime_checkable
class OffloadableEnv(Protocol):
    """An env whose simulators can be released between phases (`env.enable_offload`).

    ``offload()`` releases the simulators' memory (host and device: e.g. stops the simulator processes);
    ``onload()`` builds them again. What the env keeps in the caller's process (start-state generators, episode and
    fault counters) survives; whether an episode in flight does is the env's to say: the ``vla_envs`` envs end it
    and ask for a ``reset()`` next (which onloads by itself), so an offload belongs between rollouts that each
    start with a reset. Both are no-ops when already in that state.
    """

    def offload(self) -> None: ...

    def onload(self) -> None: ...


def offload_env(env: object) -> bool:
    """Suspend ``env`` if it implements :class:`OffloadableEnv`; returns whether it did."""
    if isinstance(env, OffloadableEnv):
        env.offload()
        return True
    return False


def reload_env(env: object) -> bool:
    """Resume ``env`` if it implements :class:`OffloadableEnv`; returns whether it did."""
    if isinstance(env, OffloadableEnv):
        env.onload()
        return True
    return False


class ModelOffloader:
    """Offload switch for one worker's model (and optimizer), honouring its ``enable_offload`` flag.

    Example:
        >>> off = ModelOffloader(model, optimizer, enabled=cfg.enable_offload)
        >>> off.offload()      # after the training phase
        >>> off.reload()       # before the next one
    """

    def __init__(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        enabled: bool = True,
        pin_memory: bool | None = None,
    ) -> None:
        self.module = module
        self.optimizer = optimizer
        self.enabled = enabled
        self.pin_memory = pin_memory

    @property
    def offloaded(self) -> bool:
        return is_offloaded(self.module)

    def offload(self) -> None:
        """Offload the module (params, grads, buffers) and the optimizer state; no-op if disabled or done."""
        if not self.enabled or self.offloaded:
            return
        offload_module(self.module, pin_memory=self.pin_memory)
        if self.optimizer is not None:
            offload_optimizer(self.optimizer, pin_memory=self.pin_memory)

    def reload(self) -> None:
        """Bring back what :meth:`offload` moved; no-op if disabled or not offloaded."""
        if not self.enabled or not self.offloaded:
            return
        reload_module(self.module)
        if self.optimizer is not None and is_offloaded(self.optimizer):
            reload_optimizer(self.optimizer)
