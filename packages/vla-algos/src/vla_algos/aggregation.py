"""Loss aggregation modes (``loss_agg_mode``) and the weights that keep a minibatch mean split-invariant.

``token-mean``: every masked decision (token, action or chunk, as ``logprob_type`` says) weighs the same.
``seq-mean-token-mean``: every episode weighs the same, whatever its length: each of its loss entries (token, action
or chunk) gets ``1 / its number of loss entries``. A mode is a function
``(loss_mask [T, B], done [T, B], *, entries [T, B] | None) -> weights [T, B]`` or None (uniform weights), the
weight of each loss entry of a decision (``entries``: how many loss entries each decision has, e.g. its executed
actions when the ratio is taken per action; None: one each); register a new one with
:func:`vla_algos.register_loss_agg_mode`.

A minibatch may be split into micro-batches (and ranks); :func:`weight_share` rescales each part's weighted
mean so that the parts add up to the weighted mean over the whole minibatch.
"""

from __future__ import annotations

import torch

from vla_algos._checks import check_bool, check_same_shape


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


def sample_loss_weights(
    sample_weight: torch.Tensor | None, action_mask: torch.Tensor | None, *, per_action: bool, num: int
) -> torch.Tensor:
    """Total loss weight of each of ``num`` samples ``[num]``.

    Args:
        sample_weight: float ``[num]`` per-sample weights of the aggregation mode, or None (1 each).
        action_mask: bool ``[num, C, ...]`` actions the env executed, or None.
        per_action: the ratio is taken per action or token: the action mask then weighs every action.
        num: number of samples.
    """
    w = sample_weight.float() if sample_weight is not None else torch.ones(num)
    if per_action and action_mask is not None:
        w = w * action_mask.flatten(1).sum(-1).float()
    return w


def weight_share(here: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:
    """``mean(here) / mean(whole)``: a micro-batch's share of its minibatch's loss weight, per sample.

    A micro-batch's weighted mean times ``len(micro) / len(minibatch)`` times this share is its part of the
    minibatch's weighted mean: the parts add up to ``sum(w * loss) / sum(w)`` whatever the split.

    Args:
        here: ``[n]`` loss weights of the micro-batch's samples (:func:`sample_loss_weights`).
        whole: ``[m]`` loss weights of the minibatch's samples.

    Returns:
        0-d tensor (exactly 1 when all weights are equal).
    """
    return (here.sum() / len(here)) / (whole.sum() / len(whole)).clamp_min(torch.finfo(whole.dtype).tiny)
