"""Masked reductions. A mask is bool or float (weights), with the shape of ``x`` or a leading part of it.

Entries where the mask is 0/False never reach the result (they may hold any value, even NaN; note that
NaN *inputs* of a differentiable op still give NaN gradients upstream, so keep padding finite).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from vla_algos._checks import check_tensor, expand_leading


def _mask_like(fn: str, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor | None:
    check_tensor(fn, "x", x)
    if mask is None:
        return None
    return expand_leading(fn, "mask", mask, x, "x")


def masked_sum(x: torch.Tensor, mask: torch.Tensor | None = None, *, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` over entries where ``mask`` is non-zero (weighted by a float mask).

    Args:
        x: any shape ``[*S]``.
        mask: ``[*S]`` or a leading part of it; None means all entries.
        dim: reduce only this dimension (default: all).

    Returns:
        0-d tensor, or ``x`` without ``dim``.
    """
    m = _mask_like("masked_sum", x, mask)
    if m is not None:
        x = torch.where(m != 0, x * m, torch.zeros((), dtype=x.dtype, device=x.device))
    return x.sum() if dim is None else x.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None = None, *, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over entries where ``mask`` is non-zero; 0 where the mask selects nothing.

    Args:
        x: any shape ``[*S]``.
        mask: ``[*S]`` or a leading part of it (bool or float weights); None means a plain mean.
        dim: reduce only this dimension (default: all).

    Returns:
        0-d tensor, or ``x`` without ``dim``. An empty selection gives 0 (and zero gradient), not NaN.
    """
    m = _mask_like("masked_mean", x, mask)
    if m is None and x.numel() == 0:  # no entries (a zero-row minibatch): 0, like an empty selection
        return x.sum() if dim is None else x.sum(dim=dim)
    if m is None:
        return x.mean() if dim is None else x.mean(dim=dim)
    total = masked_sum(x, m, dim=dim)
    weights = torch.broadcast_to(m, x.shape).to(x.dtype)
    count = weights.sum() if dim is None else weights.sum(dim=dim)
    # clamp instead of where(count > 0, ...): the unselected branch of `where` would still send NaN gradients.
    return total / count.clamp_min(torch.finfo(x.dtype).tiny)


def masked_var(x: torch.Tensor, mask: torch.Tensor | None = None, *, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``x`` over the masked entries (Bessel-corrected when ``unbiased`` and > 1 entry).

    Returns:
        0-d tensor.
    """
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        m = _mask_like("masked_var", x, mask)
        n = (
            torch.tensor(float(x.numel()), dtype=x.dtype, device=x.device)
            if m is None
            else torch.broadcast_to(m, x.shape).to(x.dtype).sum()
        )
        var = torch.where(n > 1, var * n / (n - 1).clamp_min(1.0), var)
    return var


def masked_whiten(
    x: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    shift_mean: bool = True,
    eps: float = 1e-8,
    std_eps: float | None = None,
    all_reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Normalise ``x`` by the mean and (unbiased) standard deviation of its masked entries.

    Args:
        x: any shape ``[*S]``.
        mask: ``[*S]`` or a leading part of it; None means all entries.
        shift_mean: subtract the mean (False: only divide by the std, keeping the mean).
        eps: added to the variance before the square root.
        std_eps: divide by ``std + std_eps`` instead of ``sqrt(var + eps)`` (the reference framework's
            ``safe_normalize`` uses 1e-5). None: ``sqrt(var + eps)``.
        all_reduce: sums a float64 tensor over the processes that each hold a part of the data (data-parallel
            ranks); the mean and variance are then those of every part's masked entries together. None: this
            process holds all of it.

    Returns:
        ``[*S]``: ``(x - mean) / sqrt(var + eps)``, plus ``mean`` again when ``shift_mean`` is False (scale
        only). Every entry is transformed; the statistics come from the masked entries only.
    """
    if all_reduce is None:
        mean = masked_mean(x, mask)
        var = masked_var(x, mask)
    else:
        stats = _all_reduced_mean_var(x, mask, all_reduce)
        if stats is None:  # no masked entry on any process: nothing to whiten with
            return x
        mean, var = stats
    if std_eps is None:
        whitened = (x - mean) * torch.rsqrt(var + eps)
    else:
        whitened = (x - mean) / (torch.sqrt(var) + std_eps)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def masked_group_whiten(
    x: torch.Tensor,
    mask: torch.Tensor | None,
    groups: torch.Tensor,
    num_groups: int,
    *,
    scale: bool = True,
    eps: float = 1e-8,
    all_reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """``masked_whiten`` within groups of columns: every column ``x[:, b]`` is normalised by the mean and
    (unbiased) standard deviation of the masked entries of its group's columns (``scale=False``: only the group's
    mean is subtracted).

    Args:
        x: ``[T, B, ...]``.
        mask: ``[T, B, ...]`` or a leading part of it; None means all entries.
        groups: int64 ``[B]`` in ``[0, num_groups)``: the group of each column.
        num_groups: how many groups there are (on every process, when ``all_reduce`` is given).
        eps: added to each group's variance before the square root.
        all_reduce: as in ``masked_whiten``: each group's statistics are then those of every process's columns of
            that group together.

    Returns:
        ``x``'s shape. A group without a masked entry (anywhere) is returned unchanged.
    """
    m = _mask_like("masked_group_whiten", x, mask)
    if x.ndim < 2 or groups.shape != (x.shape[1],):
        raise ValueError(
            f"masked_group_whiten: groups must have shape [B] = [{x.shape[1] if x.ndim >= 2 else '?'}] for x of "
            f"shape {tuple(x.shape)}, got {tuple(groups.shape)}"
        )
    if groups.numel() and (int(groups.min()) < 0 or int(groups.max()) >= num_groups):
        raise ValueError(f"masked_group_whiten: groups must lie in [0, num_groups={num_groups})")
    xd = x.double()
    w = torch.ones_like(xd) if m is None else torch.broadcast_to(m, x.shape).double()
    idx = groups.to(device=x.device, dtype=torch.long)

    def per_group(t: torch.Tensor) -> torch.Tensor:  # [T, B, ...] -> [G]: sums over each group's columns
        cols = t.transpose(0, 1).reshape(t.shape[1], -1).sum(1)
        return torch.zeros(num_groups, dtype=t.dtype, device=t.device).index_add_(0, idx, cols)

    reduce = all_reduce if all_reduce is not None else (lambda t: t)
    sums = reduce(torch.stack([per_group(xd * w), per_group(w)]))
    n = sums[1]
    mean = sums[0] / n.clamp_min(1.0)
    view = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if not scale:
        return (xd - mean[idx].view(view)).to(x.dtype)
    sq = reduce(per_group(((xd - mean[idx].view(view)) ** 2) * w))
    var = sq / n.clamp_min(1.0)
    var = torch.where(n > 1, var * n / (n - 1).clamp_min(1.0), var)
    # a group without an entry is left as it is
    scale = torch.where(n > 0, torch.rsqrt(var + eps), torch.ones_like(var))
    whitened = (xd - mean[idx].view(view)) * scale[idx].view(view)
    return whitened.to(x.dtype)


def _all_reduced_mean_var(
    x: torch.Tensor, mask: torch.Tensor | None, all_reduce: Callable[[torch.Tensor], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Masked mean and unbiased variance over every process's part (None: no masked entry anywhere) (two reductions: sums, then squared
    deviations from the common mean, as ``masked_var`` computes them on one part)."""
    m = _mask_like("masked_whiten", x, mask)
    w = torch.ones_like(x) if m is None else torch.broadcast_to(m, x.shape).to(x.dtype)
    sums = all_reduce(torch.stack([(x * w).sum(), w.sum()]).double())
    n = sums[1]
    if float(n) == 0:
        return None
    mean = (sums[0] / n.clamp_min(1.0)).to(x.dtype)
    sq = all_reduce((((x - mean) ** 2) * w).sum().double().reshape(1))[0]
    var = sq / n.clamp_min(1.0)
    var = torch.where(n > 1, var * n / (n - 1).clamp_min(1.0), var)
    return mean, var.to(x.dtype)
