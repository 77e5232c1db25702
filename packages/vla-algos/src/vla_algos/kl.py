"""Per-token KL penalty estimators between the current and a reference policy (Schulman, "Approximating KL
divergence", 2020), as used for a reference-model KL term."""

from __future__ import annotations

import torch

from vla_algos._checks import check_float, check_same_shape

KL_KINDS = ("k1", "k2", "k3", "abs", "kl", "mse", "low_var_kl")
# the names the reference framework's configs use for the same estimators
KL_ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Elementwise estimate of ``KL(pi || pi_ref)`` from log-probs of actions sampled from ``pi``.

    With ``d = logp - ref_logp``:

    - ``k1``: ``d`` (unbiased, can be negative)
    - ``k2``: ``d ** 2 / 2`` (biased, low variance)
    - ``k3``: ``exp(-d) - 1 + d`` (unbiased, >= 0), with ``-d`` clamped to [-20, 20] and the result to at most
      10, as verl's and the reference framework's ``low_var_kl`` (the clamps only act on far-off samples)
    - ``abs``: ``|d|``

    ``kl``, ``mse`` and ``low_var_kl`` are the reference framework's names of ``k1``, ``k2`` and ``k3``.

    Args:
        logp: ``[*S]`` log-probs under the current policy.
        ref_logp: ``[*S]`` log-probs under the reference policy.
        kind: one of ``KL_KINDS``.

    Returns:
        ``[*S]``; reduce with :func:`vla_algos.masked_mean`.
    """
    fn = "kl_penalty"
    check_float(fn, "logp", logp)
    check_float(fn, "ref_logp", ref_logp)
    check_same_shape(fn, "logp", logp, ref_logp=ref_logp)
    diff = logp - ref_logp
    kind = KL_ALIASES.get(kind, kind)
    if kind == "k1":
        return diff
    if kind == "k2":
        return 0.5 * diff.square()
    if kind == "k3":
        neg = torch.clamp(-diff, min=-20.0, max=20.0)
        return torch.clamp(torch.expm1(neg) - neg, max=10.0)
    if kind == "abs":
        return diff.abs()
    raise ValueError(f"{fn}: unknown `kind` {kind!r}; valid: {', '.join(KL_KINDS)}")
