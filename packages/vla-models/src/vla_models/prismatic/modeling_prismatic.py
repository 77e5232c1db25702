"""Prismatic backbone built from transformers classes (no remote code): ViT towers -> projector -> Llama.

Each tower is the transformers model of its family (``Dinov2WithRegistersModel``, ``SiglipVisionModel``); the
feature is the output of the second-to-last block without CLS/register tokens (what Prismatic takes from
timm's ``get_intermediate_layers``), so the last block is kept for checkpoint compatibility but never run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import (
    Dinov2WithRegistersConfig,
    Dinov2WithRegistersModel,
    LlamaConfig,
    LlamaForCausalLM,
    SiglipVisionConfig,
    SiglipVisionModel,
)

from vla_models.cache_kwarg import cache_kwarg, output_cache
from vla_models.prismatic.configuration_prismatic import PrismaticConfig, VisionTowerConfig


class KeypointStem(nn.Module):
    """The ``keypoints`` tower (see :class:`VisionTowerConfig`): convolutions at full resolution, then a spatial
    softmax per output map -> its expected (x, y) in [-1, 1]; ``[B, 3, S, S]`` -> ``[B, 1, 2 K]``."""

    def __init__(self, cfg: VisionTowerConfig) -> None:
        super().__init__()
        width, k = cfg.mlp_dim, cfg.hidden_size // 2
        layers: list[nn.Module] = [nn.Conv2d(3, width, 5, padding=2), nn.ReLU()]
        for _ in range(cfg.num_layers - 2):
            layers += [nn.Conv2d(width, width, 3, padding=1), nn.ReLU()]
        layers.append(nn.Conv2d(width, k, 1))
        self.conv = nn.Sequential(*layers)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        heat = self.conv(pixels)
        b, k, h, w = heat.shape
        ys = torch.linspace(-1.0, 1.0, h, device=heat.device, dtype=heat.dtype)
        xs = torch.linspace(-1.0, 1.0, w, device=heat.device, dtype=heat.dtype)
        grid = torch.stack(torch.meshgrid(xs, ys, indexing="xy"), -1).reshape(h * w, 2)  # (x, y) per pixel
        points = torch.softmax(heat.flatten(2), -1) @ grid  # [B, K, 2]
        return points.reshape(b, 1, 2 * k)


def _build_tower(cfg: VisionTowerConfig, image_size: int, attn_implementation: str) -> nn.Module:
    if cfg.kind == "keypoints":
        return KeypointStem(cfg)
    common = dict(
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        image_size=image_size,
        patch_size=cfg.patch_size,
        layer_norm_eps=cfg.layer_norm_eps,
        attn_implementation=attn_implementation,
    )
    if cfg.kind == "dinov2_reg":
        if cfg.mlp_dim % cfg.hidden_size:
            raise ValueError(
                f"dinov2 mlp_dim {cfg.mlp_dim} must be a multiple of hidden_size {cfg.hidden_size}"
            )
        hf = Dinov2WithRegistersConfig(
            **common, mlp_ratio=cfg.mlp_dim // cfg.hidden_size, num_register_tokens=cfg.num_registers
        )
        return Dinov2WithRegistersModel(hf)
    # exact GELU, as timm's SigLIP tower that OpenVLA runs (transformers' SigLIP default is the tanh form)
    hf = SiglipVisionConfig(**common, intermediate_size=cfg.mlp_dim, hidden_act="gelu")
    return SiglipVisionModel(hf)


class FiLM(nn.Module):
    """FiLM of one tower's tokens by a language vector, inside every block that runs (OpenVLA-OFT's placement):
    ``x = x + ls1(attn(norm1(x)))``, then ``x = x * (1 + gamma) + beta`` with ``gamma = scale[i](l)``,
    ``beta = shift[i](l)``, then ``x = x + ls2(mlp(norm2(x)))``.

    Starts as the identity (zero-initialised projections).
    """

    def __init__(self, language_dim: int, vision_dim: int, num_blocks: int) -> None:
        super().__init__()
        self.scale = nn.ModuleList(nn.Linear(language_dim, vision_dim) for _ in range(num_blocks))
        self.shift = nn.ModuleList(nn.Linear(language_dim, vision_dim) for _ in range(num_blocks))
        for lin in (*self.scale, *self.shift):
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x: torch.Tensor, language: torch.Tensor, block: int) -> torch.Tensor:
        gamma = self.scale[block](language).unsqueeze(1)
        beta = self.shift[block](language).unsqueeze(1)
        return x * (1.0 + gamma) + beta


def _first(out: torch.Tensor | tuple) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


def _film_block(
    kind: str, layer: nn.Module, h: torch.Tensor, film: FiLM, language: torch.Tensor, i: int
) -> torch.Tensor:
    """One transformers ViT block with FiLM between its attention and MLP halves (see :class:`FiLM`)."""
    if kind == "dinov2_reg":
        h = h + layer.layer_scale1(_first(layer.attention(layer.norm1(h))))
        h = film(h, language, i)
        return h + layer.layer_scale2(layer.mlp(layer.norm2(h)))
    h = h + _first(layer.self_attn(hidden_states=layer.layer_norm1(h), attention_mask=None))
    h = film(h, language, i)
    return h + layer.mlp(layer.layer_norm2(h))


class FusedMLPProjector(nn.Module):
    """Prismatic ``fused-gelu-mlp``: fc1(vd -> 4 vd) GELU fc2(-> llm) GELU fc3(llm -> llm)."""

    def __init__(self, vision_dim: int, llm_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(vision_dim, 4 * vision_dim)
        self.fc2 = nn.Linear(4 * vision_dim, llm_dim)
        self.fc3 = nn.Linear(llm_dim, llm_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x)))))


class VisionBackbone(nn.Module):
    """``featurizer`` (first tower) and, when fused, ``fused_featurizer`` (second tower)."""

    def __init__(self, cfg: PrismaticConfig, attn_implementation: str) -> None:
        super().__init__()
        self.tower_cfgs = cfg.vision_towers
        self.featurizer = _build_tower(cfg.vision_towers[0], cfg.image_size, attn_implementation)
        if len(cfg.vision_towers) == 2:
            self.fused_featurizer = _build_tower(cfg.vision_towers[1], cfg.image_size, attn_implementation)

    def towers(self) -> list[tuple[VisionTowerConfig, nn.Module]]:
        mods = [self.featurizer] + ([self.fused_featurizer] if len(self.tower_cfgs) == 2 else [])
        return list(zip(self.tower_cfgs, mods, strict=True))


def _run_tower(
    cfg: VisionTowerConfig,
    tower: nn.Module,
    pixels: torch.Tensor,
    film: FiLM | None,
    language: torch.Tensor | None,
) -> torch.Tensor:
    """Patch features of the second-to-last block (a keypoints tower: its one token): ``[B, 3, S, S]`` ->
    ``[B, P, D]``."""
    if cfg.kind == "keypoints":
        return tower(pixels)
    h = tower.embeddings(pixels)
    if cfg.kind == "dinov2_reg":
        layers = tower.encoder.layer
        prefix = 1 + cfg.num_registers
        # transformers 5.17 has `forward(hidden_states)` alone; 5.23 adds `attention_mask=None`
        args: tuple = ()
    else:
        layers = tower.encoder.layers
        prefix = 0
        args = (None,)  # SigLIP's `attention_mask` has no default
    for i, layer in enumerate(layers[:-1]):
        h = layer(h, *args) if film is None else _film_block(cfg.kind, layer, h, film, language, i)
    return h[:, prefix:]


class PrismaticBackbone(nn.Module):
    """Vision towers + projector + Llama, with helpers used by both policy families.

    Args:
        cfg: backbone sizes.
        use_film: add FiLM language conditioning of the vision features (OpenVLA-OFT).
        attn_implementation: "sdpa" (default), "eager", or "flash_attention_2" (GPU extra).
    """

    def __init__(
        self, cfg: PrismaticConfig, *, use_film: bool = False, attn_implementation: str = "sdpa"
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.vision_backbone = VisionBackbone(cfg, attn_implementation)
        llm_dim = cfg.text.hidden_size
        self.projector = FusedMLPProjector(cfg.vision_dim, llm_dim)
        llama_cfg = LlamaConfig(
            vocab_size=cfg.padded_vocab_size,
            hidden_size=llm_dim,
            intermediate_size=cfg.text.intermediate_size,
            num_hidden_layers=cfg.text.num_layers,
            num_attention_heads=cfg.text.num_heads,
            num_key_value_heads=cfg.text.num_kv_heads,
            max_position_embeddings=cfg.text.max_position_embeddings,
            rms_norm_eps=cfg.text.rms_norm_eps,
            pad_token_id=cfg.pad_token_id,
            bos_token_id=cfg.bos_token_id,
            eos_token_id=2,
            tie_word_embeddings=False,
            attn_implementation=attn_implementation,
        )
        self.language_model = LlamaForCausalLM(llama_cfg)
        if use_film and cfg.vision_stem == "keypoints":
            raise ValueError(
                "use_film conditions ViT blocks; the keypoints vision_stem has none: set use_film false"
            )
        self.film = (
            nn.ModuleList(FiLM(llm_dim, t.hidden_size, t.num_layers - 1) for t in cfg.vision_towers)
            if use_film
            else None
        )
        # plain fp32 CPU tensors, not buffers: ``.to(bf16)`` must not round the normalisation constants
        f32 = dict(dtype=torch.float32, device="cpu")
        self.pixel_mean = torch.stack(
            [torch.tensor(t.image_mean, **f32).view(1, 3, 1, 1) for t in cfg.vision_towers]
        )
        self.pixel_std = torch.stack(
            [torch.tensor(t.image_std, **f32).view(1, 3, 1, 1) for t in cfg.vision_towers]
        )

    # ---- vision -------------------------------------------------------------------------------------------
    def pixel_values(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 ``[B, H, W, 3]`` -> normalised float ``[T, B, 3, S, S]`` (one per tower), resized if needed."""
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[-1] != 3:
            raise ValueError(f"images must be uint8 [B, H, W, 3], got {images.dtype} {tuple(images.shape)}")
        x = images.permute(0, 3, 1, 2).to(torch.float32) / 255.0
        size = self.cfg.image_size
        if x.shape[-2:] != (size, size):
            x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
        mean = self.pixel_mean.to(x.device, torch.float32)
        std = self.pixel_std.to(x.device, torch.float32)
        return (x.unsqueeze(0) - mean) / std

    def image_tokens(self, images: torch.Tensor, language: torch.Tensor | None = None) -> torch.Tensor:
        """uint8 ``[B, H, W, 3]`` (+ mean language embedding ``[B, H_llm]`` for FiLM) -> ``[B, P, H_llm]``."""
        dtype = self.projector.fc1.weight.dtype
        pixels = self.pixel_values(images).to(dtype)
        feats = []
        for i, (tcfg, tower) in enumerate(self.vision_backbone.towers()):
            film = self.film[i] if self.film is not None else None
            lang = language.to(dtype) if language is not None else None
            feats.append(_run_tower(tcfg, tower, pixels[i], film, lang))
        return self.projector(torch.cat(feats, dim=-1))

    # ---- language model -----------------------------------------------------------------------------------
    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.language_model.get_input_embeddings()

    def action_weight(self, action_start: int, n_bins: int) -> torch.Tensor:
        """LM-head rows of the action ids ``[n_bins, H]`` (a view: gradients reach the LM head)."""
        return self.language_model.get_output_embeddings().weight[action_start : action_start + n_bins]

    def decode(
        self,
        inputs_embeds: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        *,
        past_key_values: object | None = None,
        use_cache: bool = False,
    ) -> tuple[torch.Tensor, object | None]:
        """Run the Llama decoder on embeddings with an explicit boolean 4-D mask.

        Args:
            inputs_embeds: ``[B, T, H]``.
            attention_mask: bool ``[B, 1, T, T_kv]`` (True = may attend).
            position_ids: int64 ``[B, T]``.

        Returns:
            ``(last_hidden_state [B, T, H], cache or None)``.

        The mask is passed as an additive float mask (0 where allowed, the dtype's minimum elsewhere): every
        attention implementation adds it to the scores, whereas transformers' eager path would add a boolean
        mask as 0/1 and so ignore it.
        """
        dtype = inputs_embeds.dtype
        additive = torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device)
        additive = additive.masked_fill(~attention_mask.bool(), torch.finfo(dtype).min)
        decoder = self.language_model.model
        out = decoder(
            inputs_embeds=inputs_embeds,
            attention_mask=additive,
            position_ids=position_ids,
            use_cache=use_cache,
            **cache_kwarg(decoder, past_key_values),
        )
        return out.last_hidden_state, (output_cache(out) if use_cache else None)
