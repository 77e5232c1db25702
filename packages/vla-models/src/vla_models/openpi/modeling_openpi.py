"""pi0 / pi0.5 built from transformers blocks, with openpi's ``PI0Pytorch`` module names.

Module tree (state-dict names equal openpi's, except SigLIP, which transformers keeps flat: openpi's
``vision_tower.vision_model.*`` is ``vision_tower.*`` here, and the tied embedding, stored by openpi as
``paligemma.lm_head.weight``, is ``language_model.embed_tokens.weight``; ``vla_models.openpi.checkpoint_openpi``
maps both)::

    paligemma_with_expert.paligemma.model.vision_tower            SiglipVisionModel
    paligemma_with_expert.paligemma.model.multi_modal_projector   .linear
    paligemma_with_expert.paligemma.model.language_model          GemmaModel (embed_tokens, layers, norm)
    paligemma_with_expert.gemma_expert.model.layers / .norm       ExpertLayer (GemmaAttention + GemmaMLP;
                                                                  pi0.5: adaptive RMSNorm, gated residuals)
    action_in_proj, action_out_proj                               32 <-> expert width
    state_proj, action_time_mlp_in, action_time_mlp_out           pi0: state token, action+time MLP
    time_mlp_in, time_mlp_out                                     pi0.5: the adaptive norms' condition
    value_head, noise_head                                        critic; flow_noise's learned std

One decision: the prefix (images, then the prompt; bidirectional, padding masked) runs once through the language
model and its per-layer keys/values are kept; each denoising step runs the expert on the suffix (pi0: the state
token, then H action tokens; pi0.5: H action tokens) attending to them. Masks are additive float masks (a
boolean 4-D mask is ignored by transformers' eager attention).
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GemmaConfig, GemmaModel, SiglipVisionConfig, SiglipVisionModel
from transformers.models.gemma.modeling_gemma import GemmaAttention, GemmaMLP, GemmaRMSNorm

from vla_models.cache_kwarg import cache_kwarg
from vla_models.dtypes import DTYPES
from vla_models.lora import apply_lora, merge_lora_
from vla_models.meta_init import checkpoint_backed
from vla_models.observations import check_observation
from vla_models.openpi.configuration_openpi import OpenPiConfig
from vla_models.openpi.flow_logprob import (
    gaussian_entropy,
    gaussian_logprob,
    noise_std_from_logvar,
    sde_sigma,
    step_mean_std,
    timesteps,
)
from vla_models.openpi.processing_openpi import (
    OpenPiNormalizer,
    PromptTokenizer,
    aloha_actions_from_pi,
    aloha_actions_to_pi,
    aloha_state_to_pi,
    stack_cameras,
)
from vla_models.policy_output import PolicyOutput
from vla_models.sampling import Generators, randint_rows, randn_rows
from vla_models.value_head import ValueHead

#: ``denoise_inds`` of a greedy (plain ODE) row and of a row scored at every step (``joint_logprob``).
GREEDY, JOINT = -1, -2
#: Modules kept in float32 whatever ``precision`` is (with PaliGemma's and the expert's norms).
FLOAT32_MODULES = (
    "action_in_proj",
    "action_out_proj",
    "state_proj",
    "action_time_mlp_in",
    "action_time_mlp_out",
    "time_mlp_in",
    "time_mlp_out",
    "value_head",
    "noise_head",
)


# ---- transformers configs of the three towers ---------------------------------------------------------------
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


# ---- layers -------------------------------------------------------------------------------------------------
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


def _norm(
    module: nn.Module, x: torch.Tensor, cond: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
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
        x, gate = _norm(self.input_layernorm, h, cond)
        x, _ = self.self_attn(
            hidden_states=x,
            position_embeddings=position_embeddings,
            attention_mask=mask,
            **cache_kwarg(self.self_attn, cache),
        )
        h = _residual(h, x, gate)
        x, gate = _norm(self.post_attention_layernorm, h, cond)
        return _residual(h, self.mlp(x), gate)


class _RecordingCache:
    """Duck-typed cache for the prefix pass: keeps each layer's keys/values, attends to them unchanged."""

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        self.keys[layer_idx], self.values[layer_idx] = k, v
        return k, v


class _PrefixCache:
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


class _PaliGemmaBody(nn.Module):
    def __init__(self, cfg: OpenPiConfig) -> None:
        super().__init__()
        self.vision_tower = SiglipVisionModel(siglip_config(cfg))
        self.multi_modal_projector = _Projector(cfg.sizes.vision_width, cfg.sizes.width)
        self.language_model = GemmaModel(gemma_config(cfg, expert=False))


class _ExpertBody(nn.Module):
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
        self.paligemma = _Holder(_PaliGemmaBody(cfg))
        self.gemma_expert = _Holder(_ExpertBody(cfg))


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


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.where(allowed, 0.0, torch.finfo(dtype).min).to(dtype)[:, None]


# ---- the policy ---------------------------------------------------------------------------------------------
class OpenPiPolicy(nn.Module):
    """pi0 / pi0.5 with the package's policy contract (``predict`` / ``evaluate`` / ``sft_loss`` / ``values``).

    ``forward_inputs`` (leading dim B, fixed widths, so rollouts stack with ``torch.cat``): ``images`` uint8
    ``[B, N, S, S, 3]``, ``image_mask`` ``[B, N]``, ``input_ids`` / ``text_mask`` ``[B, L]``, ``states`` float32
    ``[B, D]`` (raw; in pi0's ALOHA convention with ``adapt_to_pi``), ``chains`` float32 ``[B, K+1, H, 32]`` (every point of the denoising chain),
    ``denoise_inds`` int64 ``[B]`` (the scored step; -1 greedy, -2 every step), ``noise_level`` and ``temperature``
    float32 ``[B]`` (as sampled, so annealing and temperature are recomputed exactly).
    """

    # what the RL objective never reaches (``vla_models.rl_parameters``): every trainable part is in its loss
    rl_untrained_prefixes: tuple[str, ...] = ()

    def __init__(self, config: OpenPiConfig, tokenizer: Any) -> None:
        super().__init__()
        self.config = cfg = config
        s = cfg.sizes
        w, d = s.expert_width, cfg.model_action_dim
        with checkpoint_backed():  # a loader fills every PaliGemma and expert weight: none is created first
            self.paligemma_with_expert = PaliGemmaWithExpert(cfg)
        self.action_in_proj = nn.Linear(d, w)
        self.action_out_proj = nn.Linear(w, d)
        if cfg.pi05:
            self.time_mlp_in = nn.Linear(w, w)
            self.time_mlp_out = nn.Linear(w, w)
        else:
            self.state_proj = nn.Linear(d, w)
            self.action_time_mlp_in = nn.Linear(2 * w, w)
            self.action_time_mlp_out = nn.Linear(w, w)
        self.value_head = (
            ValueHead(
                s.width if cfg.critic_after_vlm else w,
                hidden_sizes=cfg.value_head_hidden_sizes,
                activation=cfg.value_head_activation,
            )
            if cfg.add_value_head
            else None
        )
        self.noise_head = (
            NoiseHead(w, d, cfg.noise_logvar_range) if cfg.noise_method == "flow_noise" else None
        )
        self.tokenizer = tokenizer
        self.prompts = PromptTokenizer(tokenizer, cfg.token_len, state_in_prompt=cfg.state_in_prompt)
        stats = cfg.norm_stats or {}
        norm = dict(quantile=cfg.quantile_norm, style=cfg.norm_style)
        self.state_normalizer = OpenPiNormalizer(stats["state"], **norm) if "state" in stats else None
        self.action_normalizer = OpenPiNormalizer(stats["actions"], **norm) if "actions" in stats else None
        self.global_step = 0

    # ---- setup --------------------------------------------------------------------------------------------
    def finalize(self) -> OpenPiPolicy:
        """Freeze PaliGemma with ``train_expert_only``, add LoRA with ``is_lora`` (the language model's and the
        expert's projections adapt, every other weight of PaliGemma and the expert is frozen) and cast to
        ``precision``; call after loading weights."""
        cfg = self.config
        if cfg.is_lora:
            body = self.paligemma_with_expert
            for p in body.parameters():
                p.requires_grad_(False)
            apply_lora(body.gemma_expert.model, rank=cfg.lora_rank)
            if not cfg.train_expert_only:
                apply_lora(body.paligemma.model.language_model, rank=cfg.lora_rank)
        if cfg.train_expert_only:
            for p in self.vlm_parameters():
                p.requires_grad_(False)
        return self.apply_precision()

    def apply_precision(self) -> OpenPiPolicy:
        """Cast to the dtype layout of ``precision``: openpi and the reference framework run PaliGemma and the
        expert in ``precision`` but keep their norms, the action / state / time projections and the value and
        noise heads in float32. A loader applies it before loading, so each tensor lands in its final dtype."""
        self.to(DTYPES[self.config.precision])
        for name, module in self.named_modules():
            top = name.split(".")[0]
            if top in FLOAT32_MODULES or isinstance(module, (GemmaRMSNorm, AdaRMSNorm)):
                module.float()
        return self

    def merge_lora(self) -> None:
        """Fold LoRA into the base weights in place (for export); the policy then has no adapters."""
        merge_lora_(self.paligemma_with_expert)
        self.config = self.config.replace(is_lora=False)

    def vlm_parameters(self):
        return self.paligemma_with_expert.paligemma.parameters()

    def set_global_step(self, step: int) -> None:
        """The training iteration ``noise_anneal`` reads (the trainer sets it on the rollout before each
        iteration's rollouts; the sampled noise level is stored per row, so ``evaluate`` recomputes it exactly
        whatever the step is then)."""
        self.global_step = int(step)

    @property
    def device(self) -> torch.device:
        return self.action_in_proj.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The compute dtype of PaliGemma and the expert (``precision``)."""
        return self._vlm.language_model.embed_tokens.weight.dtype

    @property
    def _vlm(self) -> _PaliGemmaBody:
        return self.paligemma_with_expert.paligemma.model

    @property
    def _expert_body(self) -> _ExpertBody:
        return self.paligemma_with_expert.gemma_expert.model

    # ---- inputs -------------------------------------------------------------------------------------------
    def prepare_inputs(self, obs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Observation dict -> ``images``, ``image_mask``, ``input_ids``, ``text_mask``, ``states`` on the device,
        after ``vla_models.observations.check_observation`` (strings, finite values, at least one row)."""
        check_observation(obs)
        cfg = self.config
        images, image_mask = stack_cameras(obs, cfg.num_images_in_input, cfg.sizes.image_size)
        b = images.shape[0]
        states = obs.get("states")
        states = (
            torch.zeros(b, 0)
            if states is None
            else torch.as_tensor(states, dtype=torch.float32).reshape(b, -1)
        )
        if cfg.state_indices is not None:
            states = states[:, list(cfg.state_indices)]
        if cfg.adapt_to_pi:  # the state in pi0's ALOHA convention (what normalisation and delta actions see)
            states = aloha_state_to_pi(states)
        if states.shape[1] > cfg.model_action_dim:
            raise ValueError(
                f"states have {states.shape[1]} dims, more than model_action_dim={cfg.model_action_dim}; "
                "select columns with state_indices"
            )
        norm_state = self.normalized_states(states)
        ids, mask = self.prompts(list(obs["task_descriptions"]), norm_state, self.device)
        return {
            "images": images.to(self.device),
            "image_mask": image_mask.to(self.device),
            "input_ids": ids,
            "text_mask": mask,
            "states": states.to(self.device),
        }

    def normalized_states(self, states: torch.Tensor) -> torch.Tensor:
        states = states.float()
        return self.state_normalizer.normalize(states) if self.state_normalizer is not None else states

    def _model_state(self, states: torch.Tensor) -> torch.Tensor:
        """Normalised state zero-padded to the model's 32 dims (pi0's state token)."""
        s = self.normalized_states(states)
        return F.pad(s, (0, self.config.model_action_dim - s.shape[1]))

    # ---- the two passes -----------------------------------------------------------------------------------
    def compute_prefix(self, fi: Mapping[str, torch.Tensor]) -> Prefix:
        """Images and prompt through SigLIP, the projector and the language model (bidirectional)."""
        vlm, dt = self._vlm, self.dtype
        images = fi["images"]
        b, n = images.shape[:2]
        px = images.flatten(0, 1).permute(0, 3, 1, 2).to(dt) / 255.0 * 2.0 - 1.0
        feats = vlm.vision_tower(pixel_values=px).last_hidden_state
        img = vlm.multi_modal_projector(feats)
        p = img.shape[1]
        img = img.reshape(b, n * p, img.shape[-1])
        lm = vlm.language_model
        text = lm.embed_tokens(fi["input_ids"])
        h = torch.cat([img, text.to(img.dtype)], dim=1)
        valid = torch.cat(
            [fi["image_mask"].bool().repeat_interleave(p, dim=1), fi["text_mask"].bool()], dim=1
        )
        t0 = h.shape[1]
        allowed = valid[:, None, :] | torch.eye(t0, dtype=torch.bool, device=h.device)[None]
        mask = _additive(allowed, h.dtype)
        pos = (valid.long().cumsum(-1) - 1).clamp_min(0)
        pe = lm.rotary_emb(h, pos)
        cache = _RecordingCache()
        for layer in lm.layers:
            h = layer(h, attention_mask=mask, position_embeddings=pe, **cache_kwarg(layer, cache))
        return Prefix(cache.keys, cache.values, valid, valid.long().sum(-1), lm.norm(h))

    def expert_pass(
        self,
        prefix: Prefix,
        rows: torch.Tensor | None,
        x: torch.Tensor,
        t: torch.Tensor,
        states: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Velocity float32 ``[N, H, 32]`` and the expert's final hidden state of the action tokens ``[N, H, w]``.

        Args:
            prefix: ``compute_prefix`` output for B rows.
            rows: which prefix row each of the N inputs uses (None: ``N == B``, row i uses row i).
            x: points ``[N, H, 32]``; t: times ``[N]``; states: raw states ``[N, D]`` (pi0's state token).
        """
        cfg, dt = self.config, self.dtype
        keys, values, valid, n_valid = prefix.keys, prefix.values, prefix.valid, prefix.n_valid
        if rows is not None:
            keys = {i: k[rows] for i, k in keys.items()}
            values = {i: v[rows] for i, v in values.items()}
            valid, n_valid = valid[rows], n_valid[rows]
        w = cfg.sizes.expert_width
        head_dt = self.action_in_proj.weight.dtype
        time_dtype = torch.float64 if cfg.time_embedding_dtype == "float64" else torch.float32
        temb = sinusoidal_time_embedding(t, w, time_dtype).to(head_dt)
        act = self.action_in_proj(x.to(head_dt))
        horizon = act.shape[1]
        if cfg.pi05:
            cond = F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(temb))))
            tokens = act.to(dt)
        else:
            cond = None
            at = torch.cat([act, temb[:, None, :].expand(-1, horizon, -1)], dim=-1)
            at = self.action_time_mlp_out(F.silu(self.action_time_mlp_in(at)))
            state_tok = self.state_proj(self._model_state(states).to(head_dt))[:, None, :]
            tokens = torch.cat([state_tok, at], dim=1).to(dt)
        n, s = tokens.shape[:2]
        suffix_allowed = torch.ones(s, s, dtype=torch.bool, device=x.device)
        if not cfg.pi05:  # the state token sees the prefix and itself; action tokens see everything
            suffix_allowed[0, 1:] = False
        allowed = torch.cat(
            [valid[:, None, :].expand(n, s, -1), suffix_allowed[None].expand(n, -1, -1)], dim=2
        )
        mask = _additive(allowed, tokens.dtype)
        pos = n_valid[:, None] + torch.arange(s, device=x.device)[None]
        pe = self._vlm.language_model.rotary_emb(tokens, pos)
        cache = _PrefixCache(keys, values)
        h = tokens
        for layer in self._expert_body.layers:
            h = layer(h, mask, pe, cache, cond)
        h, _ = _norm(self._expert_body.norm, h, cond)
        out = h[:, -horizon:].float()
        return self.action_out_proj(out.to(head_dt)).float(), out

    # ---- denoising ----------------------------------------------------------------------------------------
    def _noise_std(self, hidden: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
        return self.noise_head(hidden).float() * temperature[:, None, None]

    def _step(
        self,
        method: str,
        x: torch.Tensor,
        v: torch.Tensor,
        hidden: torch.Tensor,
        k: torch.Tensor,
        noise_level: torch.Tensor,
        temperature: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std of step ``k`` (per row) under ``method``."""
        ts = timesteps(self.config.num_steps, device=x.device)
        t, delta = ts[k], ts[k] - ts[k + 1]
        kw: dict[str, torch.Tensor] = {}
        if method == "flow_sde":
            kw["sigma"] = sde_sigma(ts, k, noise_level)
        elif method == "flow_cps":
            kw["noise_level"] = noise_level
        elif method == "flow_noise":
            kw["noise_std"] = self._noise_std(hidden, temperature)
        return step_mean_std(method, x, v, t, delta, **kw)

    def _score(
        self, prefix: Prefix, fi: Mapping[str, torch.Tensor], *, compute_values: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Log-probs and entropy ``[B, C, A]`` of the stored chain's scored steps, and values ``[B]``."""
        cfg = self.config
        chains, inds = fi["chains"].float(), fi["denoise_inds"].long()
        nl, temp, states = fi["noise_level"].float(), fi["temperature"].float(), fi["states"]
        b, k_steps = chains.shape[0], cfg.num_steps
        logp = torch.zeros(b, *chains.shape[2:], device=chains.device)
        ent = torch.zeros_like(logp)
        method = cfg.noise_method
        single = torch.nonzero(inds >= 0).squeeze(-1)
        if len(single):
            k = inds[single]
            x, xn = chains[single, k], chains[single, k + 1]
            v, h = self.expert_pass(prefix, single, x, self._times(k), states[single])
            mean, std = self._step(method, x, v, h, k, nl[single], temp[single])
            logp = logp.index_put((single,), gaussian_logprob(xn, mean, std))
            ent = ent.index_put((single,), gaussian_entropy(std, xn.shape))
        joint = torch.nonzero(inds == JOINT).squeeze(-1)
        if len(joint):
            rows = joint.repeat_interleave(k_steps)
            k = torch.arange(k_steps, device=chains.device).repeat(len(joint))
            x = chains[joint, :k_steps].flatten(0, 1)
            xn = chains[joint, 1:].flatten(0, 1)
            v, h = self.expert_pass(prefix, rows, x, self._times(k), states[rows])
            mean, std = self._step(method, x, v, h, k, nl[rows], temp[rows])
            lp = gaussian_logprob(xn, mean, std).view(len(joint), k_steps, *xn.shape[1:])
            x0 = chains[joint, 0]
            lp0 = -0.5 * x0**2 - 0.5 * math.log(2 * math.pi)
            logp = logp.index_put((joint,), (lp0 + lp.sum(1)) / (k_steps + 1))
            e = gaussian_entropy(std, xn.shape).view(len(joint), k_steps, *xn.shape[1:])
            e0 = gaussian_entropy(torch.ones_like(x0), x0.shape)  # the initial noise's N(0, I) term
            ent = ent.index_put((joint,), (e0 + e.sum(1)) / (k_steps + 1))
        c, a = cfg.num_action_chunks, cfg.action_dim
        values = self._values(prefix, fi) if compute_values else None
        return logp[:, :c, :a], ent[:, :c, :a], values

    def _times(self, k: torch.Tensor) -> torch.Tensor:
        return timesteps(self.config.num_steps, device=k.device)[k]

    def _values(self, prefix: Prefix, fi: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """The critic: one definition in predict (sampled or greedy) and evaluate (see the README)."""
        cfg = self.config
        if self.value_head is None:
            return None
        if cfg.critic_after_vlm:
            out, valid = prefix.out, prefix.valid
            if cfg.value_vlm_mode == "mean_token":
                m = valid.unsqueeze(-1).to(out.dtype)
                feat = (out * m).sum(1) / m.sum(1).clamp_min(1)
            else:
                idx = torch.arange(valid.shape[1], device=valid.device)
                pick = (
                    (valid * idx).argmax(1) if cfg.value_vlm_mode == "last_token" else valid.float().argmax(1)
                )
                feat = out[torch.arange(out.shape[0], device=out.device), pick]
        else:
            chains = fi["chains"].float()
            ones = torch.ones(chains.shape[0], device=chains.device)
            with torch.set_grad_enabled(torch.is_grad_enabled() and not cfg.detach_critic_input):
                _, h = self.expert_pass(prefix, None, chains[:, 0], ones, fi["states"])
            h = h[:, : cfg.num_action_chunks] if cfg.chunk_critic_input else h
            feat = h.mean(1)
        if cfg.detach_critic_input:
            feat = feat.detach()
        return self.value_head(feat.to(self.value_head.mlp[0].weight.dtype))

    # ---- contract -----------------------------------------------------------------------------------------
    def _prefix_for_training(self, fi: Mapping[str, torch.Tensor]) -> Prefix:
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.config.train_expert_only):
            return self.compute_prefix(fi)

    def evaluate(
        self, forward_inputs: Mapping[str, torch.Tensor], *, compute_values: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Recompute what ``predict`` sampled, with gradients: ``(logprobs [B, C, A], entropy [B, C, A], values
        [B] or None)``, float32. Log-probs are those of the stored chain's scored step per row (0 for greedy
        rows); with ``joint_logprob`` the mean over ``log N(x_0; 0, I)`` and the K steps."""
        fi = {k: v.to(self.device) for k, v in forward_inputs.items()}
        prefix = self._prefix_for_training(fi)
        return self._score(prefix, fi, compute_values=compute_values)

    def predict(
        self,
        obs: Mapping[str, Any],
        *,
        mode: str = "sample",
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: Generators = None,
    ) -> PolicyOutput:
        """Denoise a chunk per observation.

        ``mode="sample"``: the noise method makes one step per row stochastic (drawn uniformly per row from the
        generator; every step with ``joint_logprob``); ``temperature`` scales its noise level / learned std.
        ``mode="greedy"``: the plain Euler ODE (log-probs 0). ``top_k`` has no meaning for a flow policy and must
        be None. Returns actions ``[B, C, A]`` in env units, log-probs and entropy ``[B, C, A]``, values ``[B]``.
        """
        if mode not in ("sample", "greedy"):
            raise ValueError(f"mode={mode!r} is not supported; allowed: ('sample', 'greedy')")
        if top_k is not None:
            raise ValueError(f"top_k={top_k!r} is not supported by a flow policy (openpi); leave it unset")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        cfg = self.config
        fi = self.prepare_inputs(obs)
        b, dev = fi["images"].shape[0], self.device
        k_steps = cfg.num_steps
        with torch.no_grad():
            prefix = self.compute_prefix(fi)
            x = randn_rows((b, cfg.action_horizon, cfg.model_action_dim), generator, dev)
            if mode == "greedy" or cfg.noise_method == "flow_ode":
                inds = torch.full((b,), GREEDY, dtype=torch.long, device=dev)
            elif cfg.joint_logprob:
                inds = torch.full((b,), JOINT, dtype=torch.long, device=dev)
            else:
                high = k_steps - 1 if cfg.ignore_last else k_steps
                inds = randint_rows(high, b, generator, dev)
            nl = torch.full((b,), cfg.noise_level_at(self.global_step) * temperature, device=dev)
            temp = torch.full((b,), float(temperature), device=dev)
            chain = [x]
            for i in range(k_steps):
                k = torch.full((b,), i, dtype=torch.long, device=dev)
                v, h = self.expert_pass(prefix, None, x, self._times(k), fi["states"])
                noisy = (inds == i) | (inds == JOINT)
                mean, std = self._step("flow_ode", x, v, h, k, nl, temp)
                if noisy.any():
                    m2, s2 = self._step(cfg.noise_method, x, v, h, k, nl, temp)
                    sel = noisy[:, None, None]
                    mean = torch.where(sel, m2, mean)
                    std = torch.where(sel, torch.broadcast_to(s2, x.shape), torch.zeros_like(x))
                eps = randn_rows(tuple(x.shape), generator, dev)
                x = mean + std * eps
                chain.append(x)
            fi.update(
                chains=torch.stack(chain, dim=1).float(),
                denoise_inds=inds,
                noise_level=nl,
                temperature=temp,
            )
            logp, ent, values = self._score(prefix, fi, compute_values=True)
        return PolicyOutput(
            actions=self.actions_from_model(x, fi["states"]),
            logprobs=logp,
            values=values,
            forward_inputs=fi,
            entropy=ent,
        )

    @torch.no_grad()
    def values(self, obs: Mapping[str, Any], *, generator: Generators = None) -> torch.Tensor:
        """V(obs) float32 ``[B]``: the critic ``predict`` returns, without denoising; zeros without a value head
        or for an empty batch.

        ``value_after_vlm``: one prefix pass. Otherwise the prefix pass and the expert's step-0 pass (t = 1) on
        the initial noise, drawn from ``generator`` as ``predict`` draws it, so the same generator state gives
        ``predict``'s value.
        """
        cfg = self.config
        b = len(obs["task_descriptions"])
        if self.value_head is None or b == 0:
            return torch.zeros(b, device=self.device)
        fi = self.prepare_inputs(obs)
        prefix = self.compute_prefix(fi)
        if not cfg.critic_after_vlm:
            shape = (b, cfg.action_horizon, cfg.model_action_dim)
            fi["chains"] = randn_rows(shape, generator, self.device)[:, None]
        return self._values(prefix, fi)

    # ---- action space -------------------------------------------------------------------------------------
    def actions_from_model(self, x: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """Model actions ``[B, H, 32]`` -> env actions ``[B, C, A]``: un-normalise, relative -> absolute on the
        ``delta_action_mask`` dims (adding the state), ALOHA's joint flips and gripper map with ``adapt_to_pi``,
        keep the first C steps and A dims."""
        cfg = self.config
        a = x.float()
        if self.action_normalizer is not None:
            a = self.action_normalizer.unnormalize(a)
        a = self._shift_by_state(a, states, +1.0)
        if cfg.adapt_to_pi:
            a = aloha_actions_from_pi(a)
        return a[:, : cfg.num_action_chunks, : cfg.action_dim]

    def _shift_by_state(self, a: torch.Tensor, states: torch.Tensor, sign: float) -> torch.Tensor:
        mask = self.config.delta_action_mask
        if mask is None:
            return a
        d = len(mask)
        if states.shape[1] < d:
            raise ValueError(f"delta_action_mask has {d} dims but the state has {states.shape[1]}")
        m = torch.tensor(mask, dtype=a.dtype, device=a.device)
        shift = torch.zeros_like(a)
        shift[..., :d] = (states[:, None, :d].float() * m) * sign
        return a + shift

    def model_actions(self, expert_actions: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """Env actions ``[B, C, A]`` -> the model's normalised ``[B, H, 32]`` (the last step repeated to H)."""
        cfg = self.config
        a = F.pad(expert_actions.float(), (0, cfg.model_action_dim - expert_actions.shape[-1]))
        if cfg.adapt_to_pi:
            a = aloha_actions_to_pi(a)
        a = self._shift_by_state(a, states, -1.0)
        if self.action_normalizer is not None:
            a = self.action_normalizer.normalize(a)
            a[..., cfg.action_dim :] = 0.0
        if a.shape[1] < cfg.action_horizon:
            a = torch.cat([a, a[:, -1:].expand(-1, cfg.action_horizon - a.shape[1], -1)], dim=1)
        return a

    def sft_loss(
        self, obs: Mapping[str, Any], expert_actions: torch.Tensor | Any
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Flow-matching loss on expert chunks ``[B, C, A]`` (env units): ``t ~ 0.999 Beta(1.5, 1) + 0.001``,
        ``x_t = t noise + (1 - t) a``, MSE of the velocity against ``noise - a`` over the first C steps (all 32
        dims, or ``[:C, :A]`` with ``sft_loss_dims="env"``)."""
        cfg = self.config
        fi = self.prepare_inputs(obs)
        acts = torch.as_tensor(expert_actions, dtype=torch.float32, device=self.device)
        want = (fi["images"].shape[0], cfg.num_action_chunks, cfg.action_dim)
        if tuple(acts.shape) != want:
            raise ValueError(
                f"expert_actions must have shape [B, C, A] = {list(want)}, got {list(acts.shape)}"
            )
        a = self.model_actions(acts, fi["states"])
        b = a.shape[0]
        beta = torch.distributions.Beta(torch.tensor(1.5), torch.tensor(1.0)).sample((b,)).to(self.device)
        t = beta * 0.999 + 0.001
        noise = torch.randn_like(a)
        x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * a
        prefix = self._prefix_for_training(fi)
        v, _ = self.expert_pass(prefix, None, x_t, t, fi["states"])
        c = cfg.num_action_chunks
        dims = cfg.action_dim if cfg.sft_loss_dims == "env" else cfg.model_action_dim
        loss = F.mse_loss(v[:, :c, :dims], (noise - a)[:, :c, :dims])
        with torch.no_grad():
            a_hat = x_t - t[:, None, None] * v
            l1 = (a_hat - a)[:, :c, : cfg.action_dim].abs().mean()
        return loss, {"sft/loss": float(loss.detach()), "sft/l1_normalized": float(l1)}

    # ---- persistence --------------------------------------------------------------------------------------
    def save_pretrained(self, path: str, *, max_shard_bytes: int = 4 * 1024**3) -> None:
        """Write openpi's layout (``model.safetensors`` in openpi names, config.json, norm stats, tokenizer)."""
        from vla_models.openpi.checkpoint_openpi import save_openpi

        save_openpi(self, path, max_shard_bytes=max_shard_bytes)

    @classmethod
    def from_pretrained(cls, path: str, **overrides: Any) -> OpenPiPolicy:
        from vla_models.openpi.checkpoint_openpi import load_openpi

        return load_openpi(path, **overrides)
