"""Fused Triton kernels for action-token log-probs and entropy from logits (forward and backward).

``TritonActionLogprobsFromLogits`` (a ``torch.autograd.Function``) reads only the action slice of a ``[..., V]``
logits tensor (strided, no copy of the big tensor), computes the slice's log-sum-exp, the chosen token's log-prob
and the entropy in one pass and saves the per-row LSE. The backward kernel recomputes the softmax of the slice from
the saved LSE and writes ``d logits`` for the slice straight into the zero-initialised full-size gradient.

Imports Triton: see ``vla_models.kernels.triton_common``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vla_models.kernels.triton_common import action_tile, grad_or_zeros


def _logits_block_n(block_a: int) -> int:
    # Several rows per program amortise the per-program cost (and, under the interpreter, the Python overhead
    # per program); keep a tile at <= 4096 elements so that it stays in registers.
    return max(1, min(16, 4096 // block_a))


@triton.jit
def _row_offsets(rows, inner, stride_outer, stride_inner):
    """Element offset of each flattened row ``r`` of a tensor whose leading dims collapse to (outer, inner)."""
    rows64 = rows.to(tl.int64)
    return (rows64 // inner) * stride_outer + (rows64 % inner) * stride_inner


@triton.jit
def _logits_fwd_kernel(
    logits_ptr,
    ids_ptr,
    logprob_ptr,
    entropy_ptr,
    lse_ptr,
    n_rows,
    inner,
    stride_outer,
    stride_inner,
    stride_v,
    action_start,
    num_actions,
    temperature,
    BLOCK_N: tl.constexpr,
    BLOCK_A: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < n_rows
    cols = tl.arange(0, BLOCK_A)
    col_mask = cols < num_actions
    row_base = _row_offsets(rows, inner, stride_outer, stride_inner)
    ptrs = logits_ptr + row_base[:, None] + cols[None, :].to(tl.int64) * stride_v
    mask = row_mask[:, None] & col_mask[None, :]
    z = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32) / temperature

    row_max = tl.max(z, axis=1)
    row_max = tl.where(row_mask, row_max, 0.0)  # fully masked rows: avoid -inf - -inf
    e = tl.exp(z - row_max[:, None])
    s = tl.sum(e, axis=1)
    s = tl.where(row_mask, s, 1.0)
    lse = row_max + tl.log(s)
    p = e / s[:, None]
    # Entropy as sum p * (lse - z): every term is >= 0, no cancellation. Masked lanes hold z = -inf; use 0
    # there so that no 0 * inf is formed.
    z_safe = tl.where(mask, z, 0.0)
    entropy = tl.sum(tl.where(mask, p * (lse[:, None] - z_safe), 0.0), axis=1)

    chosen = tl.load(ids_ptr + rows, mask=row_mask, other=0).to(tl.int64) - action_start
    is_chosen = cols[None, :].to(tl.int64) == chosen[:, None]
    z_chosen = tl.sum(tl.where(is_chosen & mask, z, 0.0), axis=1)

    tl.store(logprob_ptr + rows, z_chosen - lse, mask=row_mask)
    tl.store(entropy_ptr + rows, entropy, mask=row_mask)
    tl.store(lse_ptr + rows, lse, mask=row_mask)


@triton.jit
def _logits_bwd_kernel(
    logits_ptr,
    ids_ptr,
    lse_ptr,
    entropy_ptr,
    grad_logprob_ptr,
    grad_entropy_ptr,
    grad_logits_ptr,
    n_rows,
    inner,
    stride_outer,
    stride_inner,
    stride_v,
    grad_stride_row,
    action_start,
    num_actions,
    temperature,
    BLOCK_N: tl.constexpr,
    BLOCK_A: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < n_rows
    cols = tl.arange(0, BLOCK_A)
    col_mask = cols < num_actions
    mask = row_mask[:, None] & col_mask[None, :]
    row_base = _row_offsets(rows, inner, stride_outer, stride_inner)
    ptrs = logits_ptr + row_base[:, None] + cols[None, :].to(tl.int64) * stride_v
    z = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32) / temperature

    lse = tl.load(lse_ptr + rows, mask=row_mask, other=0.0)
    entropy = tl.load(entropy_ptr + rows, mask=row_mask, other=0.0)
    g_lp = tl.load(grad_logprob_ptr + rows, mask=row_mask, other=0.0)
    g_ent = tl.load(grad_entropy_ptr + rows, mask=row_mask, other=0.0)
    chosen = tl.load(ids_ptr + rows, mask=row_mask, other=0).to(tl.int64) - action_start

    logp = tl.where(mask, z - lse[:, None], 0.0)
    p = tl.where(mask, tl.exp(logp), 0.0)
    onehot = (cols[None, :].to(tl.int64) == chosen[:, None]).to(tl.float32)
    # d logp_c / dz_j = 1[j == c] - p_j ;  d H / dz_j = -p_j (logp_j + H)
    dz = g_lp[:, None] * (onehot - p) - g_ent[:, None] * p * (logp + entropy[:, None])
    dz = tl.where(mask, dz / temperature, 0.0)

    out = grad_logits_ptr + rows.to(tl.int64)[:, None] * grad_stride_row + cols[None, :]
    tl.store(out, dz.to(grad_logits_ptr.dtype.element_ty), mask=mask)


def _collapse_leading(x: torch.Tensor) -> tuple[torch.Tensor, int, int, int, int]:
    """View the leading dims of ``x [..., V]`` as ``rows = outer * inner`` without copying when possible.

    Returns:
        ``(tensor, n_rows, inner, stride_outer, stride_inner)``; row ``r`` starts at element
        ``(r // inner) * stride_outer + (r % inner) * stride_inner`` of ``tensor``. Falls back to a contiguous
        copy when the leading dims cannot be expressed with two strides.
    """
    dims = [(size, stride) for size, stride in zip(x.shape[:-1], x.stride()[:-1]) if size != 1]
    merged: list[tuple[int, int]] = []
    for size, stride in reversed(dims):  # innermost first
        if merged and stride == merged[-1][0] * merged[-1][1]:
            merged[-1] = (merged[-1][0] * size, merged[-1][1])
        else:
            merged.append((size, stride))
    n_rows = 1
    for size, _ in dims:
        n_rows *= size
    if not merged:
        return x, n_rows, 1, 0, 0
    if len(merged) == 1:
        return x, n_rows, merged[0][0], 0, merged[0][1]
    if len(merged) == 2:
        (inner, stride_inner), (_, stride_outer) = merged
        return x, n_rows, inner, stride_outer, stride_inner
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    return flat, n_rows, n_rows, 0, flat.stride(0)


class TritonActionLogprobsFromLogits(torch.autograd.Function):
    """Autograd wrapper of the fused logits kernels; inputs are validated by the public API."""

    @staticmethod
    def forward(
        ctx,
        logits: torch.Tensor,
        chosen_ids: torch.Tensor,
        action_start: int,
        num_actions: int,
        temperature: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        src, n_rows, inner, stride_outer, stride_inner = _collapse_leading(logits)
        # The kernels address the action slice from its first element (a view: no copy).
        src = src.narrow(-1, action_start, num_actions)
        ids = chosen_ids.reshape(-1).contiguous()
        logprob = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
        entropy = torch.empty_like(logprob)
        lse = torch.empty_like(logprob)
        if n_rows > 0:
            block_a = action_tile(num_actions)
            block_n = _logits_block_n(block_a)
            grid = (triton.cdiv(n_rows, block_n),)
            _logits_fwd_kernel[grid](
                src, ids, logprob, entropy, lse, n_rows, inner, stride_outer, stride_inner, src.stride(-1),
                action_start, num_actions, float(temperature),
                BLOCK_N=block_n, BLOCK_A=block_a,
            )  # fmt: skip
        ctx.save_for_backward(src, ids, lse, entropy)
        ctx.layout = (n_rows, inner, stride_outer, stride_inner)
        ctx.meta = (action_start, num_actions, float(temperature), logits.shape, logits.dtype)
        lead = logits.shape[:-1]
        return logprob.view(lead), entropy.view(lead)

    @staticmethod
    def backward(ctx, grad_logprob: torch.Tensor | None, grad_entropy: torch.Tensor | None):
        src, ids, lse, entropy = ctx.saved_tensors
        n_rows, inner, stride_outer, stride_inner = ctx.layout
        action_start, num_actions, temperature, shape, dtype = ctx.meta
        grad_logits = torch.zeros(shape, dtype=dtype, device=src.device)
        if n_rows > 0 and ctx.needs_input_grad[0]:
            g_lp = grad_or_zeros(grad_logprob, n_rows, src.device)
            g_ent = grad_or_zeros(grad_entropy, n_rows, src.device)
            block_a = action_tile(num_actions)
            block_n = _logits_block_n(block_a)
            grid = (triton.cdiv(n_rows, block_n),)
            grad_slice = grad_logits.narrow(-1, action_start, num_actions)  # contiguous rows of length V
            _logits_bwd_kernel[grid](
                src, ids, lse, entropy, g_lp, g_ent, grad_slice, n_rows, inner, stride_outer, stride_inner,
                src.stride(-1), shape[-1], action_start, num_actions, temperature,
                BLOCK_N=block_n, BLOCK_A=block_a,
            )  # fmt: skip
        return grad_logits, None, None, None, None
