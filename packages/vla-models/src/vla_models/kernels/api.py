"""Public entry points for action-token log-probs: input checks and backend dispatch (Triton or PyTorch)."""

from __future__ import annotations

import importlib.util
import math
import os
from typing import Literal

import torch

from vla_models.kernels.reference import (
    action_token_logprobs_from_hidden_reference,
    action_token_logprobs_reference,
)

Backend = Literal["auto", "triton", "torch"]
BACKENDS = ("auto", "triton", "torch")
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_TORCH_DTYPES = (*_TRITON_DTYPES, torch.float64)
_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8)
# Largest action ranges the Triton kernels take: a program holds whole rows of the range in registers (the
# hidden-state kernel also a [BLOCK_K, A] tile of W in shared memory). "auto" uses PyTorch beyond these.
TRITON_MAX_ACTIONS = {"logits": 8192, "hidden": 512}


def triton_available() -> bool:
    """Whether the ``triton`` package can be imported (it is an optional dependency)."""
    return importlib.util.find_spec("triton") is not None


def _triton_interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _resolve_backend(backend: str, x: torch.Tensor, num_actions: int, kind: str) -> str:
    """``"triton"`` or ``"torch"`` for input ``x`` (logits or hidden states) of the given kernel kind."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not supported; allowed: {BACKENDS}")
    device = x.device if isinstance(x, torch.Tensor) else torch.device("cpu")
    if backend == "auto":
        fits = (
            isinstance(x, torch.Tensor)
            and x.dtype in _TRITON_DTYPES
            and isinstance(num_actions, int)
            and num_actions <= TRITON_MAX_ACTIONS[kind]
        )
        return "triton" if device.type == "cuda" and fits and triton_available() else "torch"
    if backend == "triton":
        if isinstance(num_actions, int) and num_actions > TRITON_MAX_ACTIONS[kind]:
            raise ValueError(
                f"num_actions={num_actions} exceeds {TRITON_MAX_ACTIONS[kind]}, the largest action range the "
                f"Triton {kind} kernel takes; use backend='torch' or 'auto'"
            )
        if not triton_available():
            raise ImportError("backend='triton' needs the `triton` package: pip install 'vla-models[triton]'")
        if device.type != "cuda" and not _triton_interpreting():
            raise ValueError(
                f"backend='triton' needs CUDA tensors (got device {device}); on CPU set TRITON_INTERPRET=1 "
                "before the first Triton call (slow, for tests) or use backend='torch'"
            )
    return backend


def _check_range(action_start: int, num_actions: int, vocab_size: int, what: str) -> None:
    if isinstance(action_start, bool) or not isinstance(action_start, int) or action_start < 0:
        raise ValueError(f"action_start must be an int >= 0, got {action_start!r}")
    if isinstance(num_actions, bool) or not isinstance(num_actions, int) or num_actions < 1:
        raise ValueError(f"num_actions must be an int >= 1, got {num_actions!r}")
    if action_start + num_actions > vocab_size:
        raise ValueError(
            f"action range [action_start, action_start + num_actions) = [{action_start}, "
            f"{action_start + num_actions}) exceeds the {what} size {vocab_size}"
        )


def _check_temperature(temperature: float) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a float > 0, got {type(temperature).__name__}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite float > 0, got {temperature!r}")
    return float(temperature)


def _check_ids(
    chosen_ids: torch.Tensor,
    lead_shape: torch.Size,
    device: torch.device,
    action_start: int,
    num_actions: int,
    check_ids: bool,
) -> None:
    if not isinstance(chosen_ids, torch.Tensor):
        raise TypeError(f"chosen_ids must be a torch.Tensor, got {type(chosen_ids).__name__}")
    if chosen_ids.dtype not in _INT_DTYPES:
        raise TypeError(f"chosen_ids must have an integer dtype {_INT_DTYPES}, got {chosen_ids.dtype}")
    if chosen_ids.shape != lead_shape:
        raise ValueError(
            f"chosen_ids shape {tuple(chosen_ids.shape)} must equal the leading shape {tuple(lead_shape)}"
        )
    if chosen_ids.device != device:
        raise ValueError(f"chosen_ids is on {chosen_ids.device} but the inputs are on {device}")
    if check_ids and chosen_ids.numel() > 0:
        hi = action_start + num_actions
        bad = (chosen_ids < action_start) | (chosen_ids >= hi)
        if bool(bad.any()):  # one device sync; pass check_ids=False to skip it
            first = chosen_ids[bad].reshape(-1)[0].item()
            raise ValueError(
                f"chosen_ids must be vocabulary ids in [{action_start}, {hi}) "
                f"(action_start={action_start}, num_actions={num_actions}); found {first} "
                f"({int(bad.sum())} out of range)"
            )


def _check_float(x: torch.Tensor, name: str, backend: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    allowed = _TRITON_DTYPES if backend == "triton" else _TORCH_DTYPES
    if x.dtype not in allowed:
        raise TypeError(f"{name} dtype {x.dtype} is not supported by backend={backend!r}; allowed: {allowed}")
    if x.ndim < 1:
        raise ValueError(
            f"{name} must have shape [..., {'V' if name == 'logits' else 'H'}], got a 0-d tensor"
        )


def action_token_logprobs(
    logits: torch.Tensor,
    chosen_ids: torch.Tensor,
    *,
    action_start: int,
    num_actions: int,
    temperature: float = 1.0,
    backend: Backend = "auto",
    check_ids: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of the chosen action token and entropy, with the softmax restricted to the action ids.

    The distribution is ``softmax(logits[..., action_start:action_start + num_actions] / temperature)``; the
    full-vocabulary softmax is never formed. With ``backend="triton"`` one fused kernel reads only that slice
    of ``logits`` (any strides, no copy) and the backward writes the slice of the gradient from the saved
    per-row log-sum-exp.

    Args:
        logits: ``[..., V]`` fp32/bf16/fp16 logits over the whole vocabulary (may be a non-contiguous view).
        chosen_ids: integer ``[...]`` **vocabulary ids** (not bin indices) in
            ``[action_start, action_start + num_actions)``. For OpenVLA, bin ``b`` is id ``vocab - 1 - b``.
        action_start: first vocabulary id of the contiguous action range (OpenVLA: ``32000 - 256``).
        num_actions: number of action ids (OpenVLA: 256).
        temperature: the logits are divided by it (> 0).
        backend: ``"auto"`` (Triton for CUDA fp32/bf16/fp16 tensors when installed and ``num_actions <= 8192``,
            else PyTorch), ``"triton"`` or ``"torch"``.
        check_ids: verify that every id is in range (one host sync); an out-of-range id raises ``ValueError``.

    Returns:
        ``(logprobs [...], entropy [...])``, fp32 (fp64 when the torch backend gets fp64 logits),
        differentiable w.r.t. ``logits`` (the gradient is zero outside the action ids).
    """
    backend = _resolve_backend(backend, logits, num_actions, "logits")
    _check_float(logits, "logits", backend)
    device = logits.device
    _check_range(action_start, num_actions, logits.shape[-1], "vocabulary (logits.shape[-1])")
    temperature = _check_temperature(temperature)
    _check_ids(chosen_ids, logits.shape[:-1], device, action_start, num_actions, check_ids)
    if backend == "torch":
        return action_token_logprobs_reference(
            logits, chosen_ids, action_start=action_start, num_actions=num_actions, temperature=temperature
        )
    from vla_models.kernels.triton_logits import TritonActionLogprobsFromLogits

    return TritonActionLogprobsFromLogits.apply(logits, chosen_ids, action_start, num_actions, temperature)


def action_token_logprobs_from_hidden(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    chosen_ids: torch.Tensor,
    *,
    action_start: int,
    num_actions: int,
    temperature: float = 1.0,
    backend: Backend = "auto",
    check_ids: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Like :func:`action_token_logprobs`, from hidden states and the LM head (only the action rows are used).

    ``logits_action = hidden @ lm_head_weight[action_start:action_start + num_actions].T``; with
    ``backend="triton"`` that product is reduced tile by tile in registers, so no logits reach memory. The
    PyTorch backend computes it in fp32. Use this for bias-free LM heads (Llama/OpenVLA).

    Args:
        hidden: ``[..., H]`` fp32/bf16/fp16 hidden states at the positions that predict action tokens.
        lm_head_weight: ``[V, H]`` LM head weight, same dtype and device as ``hidden``.
        chosen_ids: integer ``[...]`` vocabulary ids in ``[action_start, action_start + num_actions)``.
        action_start: first vocabulary id of the action range.
        num_actions: number of action ids.
        temperature: the logits are divided by it (> 0).
        backend: ``"auto"``, ``"triton"`` or ``"torch"`` (see :func:`action_token_logprobs`; the Triton
            kernel here takes ``num_actions <= 512``).
        check_ids: verify that every id is in range (one host sync).

    Returns:
        ``(logprobs [...], entropy [...])``, fp32 (fp64 for fp64 inputs with the torch backend),
        differentiable w.r.t. ``hidden`` and ``lm_head_weight``
        (the weight gradient is zero outside the action rows).
    """
    backend = _resolve_backend(backend, hidden, num_actions, "hidden")
    _check_float(hidden, "hidden", backend)
    device = hidden.device
    _check_float(lm_head_weight, "lm_head_weight", backend)
    if lm_head_weight.ndim != 2 or lm_head_weight.shape[1] != hidden.shape[-1]:
        raise ValueError(
            f"lm_head_weight must be [V, H] with H = hidden.shape[-1] = {hidden.shape[-1]}, "
            f"got {tuple(lm_head_weight.shape)}"
        )
    if lm_head_weight.dtype != hidden.dtype or lm_head_weight.device != device:
        raise ValueError(
            f"lm_head_weight ({lm_head_weight.dtype}, {lm_head_weight.device}) must match hidden "
            f"({hidden.dtype}, {device})"
        )
    _check_range(action_start, num_actions, lm_head_weight.shape[0], "vocabulary (lm_head_weight.shape[0])")
    temperature = _check_temperature(temperature)
    _check_ids(chosen_ids, hidden.shape[:-1], device, action_start, num_actions, check_ids)
    if backend == "torch":
        return action_token_logprobs_from_hidden_reference(
            hidden,
            lm_head_weight,
            chosen_ids,
            action_start=action_start,
            num_actions=num_actions,
            temperature=temperature,
        )
    from vla_models.kernels.triton_hidden import TritonActionLogprobsFromHidden

    return TritonActionLogprobsFromHidden.apply(
        hidden, lm_head_weight, chosen_ids, action_start, num_actions, temperature
    )
