"""pi0 / pi0.5's network, built from transformers blocks with openpi's ``PI0Pytorch`` module names: the prefix pass
(images and prompt through PaliGemma) and the expert pass (the velocity of the action chunk at time t).

Module tree (state-dict names equal openpi's, except SigLIP, which transformers keeps flat: openpi's
``vision_tower.vision_model.*`` is ``vision_tower.*`` here, and the tied embedding, stored by openpi as
``paligemma.lm_head.weight``, is ``language_model.embed_tokens.weight``; ``vla_models.openpi.checkpoint_keys``
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

The prefix (images, then the prompt; bidirectional, padding masked) runs once through the language model and its
per-layer keys/values are kept; each expert pass runs the expert on the suffix (pi0: the state token, then H action
tokens; pi0.5: H action tokens) attending to them. Masks are additive float masks (a boolean 4-D mask is ignored
by transformers' eager attention).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

from vla_models.cache_kwarg import cache_kwarg
from vla_models.dtypes import DTYPES
from vla_models.lora import apply_lora, merge_lora_
from vla_models.meta_init import checkpoint_backed
from vla_models.openpi.configuration_openpi import OpenPiConfig
from vla_models.openpi.layers_openpi import (
    AdaRMSNorm,
    ExpertBody,
    NoiseHead,
    PaliGemmaBody,
    PaliGemmaWithExpert,
    Prefix,
    PrefixCache,
    RecordingCache,
    additive_mask,
    norm_with_gate,
    sinusoidal_time_embedding,
)
from vla_models.openpi.processing_openpi import (
    OpenPiNormalizer,
    aloha_actions_from_pi,
    aloha_actions_to_pi,
)
from vla_models.value_head import ValueHead

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

M = TypeVar("M", bound="OpenPiVelocityModel")


class OpenPiVelocityModel(nn.Module):
    """pi0 / pi0.5's modules (PaliGemma with the action expert, the action / state / time projections, the value
    and noise heads), the normalisation of its states and actions, and its two passes. ``OpenPiPolicy`` adds the
    denoising chain and the policy contract."""

    def __init__(self, config: OpenPiConfig) -> None:
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
        stats = cfg.norm_stats or {}
        norm = dict(quantile=cfg.quantile_norm, style=cfg.norm_style)
        self.state_normalizer = OpenPiNormalizer(stats["state"], **norm) if "state" in stats else None
        self.action_normalizer = OpenPiNormalizer(stats["actions"], **norm) if "actions" in stats else None
        if self.action_normalizer is not None and self.action_normalizer.dim < cfg.action_dim:
            raise ValueError(
                f"the action statistics cover {self.action_normalizer.dim} dimensions, fewer than action_dim="
                f"{cfg.action_dim}: they belong to another action space"
            )

    # ---- setup ----------------------------------------------------------------------------------------------
    def finalize(self: M) -> M:
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

    def apply_precision(self: M) -> M:
        """Cast to the dtype layout of ``precision``: openpi and the reference framework run PaliGemma and the
        expert in ``precision`` but keep their norms, the action / state / time projections and the value and
        noise heads in float32. A loader applies it before loading, so each tensor lands in its final dtype.
        Each tensor is cast once, to its own dtype: a float32 tensor that stays float32 keeps every bit (a trained
        projection is not rounded through ``precision`` when a folder is reloaded)."""
        low = DTYPES[self.config.precision]
        keep: set[int] = set()
        for name, module in self.named_modules():
            top = name.split(".")[0]
            if top in FLOAT32_MODULES or isinstance(module, (GemmaRMSNorm, AdaRMSNorm)):
                keep.update(id(t) for t in (*module.parameters(), *module.buffers()))

        def cast(t: torch.Tensor) -> torch.Tensor:
            if not t.is_floating_point():
                return t
            return t.float() if id(t) in keep else t.to(low)

        return self._apply(cast)

    def merge_lora(self) -> None:
        """Fold LoRA into the base weights in place (for export); the policy then has no adapters."""
        merge_lora_(self.paligemma_with_expert)
        self.config = self.config.replace(is_lora=False)

    def vlm_parameters(self):
        return self.paligemma_with_expert.paligemma.parameters()

    @property
    def device(self) -> torch.device:
        return self.action_in_proj.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The compute dtype of PaliGemma and the expert (``precision``)."""
        return self._vlm.language_model.embed_tokens.weight.dtype

    @property
    def _vlm(self) -> PaliGemmaBody:
        return self.paligemma_with_expert.paligemma.model

    @property
    def _expert_body(self) -> ExpertBody:
        return self.paligemma_with_expert.gemma_expert.model

    # ---- states ---------------------------------------------------------------------------------------------
    def normalized_states(self, states: torch.Tensor) -> torch.Tensor:
        """Raw states ``[B, D]`` normalised with the ``state`` statistics (unchanged without them), float32."""
        states = states.float()
        if self.state_normalizer is None:
            return states
        if self.state_normalizer.dim < states.shape[-1]:
            raise ValueError(
                f"the state statistics cover {self.state_normalizer.dim} dimensions, the env's state has "
                f"{states.shape[-1]}: they belong to another state space"
            )
        return self.state_normalizer.normalize(states)

    def _model_state(self, states: torch.Tensor) -> torch.Tensor:
        """Normalised state zero-padded to the model's 32 dims (pi0's state token)."""
        s = self.normalized_states(states)
        return F.pad(s, (0, self.config.model_action_dim - s.shape[1]))

    # ---- the two passes -------------------------------------------------------------------------------------
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
        mask = additive_mask(allowed, h.dtype)
        pos = (valid.long().cumsum(-1) - 1).clamp_min(0)
        pe = lm.rotary_emb(h, pos)
        cache = RecordingCache()
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
        mask = additive_mask(allowed, tokens.dtype)
        pos = n_valid[:, None] + torch.arange(s, device=x.device)[None]
        pe = self._vlm.language_model.rotary_emb(tokens, pos)
        cache = PrefixCache(keys, values)
        h = tokens
        for layer in self._expert_body.layers:
            h = layer(h, mask, pe, cache, cond)
        h, _ = norm_with_gate(self._expert_body.norm, h, cond)
        out = h[:, -horizon:].float()
        return self.action_out_proj(out.to(head_dt)).float(), out

    # ---- action space ---------------------------------------------------------------------------------------
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
