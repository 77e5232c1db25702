"""Loss aggregation modes (``loss_agg_mode``) and the weights that keep a minibatch mean split-invariant.

``token-mean``: every masked decision (token, action or chunk, as ``logprob_type`` says) weighs the same.
``seq-mean-token-mean``: every episode weighs the same, whatever its length: each of its loss entries (token, action
or chunk) gets ``1 / its number of loss entries``. A mode is a function
``(loss_mask [T, B], done [T, B], *, entries [T, B] | None) -> weights [T, B]`` or None (uniform weights), the
weight of each loss entry of a decision (``entries``: how many loss entries each decision has, e.g. its executed
actions when the ratio is taken per action; None: one each); register a new one with
:func:`vla_algos.register_loss_agg_mode`.

A minibatch may be split into micro-batches (and ranks). Each part's loss is ``sum(w * loss) / W`` (verl's
``agg_loss`` form, :func:`agg_loss`), where ``W`` (:func:`total_weight`) is the weight of the whole minibatch's loss
entries, computed once per minibatch: the parts then add up to the weighted mean over the whole minibatch, whatever
the split.
"""

from __future__ import annotations

import math

import torch

from vla_algos._checks import check_bool, check_same_shape
from vla_algos.masked import masked_mean, masked_sum


def token_mean_weights(
    loss_mask: torch.Tensor, done: torch.Tensor, *, entries: torch.Tensor | None = None
) -> None:
    """``token-mean``: no weights (every loss entry counts once)."""
    del loss_mask, done, entries
    return None


def episode_mean_weights(
    loss_mask: torch.Tensor, done: torch.Tensor, *, entries: torch.Tensor | None = None
) -> torch.Tensor:
    """``seq-mean-token-mean``: loss weights that give every episode the same total weight.

    An episode is a segment of a column up to a ``done``. Each of its loss entries gets 1 / (the episode's number
    of loss entries), scaled so the weights average 1 over the entries. With ``token-mean`` a failed 50-decision
    episode outweighs a successful 18-decision one almost 3:1; these weights remove that bias.

    Args:
        loss_mask: bool ``[T, B]`` decisions that enter the loss.
        done: bool ``[T, B]`` episode ended at decision ``t`` (terminated or truncated).
        entries: ``[T, B]`` number of loss entries of each decision: with a ratio per action (or per token) the
            actions (tokens) the env executed, so that an episode that ends at the first action of its only chunk
            weighs as much as a full one. None: one entry per decision (a ratio per chunk).

    Returns:
        float32 ``[T, B]``: the weight of each loss entry of decision ``t`` (every entry of a decision weighs the
        same), 0 outside the mask; ``sum(weights * entries)`` over an episode is the same for every episode.
    """
    fn = "episode_mean_weights"
    check_bool(fn, "loss_mask", loss_mask)
    check_bool(fn, "done", done)
    check_same_shape(fn, "loss_mask", loss_mask, done=done)
    mask = loss_mask.to(torch.float32)
    if entries is not None:
        check_same_shape(fn, "loss_mask", loss_mask, entries=entries)
        if bool((entries[loss_mask] <= 0).any()):
            raise ValueError(f"{fn}: `entries` must be > 0 where `loss_mask` is set")
        count = mask * entries.to(torch.float32)
    else:
        count = mask
    b = loss_mask.shape[1]
    seg = torch.cumsum(done.to(torch.int64), dim=0) - done.to(torch.int64)  # episode index within its column
    ids = seg + (seg.max() + 1) * torch.arange(b, device=done.device)[None, :]
    counts = torch.zeros(int(ids.max()) + 1, device=mask.device).index_add_(
        0, ids.reshape(-1), count.reshape(-1)
    )
    per = counts[ids]
    weights = torch.where(per > 0, mask / per.clamp(min=1e-30), torch.zeros_like(mask))
    total = (weights * count).sum()
    return weights * (count.sum() / total) if total > 0 else weights


def entry_weights(
    sample_weight: torch.Tensor | None, action_mask: torch.Tensor | None, *, ndim: int
) -> torch.Tensor | None:
    """The loss mask of ``n`` samples' per-entry losses of ``ndim`` dims (``[n]``, ``[n, C]`` or ``[n, C, A]``).

    Args:
        sample_weight: float ``[n]`` the ``loss_agg_mode`` weight of each loss entry of a sample, or None (1 each).
        action_mask: bool ``[n, C]`` actions the env executed, or None (all of them). Used when the entries are
            per action or per token (``ndim >= 2``); a chunk-level entry (``ndim == 1``) has no actions to mask.
        ndim: dims of the per-entry losses (e.g. of the log-probs after :func:`vla_algos.reduce_logprobs`).

    Returns:
        ``[n]`` or ``[n, C]`` (a leading part of the entries' shape: it weighs every token of an action alike), or
        None when every entry weighs 1.
    """
    mask = action_mask if action_mask is not None and ndim >= 2 else None
    if sample_weight is not None:
        w = sample_weight
        mask = w.reshape(w.shape + (1,) * (mask.ndim - 1)) * mask if mask is not None else w
    return mask


def total_weight(mask: torch.Tensor | None, shape: tuple[int, ...] | torch.Size) -> torch.Tensor:
    """The weight of loss entries of shape ``shape`` under ``mask``: the ``weight_sum`` of :func:`agg_loss`.

    Computed once per minibatch from every sample's mask, it normalises each micro-batch's (and rank's) weighted
    sum, so that the parts add up to the minibatch's weighted mean.

    Args:
        mask: ``shape`` or a leading part of it (bool or float weights; broadcast over the trailing dims, e.g.
            an action's weight over its tokens), or None: every entry weighs 1.
        shape: the shape of the loss entries, e.g. ``[n, C, A]`` for n samples' token log-probs.

    Returns:
        0-d float32 tensor (on ``mask``'s device).
    """
    if mask is None:
        return torch.tensor(float(math.prod(shape)))
    if tuple(mask.shape) != tuple(shape[: mask.ndim]):
        raise ValueError(
            f"total_weight: `mask` has shape {tuple(mask.shape)}, which must equal `shape` {tuple(shape)} or a "
            "leading part of it"
        )
    return mask.to(torch.float32).sum() * math.prod(shape[mask.ndim :])


def agg_loss(
    loss: torch.Tensor, mask: torch.Tensor | None = None, *, weight_sum: torch.Tensor | float | None = None
) -> torch.Tensor:
    """``sum(mask * loss) / weight_sum``: a part's contribution to a weighted mean over a larger set of entries.

    verl's ``agg_loss`` with the aggregation mode carried by the weights (``token-mean``: 0/1 masks,
    ``seq-mean-token-mean``: :func:`episode_mean_weights`) and a global normaliser: with ``weight_sum`` the
    :func:`total_weight` of the whole minibatch, the micro-batches' (and ranks') results add up to the minibatch's
    weighted mean, and their gradients to its gradient.

    Args:
        loss: ``[*S]`` per-entry values.
        mask: ``[*S]`` or a leading part of it (bool or float weights), or None: every entry weighs 1.
        weight_sum: the normaliser, or None: this call's own weight (the plain weighted mean,
            :func:`vla_algos.masked_mean`).

    Returns:
        0-d tensor (with grad when ``loss`` has one).
    """
    if weight_sum is None:
        return masked_mean(loss, mask)
    tiny = torch.finfo(
        loss.dtype
    ).tiny  # a weight sum of 0 has nothing to average: 0, not NaN (as masked_mean)
    if isinstance(weight_sum, torch.Tensor):
        weight_sum = weight_sum.to(loss.device, loss.dtype).clamp_min(tiny)
    else:
        weight_sum = max(float(weight_sum), tiny)
    return masked_sum(loss, mask) / weight_sum
