"""Loading a checkpoint into a model without first creating the weights it replaces.

A loader builds the policy inside :func:`weights_from_checkpoint`; the policy constructors build the body every
checkpoint of the family holds (the Prismatic backbone, PaliGemma with its expert) inside
:func:`checkpoint_backed`, which then gives that body's parameters on the ``meta`` device (shapes and dtypes, no
storage, no random init). Buffers stay real: non-persistent ones (rotary frequencies) are not in checkpoints.
:func:`assign_state_dict` then makes each checkpoint tensor the parameter itself (``load_state_dict(assign=True)``),
so the weights exist once in memory: peak ~ one copy of the weights instead of the model plus the checkpoint.
Outside :func:`weights_from_checkpoint` (``build_policy`` with random weights) nothing changes.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator

import torch
from torch import nn

_FROM_CHECKPOINT: contextvars.ContextVar[bool] = contextvars.ContextVar("from_checkpoint", default=False)


@contextlib.contextmanager
def weights_from_checkpoint() -> Iterator[None]:
    """Within: the bodies built under :func:`checkpoint_backed` get meta parameters (a loader fills them)."""
    token = _FROM_CHECKPOINT.set(True)
    try:
        yield
    finally:
        _FROM_CHECKPOINT.reset(token)


#: True while this thread (context) builds a checkpoint-backed body: its parameters are created on ``meta``.
_ON_META: contextvars.ContextVar[bool] = contextvars.ContextVar("params_on_meta", default=False)
_INSTALL = threading.Lock()
_installed = False


def _install_meta_registration() -> None:
    """Wrap ``nn.Module.register_parameter`` once per process so that it moves a new parameter to ``meta`` while
    :data:`_ON_META` is set in the calling context. The flag is a context variable, so a module built at the same
    time on another thread (the local backend runs workers on threads) keeps real parameters, and the wrapper is
    never swapped back, so overlapping loads cannot leave it in a wrong state."""
    global _installed
    with _INSTALL:
        if _installed:
            return
        register = nn.Module.register_parameter

        def register_parameter(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
            register(module, name, param)
            if param is not None and _ON_META.get() and not param.is_meta:
                module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

        nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
        _installed = True


@contextlib.contextmanager
def checkpoint_backed() -> Iterator[None]:
    """Around the construction of a module whose every weight a checkpoint supplies: inside
    :func:`weights_from_checkpoint` its parameters are created on ``meta``; otherwise a no-op."""
    if not _FROM_CHECKPOINT.get():
        yield
        return
    _install_meta_registration()
    outer = _FROM_CHECKPOINT.set(False)  # modules built inside are not wrapped twice
    on_meta = _ON_META.set(True)
    try:
        yield
    finally:
        _ON_META.reset(on_meta)
        _FROM_CHECKPOINT.reset(outer)


def assign_state_dict(module: nn.Module, state_dict: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """Load ``state_dict`` into ``module`` by assignment, emptying ``state_dict`` as it goes: each tensor becomes
    the parameter or buffer (cast to the module's dtype where it differs, copied where it is a view into a larger
    storage, so no parameter pins another's memory). Returns ``(missing, unexpected)`` keys as
    ``load_state_dict(strict=False)`` does; shapes must already have been checked.

    The caller must hold no other reference to the tensors for a cast one to be freed at once.
    """
    own = module.state_dict(keep_vars=True)
    ready: dict[str, torch.Tensor] = {}
    for key in list(state_dict):
        t = state_dict.pop(key)
        target = own.get(key)
        if target is not None and t.dtype != target.dtype:
            t = t.to(target.dtype)
        if t.untyped_storage().nbytes() != t.numel() * t.element_size() or not t.is_contiguous():
            t = t.clone(memory_format=torch.contiguous_format)
        ready[key] = t
    result = module.load_state_dict(ready, strict=False, assign=True)
    return list(result.missing_keys), list(result.unexpected_keys)


def meta_parameters(module: nn.Module) -> list[str]:
    """Names of ``module``'s parameters and buffers that no checkpoint tensor filled (still on ``meta``)."""
    return [n for n, t in (*module.named_parameters(), *module.named_buffers()) if t.is_meta]


def zero_fill_meta(module: nn.Module) -> list[str]:
    """Give every parameter still on ``meta`` zeros of its shape and dtype (for weights a checkpoint may lack
    because the forward never reads them); returns their names."""
    filled = []
    for name, p in list(module.named_parameters()):
        if p.is_meta:
            owner_name, _, attr = name.rpartition(".")
            owner = module.get_submodule(owner_name) if owner_name else module
            owner._parameters[attr] = nn.Parameter(
                torch.zeros(p.shape, dtype=p.dtype), requires_grad=p.requires_grad
            )
            filled.append(name)
    return filled
