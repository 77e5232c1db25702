"""Parameter-name mapping between our transformers-based modules and the published OpenVLA layout.

OpenVLA checkpoints store the towers under timm names (``vision_backbone.featurizer.blocks.0.attn.qkv.weight``,
``...ls1.scale_factor``, ``...fused_featurizer.attn_pool.kv.weight``) while we hold transformers modules
(separate q/k/v, ``layer_scale1.lambda1``, ``head.attention.in_proj_weight``). The projector and the Llama
language model share names. Everything else (value head, proprio projector, FiLM, action queries) is stored
under its own module path.

timm's DINOv2-with-registers uses ``no_embed_class=True`` (``pos_embed`` covers patches only; CLS gets none)
while transformers adds ``position_embeddings[:, 0]`` to CLS: loading sets that row to 0, saving folds it
into ``cls_token`` -- both exact.
"""

from __future__ import annotations

import re

import torch

from vla_models.prismatic.configuration_prismatic import VisionTowerConfig

_TOWER_PREFIXES = ("vision_backbone.featurizer.", "vision_backbone.fused_featurizer.")


def _split_qkv(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v = t.chunk(3, dim=0)
    return q, k, v


def _attention_names(kind: str) -> dict[str, str]:
    """Names of the q, k, v and output projections inside one tower block of the installed transformers.

    SigLIP: ``self_attn.{q,k,v,out}_proj``. DINOv2-with-registers: ``attention.{q,k,v,o}_proj`` in transformers
    5.23; ``attention.attention.{query,key,value}`` and ``attention.output.dense`` in 5.17 (both seen in use).
    """
    if kind != "dinov2_reg":
        return {
            "q": "self_attn.q_proj",
            "k": "self_attn.k_proj",
            "v": "self_attn.v_proj",
            "o": "self_attn.out_proj",
        }
    from transformers.models.dinov2_with_registers import modeling_dinov2_with_registers as dinov2

    if hasattr(dinov2, "Dinov2WithRegistersSelfAttention"):  # the older layout
        return {
            "q": "attention.attention.query",
            "k": "attention.attention.key",
            "v": "attention.attention.value",
            "o": "attention.output.dense",
        }
    return {
        "q": "attention.q_proj",
        "k": "attention.k_proj",
        "v": "attention.v_proj",
        "o": "attention.o_proj",
    }


def _tower_to_timm(kind: str, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    if kind == "keypoints":  # no timm counterpart: stored under its own module names
        return dict(sd)
    out: dict[str, torch.Tensor] = {}
    blocks = "encoder.layer." if kind == "dinov2_reg" else "encoder.layers."
    names = _attention_names(kind)
    n1, n2 = ("norm1", "norm2") if kind == "dinov2_reg" else ("layer_norm1", "layer_norm2")
    idx = sorted({int(k[len(blocks) :].split(".")[0]) for k in sd if k.startswith(blocks)})
    for i in idx:
        p, b = f"{blocks}{i}.", f"blocks.{i}."
        for kind_ in ("weight", "bias"):
            out[f"{b}norm1.{kind_}"] = sd[f"{p}{n1}.{kind_}"]
            out[f"{b}norm2.{kind_}"] = sd[f"{p}{n2}.{kind_}"]
            out[f"{b}attn.qkv.{kind_}"] = torch.cat([sd[f"{p}{names[x]}.{kind_}"] for x in "qkv"], dim=0)
            out[f"{b}attn.proj.{kind_}"] = sd[f"{p}{names['o']}.{kind_}"]
            out[f"{b}mlp.fc1.{kind_}"] = sd[f"{p}mlp.fc1.{kind_}"]
            out[f"{b}mlp.fc2.{kind_}"] = sd[f"{p}mlp.fc2.{kind_}"]
        if kind == "dinov2_reg":
            out[f"{b}ls1.scale_factor"] = sd[f"{p}layer_scale1.lambda1"]
            out[f"{b}ls2.scale_factor"] = sd[f"{p}layer_scale2.lambda1"]
    if kind == "dinov2_reg":
        pos = sd["embeddings.position_embeddings"]
        out["cls_token"] = sd["embeddings.cls_token"] + pos[:, :1]
        out["pos_embed"] = pos[:, 1:]
        out["reg_token"] = sd["embeddings.register_tokens"]
        out["patch_embed.proj.weight"] = sd["embeddings.patch_embeddings.projection.weight"]
        out["patch_embed.proj.bias"] = sd["embeddings.patch_embeddings.projection.bias"]
        out["norm.weight"], out["norm.bias"] = sd["layernorm.weight"], sd["layernorm.bias"]
    else:
        out["pos_embed"] = sd["embeddings.position_embedding.weight"].unsqueeze(0)
        out["patch_embed.proj.weight"] = sd["embeddings.patch_embedding.weight"]
        out["patch_embed.proj.bias"] = sd["embeddings.patch_embedding.bias"]
        out["norm.weight"], out["norm.bias"] = sd["post_layernorm.weight"], sd["post_layernorm.bias"]
        if "head.probe" in sd:
            d = sd["head.probe"].shape[-1]
            out["attn_pool.latent"] = sd["head.probe"]
            w, bias = sd["head.attention.in_proj_weight"], sd["head.attention.in_proj_bias"]
            out["attn_pool.q.weight"], out["attn_pool.kv.weight"] = w[:d], w[d:]
            out["attn_pool.q.bias"], out["attn_pool.kv.bias"] = bias[:d], bias[d:]
            for kind_ in ("weight", "bias"):
                out[f"attn_pool.proj.{kind_}"] = sd[f"head.attention.out_proj.{kind_}"]
                out[f"attn_pool.norm.{kind_}"] = sd[f"head.layernorm.{kind_}"]
                out[f"attn_pool.mlp.fc1.{kind_}"] = sd[f"head.mlp.fc1.{kind_}"]
                out[f"attn_pool.mlp.fc2.{kind_}"] = sd[f"head.mlp.fc2.{kind_}"]
    return out


def _tower_from_timm(kind: str, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    if kind == "keypoints":
        return dict(sd)
    out: dict[str, torch.Tensor] = {}
    blocks = "encoder.layer." if kind == "dinov2_reg" else "encoder.layers."
    names = _attention_names(kind)
    n1, n2 = ("norm1", "norm2") if kind == "dinov2_reg" else ("layer_norm1", "layer_norm2")
    idx = sorted({int(m.group(1)) for k in sd if (m := re.match(r"blocks\.(\d+)\.", k))})
    for i in idx:
        p, b = f"{blocks}{i}.", f"blocks.{i}."
        for kind_ in ("weight", "bias"):
            out[f"{p}{n1}.{kind_}"] = sd[f"{b}norm1.{kind_}"]
            out[f"{p}{n2}.{kind_}"] = sd[f"{b}norm2.{kind_}"]
            for x, t in zip("qkv", _split_qkv(sd[f"{b}attn.qkv.{kind_}"]), strict=True):
                out[f"{p}{names[x]}.{kind_}"] = t
            out[f"{p}{names['o']}.{kind_}"] = sd[f"{b}attn.proj.{kind_}"]
            out[f"{p}mlp.fc1.{kind_}"] = sd[f"{b}mlp.fc1.{kind_}"]
            out[f"{p}mlp.fc2.{kind_}"] = sd[f"{b}mlp.fc2.{kind_}"]
        if kind == "dinov2_reg":
            out[f"{p}layer_scale1.lambda1"] = sd[f"{b}ls1.scale_factor"]
            out[f"{p}layer_scale2.lambda1"] = sd[f"{b}ls2.scale_factor"]
    if kind == "dinov2_reg":
        cls = sd["cls_token"]
        out["embeddings.cls_token"] = cls
        out["embeddings.position_embeddings"] = torch.cat([torch.zeros_like(cls), sd["pos_embed"]], dim=1)
        out["embeddings.register_tokens"] = sd["reg_token"]
        out["embeddings.patch_embeddings.projection.weight"] = sd["patch_embed.proj.weight"]
        out["embeddings.patch_embeddings.projection.bias"] = sd["patch_embed.proj.bias"]
        if "norm.weight" in sd:
            out["layernorm.weight"], out["layernorm.bias"] = sd["norm.weight"], sd["norm.bias"]
    else:
        out["embeddings.position_embedding.weight"] = sd["pos_embed"].squeeze(0)
        out["embeddings.patch_embedding.weight"] = sd["patch_embed.proj.weight"]
        out["embeddings.patch_embedding.bias"] = sd["patch_embed.proj.bias"]
        if "norm.weight" in sd:
            out["post_layernorm.weight"], out["post_layernorm.bias"] = sd["norm.weight"], sd["norm.bias"]
        if "attn_pool.latent" in sd:
            out["head.probe"] = sd["attn_pool.latent"]
            out["head.attention.in_proj_weight"] = torch.cat(
                [sd["attn_pool.q.weight"], sd["attn_pool.kv.weight"]]
            )
            out["head.attention.in_proj_bias"] = torch.cat([sd["attn_pool.q.bias"], sd["attn_pool.kv.bias"]])
            for kind_ in ("weight", "bias"):
                out[f"head.attention.out_proj.{kind_}"] = sd[f"attn_pool.proj.{kind_}"]
                out[f"head.layernorm.{kind_}"] = sd[f"attn_pool.norm.{kind_}"]
                out[f"head.mlp.fc1.{kind_}"] = sd[f"attn_pool.mlp.fc1.{kind_}"]
                out[f"head.mlp.fc2.{kind_}"] = sd[f"attn_pool.mlp.fc2.{kind_}"]
    return out


def _split_by_prefix(
    sd: dict[str, torch.Tensor],
) -> tuple[list[dict[str, torch.Tensor]], dict[str, torch.Tensor]]:
    towers: list[dict[str, torch.Tensor]] = [{}, {}]
    rest: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        for i, prefix in enumerate(_TOWER_PREFIXES):
            if k.startswith(prefix):
                towers[i][k[len(prefix) :]] = v
                break
        else:
            rest[k] = v
    return towers, rest


def unused_tower_keys(towers: tuple[VisionTowerConfig, ...]) -> tuple[str, ...]:
    """Prefixes of tower parameters that the forward never uses (last block, final norms, pooling head,
    DINOv2 mask token); a checkpoint may lack them."""
    out = []
    for i, cfg in enumerate(towers):
        if cfg.kind == "keypoints":  # every parameter is used
            continue
        p = "backbone." + _TOWER_PREFIXES[i]
        blocks = "encoder.layer." if cfg.kind == "dinov2_reg" else "encoder.layers."
        out += [
            f"{p}{blocks}{cfg.num_layers - 1}.",
            f"{p}embeddings.mask_token",
            f"{p}head.",
            f"{p}layernorm.",
            f"{p}post_layernorm.",
        ]
    return tuple(out)


def to_openvla_names(
    state_dict: dict[str, torch.Tensor], towers: tuple[VisionTowerConfig, ...]
) -> dict[str, torch.Tensor]:
    """Our module state dict -> OpenVLA checkpoint names (``mask_token`` of DINOv2 is dropped: unused)."""
    tower_sds, rest = _split_by_prefix(state_dict)
    out = dict(rest)
    for i, cfg in enumerate(towers):
        sd = {k: v for k, v in tower_sds[i].items() if k != "embeddings.mask_token"}
        for k, v in _tower_to_timm(cfg.kind, sd).items():
            out[_TOWER_PREFIXES[i] + k] = v
    return out


def from_openvla_names(
    state_dict: dict[str, torch.Tensor], towers: tuple[VisionTowerConfig, ...]
) -> dict[str, torch.Tensor]:
    """OpenVLA checkpoint names -> our module state dict (raises ``KeyError`` naming a missing tensor)."""
    tower_sds, rest = _split_by_prefix(state_dict)
    out = dict(rest)
    for i, cfg in enumerate(towers):
        try:
            converted = _tower_from_timm(cfg.kind, tower_sds[i])
        except KeyError as e:
            raise KeyError(f"checkpoint lacks {_TOWER_PREFIXES[i]}{e.args[0]}") from None
        for k, v in converted.items():
            out[_TOWER_PREFIXES[i] + k] = v
    return out


def film_state_dict(
    side: dict[str, torch.Tensor], towers: tuple[VisionTowerConfig, ...]
) -> dict[str, torch.Tensor]:
    """OpenVLA-OFT's ``vision_backbone--*.pt`` (FiLM-wrapped towers with LoRA) -> plain OpenVLA tower names plus
    ``film.<tower>.{scale,shift}.<block>.*``; see :func:`vla_models.prismatic.film.film_checkpoint_to_openvla`."""
    from vla_models.prismatic.film import film_checkpoint_to_openvla

    return film_checkpoint_to_openvla(side, towers)
