"""Published OpenVLA / OpenVLA-OFT folders: reading their Prismatic ``config.json``, tensor shapes and OpenVLA-OFT's
training side files, and writing the Prismatic fields of the ``config.json`` of a folder ``save_pretrained`` writes.

Published folders name only the 7B timm ids: towers are sized from their tensors, the DINOv2 normalisation comes
from ``preprocessor_config.json``, statistics from ``dataset_statistics.json``. OpenVLA-OFT's training writes
``proprio_projector--*.pt``, ``action_head--*.pt`` and ``vision_backbone--*.pt`` (FiLM) next to the merged model;
they are read with ``torch.load(weights_only=True)`` (plain tensors only).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vla_models.checkpoint_files import read_json
from vla_models.checkpoint_settings import check_against
from vla_models.families import family_for_checkpoint, get_family
from vla_models.prismatic.configuration_prismatic import (
    HEAD_DIMS,
    OPENVLA_DINOV2_MEAN,
    OPENVLA_DINOV2_STD,
    SIGLIP_MEAN,
    SIGLIP_STD,
    LanguageModelConfig,
    PrismaticConfig,
    VisionTowerConfig,
)

logger = logging.getLogger(__name__)

KNOWN_TIMM_IDS = ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"]
# keys that describe the backbone, compared against it rather than set
BACKBONE_KEYS = {
    "image_size": lambda b: b.image_size,
    "patch_size": lambda b: b.vision_towers[0].patch_size,
    "hidden_size": lambda b: b.text.hidden_size,
    "vision_stem": lambda b: b.vision_stem,
}
# the family of a config saved before configs named theirs
UNNAMED_SAVED_FAMILY = "openvla"
# the layouts this module reads: a folder written by save_pretrained, a published OpenVLA folder
SAVED_LAYOUT = "save_pretrained"
PUBLISHED_LAYOUT = "openvla_published"
# the layout of a published folder with OpenVLA-OFT's training side files; a family that lists it reads them
OFT_TRAINING_LAYOUT = "openvla_oft_training"
# OpenVLA-OFT's training writes these next to the merged model (torch.save of a DDP-wrapped state dict)
SIDE_FILES = {
    "proprio_projector": "proprio_projector--*_checkpoint.pt",
    "l1_head": "action_head--*_checkpoint.pt",
    "film": "vision_backbone--*_checkpoint.pt",
}


def openvla_config_fields(cfg: Any) -> dict[str, Any]:
    """The Prismatic/OpenVLA fields of ``config.json`` for a policy config ``cfg`` (what a published OpenVLA
    folder holds, so that its readers read ours)."""
    b: PrismaticConfig = cfg.backbone
    t = b.text
    return {
        "architectures": ["OpenVLAForActionPrediction"],
        "model_type": "openvla",
        "arch_specifier": "no-align+fused-gelu-mlp",
        "vision_backbone_id": "dinosiglip-vit-so-224px",
        "llm_backbone_id": "llama2-7b-pure",
        "hf_llm_id": "meta-llama/Llama-2-7b-hf",
        "image_resize_strategy": "resize-naive",
        "image_sizes": [b.image_size, b.image_size],
        "llm_max_length": t.max_position_embeddings,
        "n_action_bins": cfg.n_action_bins,
        "norm_stats": cfg.norm_stats,
        "output_projector_states": False,
        "pad_to_multiple_of": b.pad_to_multiple_of,
        "pad_token_id": b.pad_token_id,
        "text_config": {
            "model_type": "llama",
            "vocab_size": b.padded_vocab_size,
            "hidden_size": t.hidden_size,
            "intermediate_size": t.intermediate_size,
            "num_hidden_layers": t.num_layers,
            "num_attention_heads": t.num_heads,
            "num_key_value_heads": t.num_kv_heads,
            "max_position_embeddings": t.max_position_embeddings,
            "rms_norm_eps": t.rms_norm_eps,
            "pad_token_id": b.pad_token_id,
        },
        "timm_model_ids": KNOWN_TIMM_IDS[: len(b.vision_towers)],
        "timm_override_act_layers": [None] * len(b.vision_towers),
        "torch_dtype": {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[cfg.precision],
        "use_fused_vision_backbone": len(b.vision_towers) == 2,
    }


def _tower_from_tensors(sd: dict[str, torch.Tensor], prefix: str, kind: str) -> VisionTowerConfig:
    """Width, depth, MLP size, patch size and registers of a published tower, read from its tensor shapes (the
    published config.json names only the 7B timm ids); heads follow from the towers' head size."""
    name = prefix + "patch_embed.proj.weight"
    if name not in sd:
        raise ValueError(f"checkpoint lacks {name}")
    width, patch = sd[name].shape[0], sd[name].shape[-1]
    depth = 1 + max(
        (int(k[len(prefix) :].split(".")[1]) for k in sd if k.startswith(prefix + "blocks.")), default=-1
    )
    fc1 = sd.get(prefix + "blocks.0.mlp.fc1.weight")
    if depth < 2 or fc1 is None:
        raise ValueError(f"checkpoint tower {prefix} has {depth} blocks; at least 2 are needed")
    head_dim = HEAD_DIMS[kind]
    if width % head_dim:
        raise ValueError(f"{name} width {width} is not a multiple of the {kind} head size {head_dim}")
    reg = sd.get(prefix + "reg_token")
    extra: dict[str, Any] = {}
    if kind == "dinov2_reg":
        extra = dict(
            num_registers=int(reg.shape[1]) if reg is not None else 0,
            image_mean=OPENVLA_DINOV2_MEAN,
            image_std=OPENVLA_DINOV2_STD,
        )
    else:
        extra = dict(image_mean=SIGLIP_MEAN, image_std=SIGLIP_STD)
    return VisionTowerConfig(
        kind=kind,
        hidden_size=int(width),
        num_layers=int(depth),
        num_heads=int(width // head_dim),
        mlp_dim=int(fc1.shape[0]),
        patch_size=int(patch),
        **extra,
    )


def _normalize_params(folder: Path, n_towers: int) -> list[tuple[tuple, tuple]] | None:
    """Per-tower ``(mean, std)`` the released processor normalises with (``tvf_normalize_params`` of
    preprocessor_config.json), or None when the folder has no such file."""
    f = folder / "preprocessor_config.json"
    if not f.exists():
        return None
    params = read_json(f, expect=dict).get("tvf_normalize_params")
    if params is None:
        return None
    if len(params) != n_towers:
        raise ValueError(f"{f}: tvf_normalize_params has {len(params)} entries for {n_towers} vision towers")
    return [(tuple(float(x) for x in p["mean"]), tuple(float(x) for x in p["std"])) for p in params]


def config_from_openvla(
    d: dict[str, Any], sd: dict[str, torch.Tensor] | None = None, folder: Path | None = None
) -> dict[str, Any]:
    """Our OpenVLA config dict from a published OpenVLA config.json (tower sizes from the tensors in ``sd``;
    normalisation constants from ``folder``'s preprocessor_config.json; LM sizes from ``text_config`` with the
    ``LlamaConfig`` defaults the published model runs with: 7B sizes, ``rms_norm_eps`` 1e-6)."""
    if "timm_model_ids" not in d or "text_config" not in d:
        raise ValueError(
            f"config.json is not a published OpenVLA config (no timm_model_ids / text_config; its model_type is "
            f"{d.get('model_type')!r}): a folder of another model family"
        )
    if list(d.get("timm_model_ids", [])) != KNOWN_TIMM_IDS:
        raise ValueError(f"unsupported timm_model_ids {d.get('timm_model_ids')}; supported: {KNOWN_TIMM_IDS}")
    if "text_config" not in d:
        raise ValueError("config.json has no text_config (not an OpenVLA config)")
    tc = d["text_config"]
    base = PrismaticConfig.openvla_7b()
    heads = tc.get("num_attention_heads", 32)
    text = LanguageModelConfig(
        hidden_size=tc.get("hidden_size", 4096),
        num_layers=tc.get("num_hidden_layers", 32),
        num_heads=heads,
        num_kv_heads=tc.get("num_key_value_heads") or heads,
        intermediate_size=tc.get("intermediate_size", 11008),
        max_position_embeddings=tc.get("max_position_embeddings", 2048),
        rms_norm_eps=tc.get("rms_norm_eps", 1e-6),
        rope_theta=tc.get("rope_theta", 10000.0),
    )
    towers = base.vision_towers
    if sd is not None:
        towers = (
            _tower_from_tensors(sd, "vision_backbone.featurizer.", "dinov2_reg"),
            _tower_from_tensors(sd, "vision_backbone.fused_featurizer.", "siglip"),
        )
    norm = _normalize_params(folder, len(towers)) if folder is not None else None
    if norm is not None:
        towers = tuple(
            dataclasses.replace(t, image_mean=m, image_std=s) for t, (m, s) in zip(towers, norm, strict=True)
        )
    pad = int(d.get("pad_token_id", 32000))
    backbone = PrismaticConfig(
        image_size=int(d.get("image_sizes", [224])[0]),
        vision_towers=towers,
        text=text,
        vocab_size=pad,  # OpenVLA appends <PAD> right after the base vocabulary
        pad_to_multiple_of=int(d.get("pad_to_multiple_of", 64)),
        pad_token_id=pad,
    )
    if "vocab_size" in tc and tc["vocab_size"] != backbone.padded_vocab_size:
        raise ValueError(
            f"text_config.vocab_size={tc['vocab_size']} does not match pad_token_id {pad} padded to a multiple "
            f"of {backbone.pad_to_multiple_of} ({backbone.padded_vocab_size})"
        )
    stats = d.get("norm_stats")
    return {"backbone": backbone, "n_action_bins": int(d.get("n_action_bins", 256)), "norm_stats": stats}


def saved_family(path: Path) -> str | None:
    """The family of a folder written by ``save_pretrained`` (its ``vla_models.family``; configs saved before
    the key existed are OpenVLA ones), or None for any other folder."""
    try:
        d = read_json(path / "config.json")
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or not isinstance(d.get("vla_models"), dict):
        return None
    return str(d["vla_models"].get("family", UNNAMED_SAVED_FAMILY))


def published_prismatic_folder(path: Path) -> bool | None:
    """Whether a folder without a ``vla_models`` block carries OpenVLA-OFT training side files (None: the folder
    has a readable ``vla_models`` block or no readable JSON object in ``config.json``)."""
    try:
        d = read_json(path / "config.json")
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or "vla_models" in d:
        return None
    return any(next(path.glob(pattern), None) is not None for pattern in SIDE_FILES.values())


def side_file(folder: Path, kind: str) -> Path | None:
    """The one ``<kind>--<step>_checkpoint.pt`` of ``folder`` (None if absent; several is an error)."""
    found = sorted(folder.glob(SIDE_FILES[kind]))
    if len(found) > 1:
        raise ValueError(
            f"{folder} holds several {SIDE_FILES[kind]} files {[f.name for f in found]}; keep one"
        )
    return found[0] if found else None


def read_side_file(path: Path) -> dict[str, torch.Tensor]:
    """Tensors of an OpenVLA-OFT side file, read with ``torch.load(weights_only=True)`` (plain tensors only, no
    code objects), a leading ``module.`` (DDP) stripped."""
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # unpickling refused or a corrupt file
        raise ValueError(f"{path} cannot be read as a tensor state dict (weights_only=True): {e}") from None
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ValueError(f"{path} is not a state dict of tensors")
    return {k.removeprefix("module."): v for k, v in sd.items()}


def _published_oft_facts(folder: Path, side: dict[str, dict[str, torch.Tensor]]) -> dict[str, Any]:
    """What the side files fix: proprio size (projector input), action size (L1 head output)."""
    facts: dict[str, Any] = {}
    if "proprio_projector" in side:
        w = side["proprio_projector"].get("fc1.weight")
        if w is None:
            raise ValueError(f"{side_file(folder, 'proprio_projector')} has no fc1.weight")
        facts["proprio_dim"] = int(w.shape[1])
    if "l1_head" in side:
        w = side["l1_head"].get("model.fc2.weight")
        if w is None:
            raise ValueError(f"{side_file(folder, 'l1_head')} has no model.fc2.weight")
        facts["action_dim"] = int(w.shape[0])
    return facts


def read_published_folder(
    p: Path,
    d: dict[str, Any],
    sd: dict[str, torch.Tensor],
    given: Mapping[str, Any],
    action_head: str = "discrete",
) -> tuple[str, dict[str, Any], dict[str, dict[str, torch.Tensor]]]:
    """A published OpenVLA folder (``config.json`` ``d`` without a ``vla_models`` block, tensors ``sd``) ->
    ``(family, config fields, side-file tensors by kind)``.

    The family is ``given["model_type"]``, else the one that detects the folder; it must read
    ``PUBLISHED_LAYOUT``. A family that reads ``OFT_TRAINING_LAYOUT`` takes the side files the settings switch
    on (``use_proprio`` / ``use_film``, default: present; ``action_head="l1"``); their sizes and the backbone's
    are checked against ``given`` (the architecture settings).
    """
    side: dict[str, dict[str, torch.Tensor]] = {}
    cd = config_from_openvla(d, sd, p)
    if (p / "dataset_statistics.json").exists():
        cd["norm_stats"] = read_json(p / "dataset_statistics.json", expect=dict)
    present = {kind: f for kind in SIDE_FILES if (f := side_file(p, kind)) is not None}
    given_family = given.get("model_type")
    fam = get_family(given_family) if given_family is not None else family_for_checkpoint(p)
    if fam is None or PUBLISHED_LAYOUT not in fam.checkpoint_layouts:
        raise ValueError(f"model_type={given_family!r} cannot read the published OpenVLA folder {p}")
    family = fam.name
    facts = {k: f(cd["backbone"]) for k, f in BACKBONE_KEYS.items()}
    facts["n_action_bins"] = cd["n_action_bins"]
    if OFT_TRAINING_LAYOUT in fam.checkpoint_layouts:
        wanted = {
            "proprio_projector": given.get("use_proprio", "proprio_projector" in present),
            "l1_head": action_head == "l1",
            "film": given.get("use_film", "film" in present),
        }
        switch = {
            "proprio_projector": "use_proprio=True",
            "l1_head": "action_head='l1'",
            "film": "use_film=True",
        }
        for kind, on in wanted.items():
            if on and kind not in present:
                raise FileNotFoundError(f"{switch[kind]} needs {p / SIDE_FILES[kind]}, which does not exist")
            if on:
                side[kind] = read_side_file(present[kind])
            elif kind in present:
                logger.info("%s: %s is not used (%s is off)", p, present[kind].name, switch[kind])
        facts.update(_published_oft_facts(p, side))
        cd["use_proprio"] = wanted["proprio_projector"]
        cd["use_film"] = wanted["film"]
    elif present:
        logger.info("%s: OpenVLA-OFT side files %s are not used (model_type=%r)", p, sorted(present), family)
    check_against(p, {k: v for k, v in given.items() if k != "model_type"}, facts)
    for k in ("proprio_dim", "action_dim"):
        if k in facts and k not in given:
            cd[k] = facts[k]
    return family, cd, side
