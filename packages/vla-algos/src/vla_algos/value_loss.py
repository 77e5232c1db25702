"""Critic loss with optional value clipping and Huber loss, and the explained-variance diagnostic."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vla_algos._checks import check_finite_where, check_float, check_same_shape, expand_leading
from vla_algos.aggregation import agg_loss
from vla_algos.masked import masked_mean

#: How ``value_clip`` enters the critic loss: ``pessimistic`` (the larger of the clipped and unclipped errors: PPO2,
#: verl, CleanRL, the reference framework) or ``clipped`` (the clipped prediction's error alone: Stable-Baselines3's
#: ``clip_range_vf``).
VALUE_CLIP_MODES = ("pessimistic", "clipped")


def _elementwise(err: torch.Tensor, huber_delta: float | None) -> torch.Tensor:
    if huber_delta is None:
        return 0.5 * err.square()
    return F.huber_loss(err, torch.zeros_like(err), reduction="none", delta=huber_delta)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    value_clip: float | None = None,
    value_clip_mode: str = "pessimistic",
    huber_delta: float | None = None,
    weight_sum: torch.Tensor | float | None = None,
    check_finite: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Regression of ``values`` onto ``returns``, PPO-style pessimistic clipping.

    Per entry ``f(returns - values)`` with ``f(e) = e**2 / 2`` (or the Huber loss with ``huber_delta``,
    which equals ``e**2 / 2`` for ``|e| <= delta``). With ``value_clip = eps`` the prediction is also clipped
    to ``old_values +- eps`` and the larger of the two losses is taken:
    ``max(f(returns - values), f(returns - clip(values, old - eps, old + eps)))``; with
    ``value_clip_mode="clipped"`` the clipped prediction's loss alone, ``f(returns - clip(values, old - eps, old +
    eps))`` (Stable-Baselines3's ``clip_range_vf``: a prediction outside the band gets no gradient, whichever side
    the return is on).

    Args:
        values: ``[*S]`` predictions of the critic being trained (with grad).
        old_values: ``[*S]`` predictions recorded at rollout time.
        returns: ``[*S]`` targets (e.g. GAE returns).
        mask: ``[*S]`` or a leading part of it; None = all entries.
        value_clip: ``eps > 0`` or None (no clipping).
        value_clip_mode: ``pessimistic`` or ``clipped`` (:data:`VALUE_CLIP_MODES`); unused without ``value_clip``.
        huber_delta: ``delta > 0`` or None (squared error).
        weight_sum: normaliser of the loss and the metrics, ``sum(mask * x) / weight_sum``
            (:func:`vla_algos.agg_loss`), e.g. the minibatch's entries when these are one micro-batch of it.
            None: the masked mean over these entries.
        check_finite: raise ``ValueError`` on NaN/inf in masked-in entries.

    Returns:
        ``(loss, metrics)``: 0-d loss with grad; ``metrics`` of 0-d detached tensors:
        ``value_clip_ratio`` (share of entries whose loss the clip decides: the clipped loss is the larger one,
        ``pessimistic``, or the prediction lies outside the band, ``clipped``; 0 without clipping) and
        ``value_loss`` (the loss value).
    """
    fn = "value_loss"
    for name, x in (("values", values), ("old_values", old_values), ("returns", returns)):
        check_float(fn, name, x)
    check_same_shape(fn, "values", values, old_values=old_values, returns=returns)
    if mask is not None:
        mask = expand_leading(fn, "mask", mask, values, "values")
    if value_clip is not None and not value_clip > 0:
        raise ValueError(f"{fn}: `value_clip` must be > 0 or None, got {value_clip!r}")
    if value_clip_mode not in VALUE_CLIP_MODES:
        raise ValueError(
            f"{fn}: `value_clip_mode` {value_clip_mode!r} is not one of: {', '.join(VALUE_CLIP_MODES)}"
        )
    if huber_delta is not None and not huber_delta > 0:
        raise ValueError(f"{fn}: `huber_delta` must be > 0 or None, got {huber_delta!r}")
    if check_finite:
        check_finite_where(fn, mask, values=values, old_values=old_values, returns=returns)

    loss_unclipped = _elementwise(returns - values, huber_delta)
    if value_clip is None:
        per_entry = loss_unclipped
        clip_active = torch.zeros_like(per_entry, dtype=torch.bool)
    else:
        values_clipped = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
        loss_clipped = _elementwise(returns - values_clipped, huber_delta)
        if value_clip_mode == "clipped":
            per_entry = loss_clipped
            clip_active = (values - old_values).abs() > value_clip
        else:
            per_entry = torch.maximum(loss_unclipped, loss_clipped)
            clip_active = loss_clipped > loss_unclipped
    loss = agg_loss(per_entry, mask, weight_sum=weight_sum)
    metrics = {
        "value_clip_ratio": agg_loss(clip_active.to(values.dtype), mask, weight_sum=weight_sum).detach(),
        "value_loss": loss.detach(),
    }
    return loss, metrics


def explained_variance(
    values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """``1 - Var[returns - values] / Var[returns]`` over the masked entries.

    1 is a perfect critic, 0 is no better than a constant, negative is worse. As in Stable-Baselines3,
    NaN when the returns have zero variance (the ratio is undefined); here also when their spread is within
    floating-point rounding of their size: returns rebuilt as ``advantages + values`` after a rollout without
    reward are zero up to rounding, and the ratio would be a meaningless -1e12.

    Args:
        values: ``[*S]``.
        returns: ``[*S]``.
        mask: ``[*S]`` or a leading part of it; None = all entries.

    Returns:
        0-d detached tensor.
    """
    fn = "explained_variance"
    check_float(fn, "values", values)
    check_float(fn, "returns", returns)
    check_same_shape(fn, "values", values, returns=returns)
    if mask is not None:
        mask = expand_leading(fn, "mask", mask, values, "values")
    with torch.no_grad():
        values, returns = values.detach(), returns.detach()
        var_returns = masked_mean((returns - masked_mean(returns, mask)).square(), mask)
        residual = returns - values
        var_residual = masked_mean((residual - masked_mean(residual, mask)).square(), mask)
        nan = torch.full_like(var_returns, float("nan"))
        # the variance a few ulps of rounding in each return can make (returns and values on one scale)
        scale = torch.maximum(_masked_max_abs(returns, mask), _masked_max_abs(values, mask))
        rounding = (8 * torch.finfo(returns.dtype).eps * scale).square()
        defined = var_returns > rounding
        return torch.where(defined, 1.0 - var_residual / var_returns.clamp_min(1e-30), nan)


def _masked_max_abs(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The largest |x| over the masked entries (0 when none is)."""
    x = x.abs()
    if mask is not None:
        x = torch.where(mask.bool(), x, torch.zeros_like(x))
    return x.max() if x.numel() else x.new_zeros(())
