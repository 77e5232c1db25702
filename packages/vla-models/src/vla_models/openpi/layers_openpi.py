"""The layers of pi0 / pi0.5 (``vla_models.openpi.velocity_openpi`` assembles them): transformers' configs of the
three towers, the action expert's layer (pi0.5: adaptive RMSNorm, gated residuals), the caches that let the expert
attend to the prefix's keys/values, flow_noise's std head and openpi's time embedding.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import GemmaConfig, GemmaModel, SiglipVisionConfig, SiglipVisionModel
from transformers.models.gemma.modeling_gemma import GemmaAttention, GemmaMLP, GemmaRMSNorm

from vla_models.cache_kwarg import cache_kwarg
from vla_models.openpi.configuration_openpi import OpenPiConfig
from vla_models.openpi.flow_logprob import noise_std_from_logvar


def gemma_config(cfg: OpenPiConfig, *, expert: bool) -> GemmaConfig:
    s = cfg.sizes
    g = GemmaConfig(
        vocab_size=s.vocab_size,
        hidden_size=s.expert_width if expert else s.width,
        intermediate_size=s.expert_mlp if expert else s.mlp,
        num_hidden_layers=s.depth,
        num_attention_heads=s.num_heads,
        num_key_value_heads=s.num_kv_heads,
        head_dim=s.head_dim,
        pad_token_id=0,
    )
    g._attn_implementation = cfg.attn_implementation
    return g


def siglip_config(cfg: OpenPiConfig) -> SiglipVisionConfig:
    s = cfg.sizes
    v = SiglipVisionConfig(
        hidden_size=s.vision_width,
        intermediate_size=s.vision_mlp,
        num_hidden_layers=s.vision_depth,
        num_attention_heads=s.vision_heads,
        image_size=s.image_size,
        patch_size=s.patch_size,
        vision_use_head=False,
    )
    v._attn_implementation = cfg.attn_implementation
    return v


class AdaRMSNorm(nn.Module):
    """pi0.5's adaptive RMSNorm: ``rms(x) * (1 + scale) + shift`` and a residual ``gate``, all three from
    ``dense(cond)`` (zero-initialised weight)."""

    def __init__(self, dim: int, cond_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.dense = nn.Linear(cond_dim, 3 * dim)
        nn.init.zeros_(self.dense.weight)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        scale, shift, gate = self.dense(cond.to(self.dense.weight.dtype)).unsqueeze(1).chunk(3, dim=-1)
        return (normed * (1 + scale.float()) + shift.float()).to(x.dtype), gate.to(x.dtype)


def norm_with_gate(
    module: nn.Module, x: torch.Tensor, cond: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``module(x)`` and the residual gate: an adaptive norm's (conditioned on ``cond``), None for a plain one."""
    if isinstance(module, AdaRMSNorm):
        return module(x, cond)
    return module(x), None


def _residual(residual: torch.Tensor, y: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
    return residual + y if gate is None else residual + y * gate


class ExpertLayer(nn.Module):
    """One action-expert layer: Gemma attention over (prefix keys/values, suffix) and Gemma MLP; pi0.5's norms
    are adaptive and gate the residuals."""

    def __init__(self, config: GemmaConfig, layer_idx: int, cond_dim: int | None) -> None:
        super().__init__()
        self.self_attn = GemmaAttention(config, layer_idx)
        self.mlp = GemmaMLP(config)
        w, eps = config.hidden_size, config.rms_norm_eps
        if cond_dim is None:
            self.input_layernorm: nn.Module = GemmaRMSNorm(w, eps=eps)
            self.post_attention_layernorm: nn.Module = GemmaRMSNorm(w, eps=eps)
        else:
            self.input_layernorm = AdaRMSNorm(w, cond_dim, eps)
            self.post_attention_layernorm = AdaRMSNorm(w, cond_dim, eps)

    def forward(self, h, mask, position_embeddings, cache, cond):
        x, gate = norm_with_gate(self.input_layernorm, h, cond)
        x, _ = self.self_attn(
            hidden_states=x,
            position_embeddings=position_embeddings,
            attention_mask=mask,
            **cache_kwarg(self.self_attn, cache),
        )
        h = _residual(h, x, gate)
        x, gate = norm_with_gate(self.post_attention_layernorm, h, cond)
        return _residual(h, self.mlp(x), gate)


class RecordingCache:
    """Duck-typed cache for the prefix pass: keeps each layer's keys/values, attends to them unchanged."""

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        self.keys[layer_idx], self.values[layer_idx] = k, v
        return k, v


class PrefixCache:
    """Duck-typed read-only cache for an expert pass: the prefix keys/values, then the suffix's own (nothing is
    stored, so gradients flow and several passes share one prefix)."""

    def __init__(self, keys: dict[int, torch.Tensor], values: dict[int, torch.Tensor]) -> None:
        self.keys, self.values = keys, values

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        return torch.cat([self.keys[layer_idx], k], dim=2), torch.cat([self.values[layer_idx], v], dim=2)


class _Projector(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.linear = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class PaliGemmaBody(nn.Module):
    def __init__(self, cfg: OpenPiConfig) -> None:
        super().__init__()
        self.vision_tower = SiglipVisionModel(siglip_config(cfg))
        self.multi_modal_projector = _Projector(cfg.sizes.vision_width, cfg.sizes.width)
        self.language_model = GemmaModel(gemma_config(cfg, expert=False))


class ExpertBody(nn.Module):
    def __init__(self, cfg: OpenPiConfig) -> None:
        super().__init__()
        g = gemma_config(cfg, expert=True)
        cond = g.hidden_size if cfg.pi05 else None
        self.layers = nn.ModuleList([ExpertLayer(g, i, cond) for i in range(g.num_hidden_layers)])
        self.norm: nn.Module = (
            AdaRMSNorm(g.hidden_size, cond, g.rms_norm_eps)
            if cond
            else GemmaRMSNorm(g.hidden_size, g.rms_norm_eps)
        )


class _Holder(nn.Module):
    """``<name>.model`` level of openpi's tree."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model


class PaliGemmaWithExpert(nn.Module):
    def __init__(self, cfg: OpenPiConfig) -> None:
        super().__init__()
        self.paligemma = _Holder(PaliGemmaBody(cfg))
        self.gemma_expert = _Holder(ExpertBody(cfg))


class _LogVarMLP(nn.Module):
    """``Linear -> tanh -> ... -> Linear``; each layer is ``moduleList.<i>.linear_1`` (the reference framework's
    tensor names)."""

    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        self.moduleList = nn.ModuleList()
        for i, (d_in, d_out) in enumerate(itertools.pairwise(dims)):
            last = i == len(dims) - 2
            act: nn.Module = nn.Identity() if last else nn.Tanh()
            self.moduleList.append(nn.Sequential(OrderedDict(linear_1=nn.Linear(d_in, d_out), act_1=act)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.moduleList:
            x = layer(x)
        return x


class NoiseHead(nn.Module):
    """flow_noise's std network: expert hidden ``[N, H, w]`` -> std ``[N, H, D]``.

    ``mlp_logvar`` (``w -> 128 -> 64 -> D``, tanh) gives a raw log-variance, squashed into
    ``[logvar_min, logvar_max]`` (buffers, ``log(min_std^2)`` / ``log(max_std^2)``, saved with the weights) as
    ``logvar_min + (logvar_max - logvar_min) (tanh(raw) + 1) / 2``; the std is ``exp(logvar / 2)``.
    """

    HIDDEN = (128, 64)

    def __init__(self, width: int, out_dim: int, std_range: tuple[float, float]) -> None:
        super().__init__()
        self.mlp_logvar = _LogVarMLP([width, *self.HIDDEN, out_dim])
        lo, hi = std_range
        self.register_buffer("logvar_min", torch.tensor([2 * math.log(lo)], dtype=torch.float32))
        self.register_buffer("logvar_max", torch.tensor([2 * math.log(hi)], dtype=torch.float32))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        raw = self.mlp_logvar(h.to(self.logvar_min.dtype))
        return noise_std_from_logvar(raw, self.logvar_min, self.logvar_max)


def sinusoidal_time_embedding(t: torch.Tensor, dim: int, dtype: torch.dtype) -> torch.Tensor:
    """openpi's time embedding ``[sin(2 pi t / p), cos(2 pi t / p)]`` with periods 4e-3 .. 4, computed in ``dtype``."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=dtype, device=t.device)
    period = 4e-3 * (4.0 / 4e-3) ** fraction
    x = (1.0 / period * 2 * math.pi)[None, :] * t.to(dtype)[:, None]
    return torch.cat([torch.sin(x), torch.cos(x)], dim=1)


@dataclass
class Prefix:
    """The language model's pass over (images, prompt): per-layer keys/values ``[B, kv, T0, hd]``, key validity
    ``[B, T0]``, valid counts ``[B]`` and the final-norm output ``[B, T0, W]``."""

    keys: dict[int, torch.Tensor]
    values: dict[int, torch.Tensor]
    valid: torch.Tensor
    n_valid: torch.Tensor
    out: torch.Tensor


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean ``[B, Q, K]`` -> additive float mask ``[B, 1, Q, K]`` (0 where allowed, the dtype's min elsewhere)."""
    return torch.where(allowed, 0.0, torch.finfo(dtype).min).to(dtype)[:, None]
