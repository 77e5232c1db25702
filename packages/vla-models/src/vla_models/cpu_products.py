"""Half-precision weights with float32 matrix products on a CPU that has no native half-precision GEMM.

A CPU without AVX-512 BF16 / AMX (oneDNN's bf16 path off: ``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` is
False) multiplies bf16 matrices in torch's generic kernel: on a 2-core AVX2 machine a 280 x 4096 x 11008 product
runs at 20 GFLOPS in bf16 against 59 in float32, and the transposed products of backward are slower still (a
one-layer OpenVLA update spent 314 of its 325 s in them). :func:`cpu_float32_products` makes the policy's
``nn.Linear`` layers compute such products in float32 from their half-precision weights: the weights stay in
their dtype (no float32 copy of a 7B model is kept), the output comes back in the input's dtype, and backward
recasts the weight instead of saving a float32 copy. Products of a few rows without gradients (one decoded
token) keep the native kernel, which reads half the bytes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

HALF = (torch.bfloat16, torch.float16)
#: a product with fewer rows (tokens x batch) and no gradient keeps the native half-precision kernel
MIN_ROWS = 16


def native_half_products(dtype: torch.dtype) -> bool:
    """Whether this CPU multiplies `dtype` matrices in oneDNN's native kernels (AVX-512 BF16 / FP16, AMX)."""
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if dtype == torch.float16:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return True


class _Float32Linear(torch.autograd.Function):
    """``F.linear`` with the product in float32; saves the half-precision input and weight, not float32 copies."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.bias_dtype = None if bias is None else bias.dtype
        y = F.linear(x.float(), weight.float(), None if bias is None else bias.float())
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        g = grad.float()
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = (g @ weight.float()).to(x.dtype)
        if ctx.needs_input_grad[1]:
            gw = (g.reshape(-1, g.shape[-1]).T @ x.reshape(-1, x.shape[-1]).float()).to(weight.dtype)
        if ctx.needs_input_grad[2]:
            gb = g.reshape(-1, g.shape[-1]).sum(0).to(ctx.bias_dtype)
        return gx, gw, gb


class Float32ProductLinear(nn.Linear):
    """An ``nn.Linear`` whose half-precision products on the CPU run in float32 (see the module docstring); the
    same parameters, state-dict keys and outputs' dtype as ``nn.Linear``. Anything else (another device, a
    float32 weight, autocast, mismatched dtypes) takes ``nn.Linear``'s own path."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if (
            x.device.type == "cpu"
            and w.dtype in HALF
            and x.dtype == w.dtype
            and not torch.is_autocast_enabled("cpu")
            and (
                x.numel() >= MIN_ROWS * self.in_features
                or (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))
            )
        ):
            return _Float32Linear.apply(x, w, self.bias)
        return super().forward(x)


def cpu_float32_products(module: nn.Module, *, only_without_native: bool = True) -> int:
    """Switch `module`'s plain ``nn.Linear`` layers with bf16 / fp16 weights to :class:`Float32ProductLinear`, in
    place (LoRA wrappers keep working: their base and adapter layers are such layers; a subclass such as
    ``nn.MultiheadAttention``'s ``out_proj``, whose weight the attention reads directly, is left alone). Returns
    how many layers were switched.

    Args:
        only_without_native: switch only where this CPU lacks native products in the weight's dtype
            (:func:`native_half_products`); False switches regardless (to compare the two paths).
    """
    switched = 0
    for m in module.modules():
        if type(m) is not nn.Linear or m.weight.dtype not in HALF:
            continue
        if only_without_native and native_half_products(m.weight.dtype):
            continue
        m.__class__ = Float32ProductLinear
        switched += 1
    return switched
