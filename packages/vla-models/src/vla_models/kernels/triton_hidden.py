"""Fused Triton kernels for action-token log-probs and entropy from hidden states and the LM head (forward and
backward).

``TritonActionLogprobsFromHidden`` (a ``torch.autograd.Function``) multiplies ``hidden [N, H]`` by the action rows
of the LM head ``W[action_start:action_start + A]`` tile by tile (fp32 accumulation) and reduces the
``[BLOCK_N, A]`` logits tile in registers, so neither the full-vocabulary logits nor even the action logits reach
memory. The backward kernel recomputes that tile, forms ``d action_logits [N, A]`` (small) and the two gradient
GEMMs (``d hidden = dZ @ W_a``, ``d W_a = dZ^T @ hidden``) go to cuBLAS through ``torch.matmul``.

Imports Triton: see ``vla_models.kernels.triton_common``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vla_models.kernels.triton_common import INTERPRET, action_tile, grad_or_zeros


def _hidden_configs() -> list[triton.Config]:
    if INTERPRET:  # the interpreter runs each config; one is enough for correctness tests
        return [triton.Config({"BLOCK_N": 16, "BLOCK_K": 32}, num_warps=4)]
    # N row blocks x all A columns per program: small BLOCK_N gives more programs (SMs busy at N ~ 4096),
    # large BLOCK_N re-reads the action rows of W (from L2) fewer times. Kept: the two fastest of 8 configs timed on
    # an H100 at N = H = 4096, A = 256 (benchmarks/logprob_hidden_variants.py: 42.8, 46.3 us) and two smaller tiles
    # for batches with few rows (54.7, 60.4 us there). Few configs keep the first call's autotuning (each config
    # compiled and timed, per shape) short.
    return [
        triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=st)
        for bn, bk, w, st in ((32, 128, 8, 3), (64, 64, 8, 4), (32, 64, 4, 3), (16, 128, 4, 3))
    ]


@triton.jit
def _hidden_logits_tile(
    h_ptr,
    w_ptr,
    rows,
    row_mask,
    cols,
    col_mask,
    hidden_size,
    stride_hn,
    stride_hk,
    stride_wv,
    stride_wk,
    action_start,
    temperature,
    BLOCK_N: tl.constexpr,
    BLOCK_A: tl.constexpr,
    BLOCK_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """``[BLOCK_N, BLOCK_A]`` fp32 tile of ``hidden[rows] @ W[action_start + cols].T / T``, -inf outside A."""
    acc = tl.zeros((BLOCK_N, BLOCK_A), dtype=tl.float32)
    w_rows = (action_start + cols).to(tl.int64)
    for k0 in range(0, hidden_size, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_mask = ks < hidden_size
        h = tl.load(
            h_ptr + rows.to(tl.int64)[:, None] * stride_hn + ks[None, :] * stride_hk,
            mask=row_mask[:, None] & k_mask[None, :],
            other=0.0,
        )
        w = tl.load(
            w_ptr + w_rows[None, :] * stride_wv + ks[:, None] * stride_wk,
            mask=col_mask[None, :] & k_mask[:, None],
            other=0.0,
        )
        if UPCAST_DOT:
            h = h.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(h, w, acc, input_precision=INPUT_PRECISION)
    z = acc / temperature
    return tl.where(col_mask[None, :], z, float("-inf"))


@triton.autotune(configs=_hidden_configs(), key=["hidden_size", "num_actions"])
@triton.jit
def _hidden_fwd_kernel(
    h_ptr,
    w_ptr,
    ids_ptr,
    logprob_ptr,
    entropy_ptr,
    lse_ptr,
    n_rows,
    hidden_size,
    stride_hn,
    stride_hk,
    stride_wv,
    stride_wk,
    action_start,
    num_actions,
    temperature,
    BLOCK_N: tl.constexpr,
    BLOCK_A: tl.constexpr,
    BLOCK_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < n_rows
    cols = tl.arange(0, BLOCK_A)
    col_mask = cols < num_actions
    z = _hidden_logits_tile(
        h_ptr, w_ptr, rows, row_mask, cols, col_mask, hidden_size, stride_hn, stride_hk, stride_wv,
        stride_wk, action_start, temperature, BLOCK_N, BLOCK_A, BLOCK_K, INPUT_PRECISION, UPCAST_DOT,
    )  # fmt: skip
    row_max = tl.max(z, axis=1)
    e = tl.exp(z - row_max[:, None])
    s = tl.sum(e, axis=1)
    lse = row_max + tl.log(s)
    p = e / s[:, None]
    z_safe = tl.where(col_mask[None, :], z, 0.0)
    entropy = tl.sum(tl.where(col_mask[None, :], p * (lse[:, None] - z_safe), 0.0), axis=1)
    chosen = tl.load(ids_ptr + rows, mask=row_mask, other=0).to(tl.int64) - action_start
    is_chosen = cols[None, :].to(tl.int64) == chosen[:, None]
    z_chosen = tl.sum(tl.where(is_chosen & col_mask[None, :], z, 0.0), axis=1)
    tl.store(logprob_ptr + rows, z_chosen - lse, mask=row_mask)
    tl.store(entropy_ptr + rows, entropy, mask=row_mask)
    tl.store(lse_ptr + rows, lse, mask=row_mask)


@triton.autotune(configs=_hidden_configs(), key=["hidden_size", "num_actions"])
@triton.jit
def _hidden_bwd_kernel(
    h_ptr,
    w_ptr,
    ids_ptr,
    lse_ptr,
    entropy_ptr,
    grad_logprob_ptr,
    grad_entropy_ptr,
    grad_z_ptr,
    n_rows,
    hidden_size,
    stride_hn,
    stride_hk,
    stride_wv,
    stride_wk,
    action_start,
    num_actions,
    temperature,
    BLOCK_N: tl.constexpr,
    BLOCK_A: tl.constexpr,
    BLOCK_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < n_rows
    cols = tl.arange(0, BLOCK_A)
    col_mask = cols < num_actions
    z = _hidden_logits_tile(
        h_ptr, w_ptr, rows, row_mask, cols, col_mask, hidden_size, stride_hn, stride_hk, stride_wv,
        stride_wk, action_start, temperature, BLOCK_N, BLOCK_A, BLOCK_K, INPUT_PRECISION, UPCAST_DOT,
    )  # fmt: skip
    lse = tl.load(lse_ptr + rows, mask=row_mask, other=0.0)
    entropy = tl.load(entropy_ptr + rows, mask=row_mask, other=0.0)
    g_lp = tl.load(grad_logprob_ptr + rows, mask=row_mask, other=0.0)
    g_ent = tl.load(grad_entropy_ptr + rows, mask=row_mask, other=0.0)
    chosen = tl.load(ids_ptr + rows, mask=row_mask, other=0).to(tl.int64) - action_start
    mask = row_mask[:, None] & col_mask[None, :]
    logp = tl.where(mask, z - lse[:, None], 0.0)
    p = tl.where(mask, tl.exp(logp), 0.0)
    onehot = (cols[None, :].to(tl.int64) == chosen[:, None]).to(tl.float32)
    dz = g_lp[:, None] * (onehot - p) - g_ent[:, None] * p * (logp + entropy[:, None])
    dz = tl.where(mask, dz / temperature, 0.0)
    out = grad_z_ptr + rows.to(tl.int64)[:, None] * num_actions + cols[None, :]
    tl.store(out, dz, mask=mask)


def _input_precision(dtype: torch.dtype) -> str:
    # fp32 inputs: exact IEEE products like the fp32 reference (no TF32); 16-bit inputs multiply exactly anyway.
    return "ieee" if dtype == torch.float32 else "tf32"


def _upcast_dot(dtype: torch.dtype) -> bool:
    # The interpreter (triton 3.9) multiplies bf16 tiles as their raw uint16 storage; fp32 products of bf16/fp16
    # values are exact, so upcasting there gives what the GPU's 16-bit dot with fp32 accumulation computes.
    return INTERPRET and dtype != torch.float32


class TritonActionLogprobsFromHidden(torch.autograd.Function):
    """Autograd wrapper of the fused hidden-state x LM-head kernels; inputs are validated by the public API."""

    @staticmethod
    def forward(
        ctx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        chosen_ids: torch.Tensor,
        action_start: int,
        num_actions: int,
        temperature: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lead = hidden.shape[:-1]
        h2d = hidden.reshape(-1, hidden.shape[-1])
        ids = chosen_ids.reshape(-1).contiguous()
        n_rows, hidden_size = h2d.shape
        logprob = torch.empty(n_rows, dtype=torch.float32, device=hidden.device)
        entropy = torch.empty_like(logprob)
        lse = torch.empty_like(logprob)
        if n_rows > 0:
            grid = lambda meta: (triton.cdiv(n_rows, meta["BLOCK_N"]),)  # noqa: E731
            _hidden_fwd_kernel[grid](
                h2d, weight, ids, logprob, entropy, lse, n_rows, hidden_size, h2d.stride(0), h2d.stride(1),
                weight.stride(0), weight.stride(1), action_start, num_actions, float(temperature),
                BLOCK_A=action_tile(num_actions), INPUT_PRECISION=_input_precision(hidden.dtype),
                UPCAST_DOT=_upcast_dot(hidden.dtype),
            )  # fmt: skip
        ctx.save_for_backward(h2d, weight, ids, lse, entropy)
        ctx.meta = (action_start, num_actions, float(temperature), hidden.shape)
        return logprob.view(lead), entropy.view(lead)

    @staticmethod
    def backward(ctx, grad_logprob: torch.Tensor | None, grad_entropy: torch.Tensor | None):
        h2d, weight, ids, lse, entropy = ctx.saved_tensors
        action_start, num_actions, temperature, hidden_shape = ctx.meta
        need_hidden, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        n_rows, hidden_size = h2d.shape
        # d W is zero outside the action rows; autograd needs it at the weight's full [V, H] shape.
        grad_weight = torch.zeros_like(weight) if need_weight else None
        if n_rows == 0 or not (need_hidden or need_weight):
            grad_hidden = (
                torch.zeros(hidden_shape, dtype=h2d.dtype, device=h2d.device) if need_hidden else None
            )
            return grad_hidden, grad_weight, None, None, None, None
        grad_hidden = None
        # d action_logits [N, A]: small (A = 256), never the full vocabulary.
        grad_z = torch.empty(n_rows, num_actions, dtype=torch.float32, device=h2d.device)
        grid = lambda meta: (triton.cdiv(n_rows, meta["BLOCK_N"]),)  # noqa: E731
        _hidden_bwd_kernel[grid](
            h2d, weight, ids, lse, entropy,
            grad_or_zeros(grad_logprob, n_rows, h2d.device), grad_or_zeros(grad_entropy, n_rows, h2d.device),
            grad_z, n_rows, hidden_size, h2d.stride(0), h2d.stride(1), weight.stride(0), weight.stride(1),
            action_start, num_actions, temperature,
            BLOCK_A=action_tile(num_actions), INPUT_PRECISION=_input_precision(h2d.dtype),
            UPCAST_DOT=_upcast_dot(h2d.dtype),
        )  # fmt: skip
        grad_z = grad_z.to(h2d.dtype)
        w_action = weight[action_start : action_start + num_actions]
        if need_hidden:
            grad_hidden = (grad_z @ w_action).view(hidden_shape)
        if need_weight:
            grad_weight[action_start : action_start + num_actions] = grad_z.T @ h2d
        return grad_hidden, grad_weight, None, None, None, None
