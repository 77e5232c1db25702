"""The one call site for action-token log-probs, entropy and sampling over the action bins.

The distribution over the ``n_bins`` action ids at one position is
``softmax(top_k_mask(hidden @ W_action.T / temperature))`` with ``W_action = lm_head.weight[action_start:
action_start + n_bins]``: logits are only formed for the action rows and in fp32. Without top-k and with one
temperature for the whole batch this goes through ``vla_models.kernels.action_token_logprobs_from_hidden``
(fused Triton kernel on CUDA, its PyTorch reference elsewhere); per-row temperatures or top-k use the
PyTorch path here. ``predict`` and ``evaluate`` both call :func:`action_logprobs_and_entropy`, so the log-probs
they return are computed by the same code on the same inputs.
"""

from __future__ import annotations

import torch

from vla_models.sampling import Generators, multinomial_rows

try:  # the fused kernel package (same distribution); absent only in a partial checkout
    from vla_models.kernels import action_token_logprobs_from_hidden as _kernel_from_hidden
except ImportError:  # pragma: no cover
    _kernel_from_hidden = None


def action_logits(
    hidden: torch.Tensor,
    action_weight: torch.Tensor,
    *,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
) -> torch.Tensor:
    """Processed fp32 logits over the action bins.

    Args:
        hidden: ``[B, N, H]`` last-layer hidden states at the positions that predict action tokens.
        action_weight: ``[n_bins, H]`` rows of the LM head for the action ids.
        temperature: ``[B]`` float, > 0.
        top_k: ``[B]`` int; 0 keeps all bins, k > 0 keeps the k largest logits of each row.

    Returns:
        ``[B, N, n_bins]`` fp32 logits divided by the temperature, ``-inf`` outside the top-k.
    """
    logits = hidden.float() @ action_weight.float().T
    logits = logits / temperature.float().view(-1, 1, 1)
    if bool((top_k > 0).any()):
        n_bins = logits.shape[-1]
        k = torch.where(top_k > 0, top_k.clamp(max=n_bins), torch.full_like(top_k, n_bins)).long()
        sorted_logits = logits.sort(dim=-1, descending=True).values
        kth = sorted_logits.gather(-1, (k - 1).view(-1, 1, 1).expand(*logits.shape[:2], 1))
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits


def action_logprobs_and_entropy(
    hidden: torch.Tensor,
    action_weight: torch.Tensor,
    offsets: torch.Tensor,
    *,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level log-prob of the chosen bins and entropy of the processed action distribution.

    Args:
        hidden: ``[B, N, H]`` hidden states at the action-predicting positions.
        action_weight: ``[n_bins, H]`` LM-head rows of the action ids.
        offsets: int ``[B, N]`` chosen bins (offsets in ``[0, n_bins)``).
        temperature: ``[B]`` float.
        top_k: ``[B]`` int (0 = off).

    Returns:
        ``(logprobs [B, N], entropy [B, N])`` fp32, differentiable w.r.t. ``hidden`` and ``action_weight``.
    """
    uniform_t = bool((temperature == temperature[0]).all())
    if _kernel_from_hidden is not None and uniform_t and not bool((top_k > 0).any()):
        return _kernel_from_hidden(
            hidden,
            action_weight.to(hidden.dtype),
            offsets.long(),
            action_start=0,
            num_actions=action_weight.shape[0],
            temperature=float(temperature[0]),
            check_ids=False,
        )
    logits = action_logits(hidden, action_weight, temperature=temperature, top_k=top_k)
    logp = torch.log_softmax(logits, dim=-1)
    chosen = logp.gather(-1, offsets.long().unsqueeze(-1)).squeeze(-1)
    p = logp.exp()
    entropy = -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(-1)
    return chosen, entropy


def sample_offsets(logits: torch.Tensor, *, greedy: bool, generator: Generators = None) -> torch.Tensor:
    """Sample (or argmax) a bin per position from processed logits ``[B, N, n_bins]`` -> int64 ``[B, N]``.

    ``generator``: one for the batch, or one per row (a row's draw then does not depend on its batch)."""
    if greedy:
        return logits.argmax(dim=-1)
    return multinomial_rows(torch.softmax(logits, dim=-1), generator)
