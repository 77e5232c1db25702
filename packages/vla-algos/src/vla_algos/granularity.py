"""Granularity of log-probs and rewards for action-chunking policies (``logprob_type`` / ``reward_type``).

A policy emits ``C`` action chunks of ``A`` dims per env step, one token each, so token-level log-probs are
``[B, C, A]`` (the vla_models contract). Env rewards and done flags come per executed action: ``[N, B, C]``
for ``N`` chunk steps (policy calls) of ``B`` envs.
"""

from __future__ import annotations

import torch

from vla_algos._checks import check_bool, check_float, check_same_shape, check_tensor

LOGPROB_LEVELS = ("token_level", "action_level", "chunk_level")
REWARD_LEVELS = ("action_level", "chunk_level")


def reduce_logprobs(logprobs: torch.Tensor, level: str) -> torch.Tensor:
    """Sum token log-probs into the unit the PPO ratio is taken over.

    Args:
        logprobs: ``[B, C, A]`` token log-probs (also fits per-token entropy when summing is wanted).
        level: ``token_level`` -> ``[B, C, A]`` unchanged (one ratio per token);
            ``action_level`` -> ``[B, C]`` (sum over ``A``: log-prob of each action of the chunk);
            ``chunk_level`` -> ``[B]`` (sum over ``C`` and ``A``: log-prob of the whole chunk).

    Returns:
        The reduced tensor (a view for ``token_level``).
    """
    fn = "reduce_logprobs"
    check_float(fn, "logprobs", logprobs)
    if logprobs.ndim != 3:
        raise ValueError(
            f"{fn}: `logprobs` must have shape [B, chunks, action_dim], got {tuple(logprobs.shape)}"
        )
    if level == "token_level":
        return logprobs
    if level == "action_level":
        return logprobs.sum(dim=-1)
    if level == "chunk_level":
        return logprobs.sum(dim=(-2, -1))
    raise ValueError(f"{fn}: unknown `level` {level!r}; valid: {', '.join(LOGPROB_LEVELS)}")


def chunk_dones(dones: torch.Tensor, level: str) -> torch.Tensor:
    """Per-action done flags ``[N, B, C]`` -> per-transition flags at ``level`` (see :func:`chunk_rewards`).

    Returns:
        ``action_level``: ``[N * C, B]`` (time ``t = n * C + c``); ``chunk_level``: ``[N, B]`` (any over ``C``).
    """
    fn = "chunk_dones"
    check_bool(fn, "dones", dones)
    _check_chunked(fn, "dones", dones)
    if level == "action_level":
        return _flatten_chunks(dones)
    if level == "chunk_level":
        return dones.any(dim=-1)
    raise ValueError(f"{fn}: unknown `level` {level!r}; valid: {', '.join(REWARD_LEVELS)}")


def chunk_rewards(
    rewards: torch.Tensor, dones: torch.Tensor, level: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn per-action rewards/flags of chunked rollouts into time-major transitions for GAE.

    Args:
        rewards: ``[N, B, C]`` float, reward of action ``c`` of chunk step ``n`` in env ``b``.
        dones: ``[N, B, C]`` bool flags of the same actions (call once for ``terminated`` and once for
            ``truncated``/``done``, or use :func:`chunk_dones` for the extra flags).
        level: ``action_level``: one transition per executed action, ``[N * C, B]`` with time
            ``t = n * C + c`` (rewards and flags unchanged); ``chunk_level``: one transition per chunk,
            ``[N, B]``, rewards summed over the chunk (undiscounted) and flags OR-ed.

    Returns:
        ``(rewards, dones)`` at ``level``: both ``[N * C, B]`` or both ``[N, B]``.
    """
    fn = "chunk_rewards"
    check_float(fn, "rewards", rewards)
    _check_chunked(fn, "rewards", rewards)
    check_same_shape(fn, "rewards", rewards, dones=dones)
    if level == "action_level":
        return _flatten_chunks(rewards), chunk_dones(dones, level)
    if level == "chunk_level":
        return rewards.sum(dim=-1), chunk_dones(dones, level)
    raise ValueError(f"{fn}: unknown `level` {level!r}; valid: {', '.join(REWARD_LEVELS)}")


def executed_action_mask(dones: torch.Tensor) -> torch.Tensor:
    """Which actions of each chunk the env executed, under same-step autoreset.

    An episode that ends at position ``c`` of a chunk ignores the chunk's later actions, so they must not get
    an advantage or a gradient.

    Args:
        dones: bool ``[..., C]`` per-action done flags (terminated or truncated) of each chunk step.

    Returns:
        bool ``[..., C]``: True up to and including the first done of each chunk, False after it.
    """
    check_bool("executed_action_mask", "dones", dones)
    d = dones.to(torch.int32)
    return (d.cumsum(-1) - d) == 0


def advantages_per_ratio(
    advantages: torch.Tensor, ratio_ndim: int, action_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Match per-action advantages ``[B, C]`` to chunk-level ratios (``ratio_ndim`` 1): the mean over the
    executed actions of each chunk (all actions without ``action_mask``). Otherwise unchanged.

    Args:
        advantages: ``[B]`` or ``[B, C]``.
        ratio_ndim: dimensions of the reduced log-probs (:func:`reduce_logprobs`): 3, 2 or 1.
        action_mask: bool ``[B, C]`` actions the env executed, or None.
    """
    if advantages.ndim <= ratio_ndim:
        return advantages
    if action_mask is None:
        return advantages.mean(dim=-1)
    return (advantages * action_mask).sum(-1) / action_mask.sum(-1).clamp(min=1)


def _check_chunked(fn: str, name: str, x: torch.Tensor) -> None:
    check_tensor(fn, name, x)
    if x.ndim != 3:
        raise ValueError(f"{fn}: `{name}` must have shape [chunk_steps, B, chunk], got {tuple(x.shape)}")


def _flatten_chunks(x: torch.Tensor) -> torch.Tensor:
    """``[N, B, C]`` -> ``[N * C, B]`` in execution order."""
    steps, batch, chunk = x.shape
    return x.permute(0, 2, 1).reshape(steps * chunk, batch)
