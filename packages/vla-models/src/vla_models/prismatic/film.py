"""OpenVLA-OFT's FiLM checkpoint (``vision_backbone--<step>_checkpoint.pt``) -> plain OpenVLA tower names.

The official training wraps every tower block as ``blocks.<i>.block.<timm block>`` next to the block's FiLM
projections ``blocks.<i>.{scale,shift}``, and with ``target_modules="all-linear"`` LoRA splits every Linear (and
the patch-embedding Conv2d, which that name matching also catches) into ``base_layer`` + ``lora_A`` /
``lora_B``. The effective weight is ``base_layer.weight + (alpha / r) * lora_B @ lora_A`` with the official
``alpha = min(r, 16)`` (stored nowhere). The merged model's safetensors hold the *base* vision weights (the
adapter merge does not reach the wrapped tower), so the towers must come from this file.
"""

from __future__ import annotations

import re

import torch

from vla_models.prismatic.configuration_prismatic import VisionTowerConfig

TOWER_PREFIXES = ("vision_backbone.featurizer.", "vision_backbone.fused_featurizer.")
OFFICIAL_LORA_ALPHA_CAP = 16


def _merged_lora(side: dict[str, torch.Tensor], name: str, base: torch.Tensor) -> torch.Tensor:
    a = side.get(f"{name}.lora_A.default.weight")
    b = side.get(f"{name}.lora_B.default.weight")
    if a is None or b is None:
        return base
    rank = a.shape[0]
    scale = min(rank, OFFICIAL_LORA_ALPHA_CAP) / rank
    delta = (b.float().flatten(1) @ a.float().flatten(1)).view(base.shape)
    return base.float() + scale * delta


def film_checkpoint_to_openvla(
    side: dict[str, torch.Tensor], towers: tuple[VisionTowerConfig, ...]
) -> dict[str, torch.Tensor]:
    """Tower tensors under the published names (LoRA merged, float32 where merged) and the FiLM projections as
    ``film.<tower>.{scale,shift}.<block>.{weight,bias}`` (blocks that never run -- the last -- are dropped).

    Raises:
        ValueError: a tensor outside the two towers, or no FiLM projections at all.
    """
    out: dict[str, torch.Tensor] = {}
    for key, t in side.items():
        if ".lora_A." in key or ".lora_B." in key:
            continue
        tower = next((i for i, p in enumerate(TOWER_PREFIXES) if key.startswith(p)), None)
        if tower is None or tower >= len(towers):
            raise ValueError(f"FiLM checkpoint tensor {key} is outside the vision towers {TOWER_PREFIXES}")
        rest = key[len(TOWER_PREFIXES[tower]) :]
        film = re.fullmatch(r"blocks\.(\d+)\.(scale|shift)\.(weight|bias)", rest)
        if film is not None:
            block = int(film.group(1))
            if block < towers[tower].num_layers - 1:
                out[f"film.{tower}.{film.group(2)}.{block}.{film.group(3)}"] = t
            continue
        rest = re.sub(r"^blocks\.(\d+)\.block\.", r"blocks.\1.", rest)
        if rest.endswith(".base_layer.weight"):
            t = _merged_lora(side, key[: -len(".base_layer.weight")], t)
        rest = rest.replace(".base_layer.", ".")
        out[TOWER_PREFIXES[tower] + rest] = t
    if not any(k.startswith("film.") for k in out):
        raise ValueError("the FiLM checkpoint holds no blocks.<i>.scale / shift projections")
    return out
