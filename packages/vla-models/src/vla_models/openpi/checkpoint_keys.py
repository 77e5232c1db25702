"""Tensor names of the pi0 / pi0.5 checkpoint layouts, and what a folder's tensors say about the model.

Layouts (detected from the tensor names):

* ``openpi``: openpi's ``PI0Pytorch`` names (``paligemma_with_expert.*``, ``action_in_proj``, ...), as openpi's
  converter and the reference framework's released checkpoints write them, and as ``save_pretrained`` writes;
  SigLIP under ``vision_tower.vision_model.``, the tied embedding as ``paligemma.lm_head.weight`` only, and an
  unused ``gemma_expert.lm_head.weight``.
* ``lerobot``: the same names behind ``model.``.
* ``transformers_pi0``: transformers' ``PI0ForConditionalGeneration`` (``model.vlm.*``, ``model.dit.*``,
  ``embed_action_time.*``, ``action_out_proj``), whose dit carries an unused token embedding.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch

from vla_models.openpi.configuration_openpi import PaliGemmaExpertSizes

LAYOUTS = ("openpi", "lerobot", "transformers_pi0")
_PG = "paligemma_with_expert.paligemma."
_EMBED = _PG + "model.language_model.embed_tokens.weight"
_LM_HEAD = _PG + "lm_head.weight"
_VISION = _PG + "model.vision_tower."
_UNUSED = (
    "paligemma_with_expert.gemma_expert.lm_head.weight",
    "paligemma_with_expert.gemma_expert.model.embed_tokens.weight",
)
OPTIONAL_HEADS = ("value_head.", "noise_head.")
# the flow_noise head as an ``nn.Sequential`` (``noise_head.mlp.<0|2|4>.*``) -> the reference framework's names
_SEQUENTIAL_NOISE_HEAD = re.compile(r"^noise_head\.mlp\.(\d+)\.")
NOISE_BUFFERS = ("noise_head.logvar_min", "noise_head.logvar_max")


def detect_layout(keys: Any) -> str | None:
    keys = list(keys)
    if any(k.startswith(("model.vlm.", "model.dit.", "embed_action_time.")) for k in keys):
        return "transformers_pi0"
    if any(k.startswith("model.paligemma_with_expert.") for k in keys):
        return "lerobot"
    if any(k.startswith("paligemma_with_expert.") for k in keys):
        return "openpi"
    return None


def to_internal(sd: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], str, list[str]]:
    """A folder's tensors -> this package's names; returns (tensors, layout, dropped unused names)."""
    layout = detect_layout(sd)
    if layout is None:
        raise ValueError(
            "no pi0 tensors found (expected paligemma_with_expert.*, model.paligemma_with_expert.* "
            "or transformers' model.vlm.* / model.dit.*)"
        )
    out: dict[str, torch.Tensor] = {}
    dropped: list[str] = []
    for k, v in sd.items():
        name = k
        if layout == "lerobot":
            name = name.removeprefix("model.")
        elif layout == "transformers_pi0":
            if name == "model.dit.embed_tokens.weight":
                dropped.append(k)
                continue
            if name.startswith("model.vlm."):
                name = _PG + "model." + name.removeprefix("model.vlm.")
            elif name.startswith("model.dit."):
                name = "paligemma_with_expert.gemma_expert.model." + name.removeprefix("model.dit.")
            elif name.startswith("embed_action_time."):
                name = name.removeprefix("embed_action_time.")
        if name in _UNUSED:
            dropped.append(k)
            continue
        name = name.replace(".vision_tower.vision_model.", ".vision_tower.")
        m = _SEQUENTIAL_NOISE_HEAD.match(name)
        if m:
            name = f"noise_head.mlp_logvar.moduleList.{int(m.group(1)) // 2}.linear_1." + name[m.end() :]
        if name == _LM_HEAD:
            if _EMBED in out or any(x.endswith("language_model.embed_tokens.weight") for x in sd):
                dropped.append(k)
                continue
            name = _EMBED
        out[name] = v
    return out, layout, dropped


def to_openpi_names(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This package's names -> openpi's (SigLIP's ``vision_model.`` infix, the embedding as ``lm_head``)."""
    out = {}
    for k, v in sd.items():
        if k == _EMBED:
            out[_LM_HEAD] = v
        elif k.startswith(_VISION):
            out[_VISION + "vision_model." + k.removeprefix(_VISION)] = v
        else:
            out[k] = v
    return out


def to_transformers_pi0_names(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This package's names -> transformers' ``PI0ForConditionalGeneration`` (pi0 only)."""
    out = {}
    for k, v in sd.items():
        if k.startswith(_PG + "model."):
            out["model.vlm." + k.removeprefix(_PG + "model.")] = v
        elif k.startswith("paligemma_with_expert.gemma_expert.model."):
            out["model.dit." + k.removeprefix("paligemma_with_expert.gemma_expert.model.")] = v
        elif k.split(".")[0] in ("state_proj", "action_in_proj", "action_time_mlp_in", "action_time_mlp_out"):
            out["embed_action_time." + k] = v
        elif k.startswith(OPTIONAL_HEADS):
            continue
        else:
            out[k] = v
    return out


def facts_from_tensors(sd: dict[str, torch.Tensor]) -> dict[str, Any]:
    facts: dict[str, Any] = {"pi05": any(k.startswith("time_mlp_in.") for k in sd)}
    if "action_in_proj.weight" in sd:
        facts["model_action_dim"] = int(sd["action_in_proj.weight"].shape[1])
    return facts


_PG_MODEL = _PG + "model."
_EXPERT_MODEL = "paligemma_with_expert.gemma_expert.model."
#: SigLIP so400m's heads (openpi and lerobot fix PaliGemma's vision tower; its head count is not in the shapes)
SIGLIP_HEADS = 16


def _depth(sd: dict[str, torch.Tensor], prefix: str) -> int:
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    return len({m.group(1) for k in sd if (m := pattern.match(k))})


def sizes_from_tensors(sd: dict[str, torch.Tensor]) -> PaliGemmaExpertSizes:
    """The model sizes a folder's tensors (in this package's names) show.

    Every openpi Gemma variant has one key/value head, so the head size is the key projection's width and the
    head count the query projection's over it; SigLIP's head count is so400m's 16.
    """

    def shape(name: str) -> tuple[int, ...]:
        if name not in sd:
            raise ValueError(f"the checkpoint lacks {name}, which sizes the model")
        return tuple(sd[name].shape)

    lm, ex, vt = _PG_MODEL + "language_model.", _EXPERT_MODEL, _VISION
    q, k = shape(lm + "layers.0.self_attn.q_proj.weight"), shape(lm + "layers.0.self_attn.k_proj.weight")
    eq = shape(ex + "layers.0.self_attn.q_proj.weight")
    patch = shape(vt + "embeddings.patch_embedding.weight")
    n_pos = shape(vt + "embeddings.position_embedding.weight")[0]
    side = math.isqrt(n_pos)
    vision_width = patch[0]
    return PaliGemmaExpertSizes(
        image_size=side * patch[-1],
        patch_size=patch[-1],
        vision_width=vision_width,
        vision_depth=_depth(sd, vt + "encoder.layers."),
        vision_heads=SIGLIP_HEADS if vision_width % SIGLIP_HEADS == 0 else 1,
        vision_mlp=shape(vt + "encoder.layers.0.mlp.fc1.weight")[0],
        width=q[1],
        depth=_depth(sd, lm + "layers."),
        mlp=shape(lm + "layers.0.mlp.gate_proj.weight")[0],
        num_heads=q[0] // k[0],
        num_kv_heads=1,
        head_dim=k[0],
        vocab_size=shape(_EMBED)[0],
        expert_width=eq[1],
        expert_mlp=shape(ex + "layers.0.mlp.gate_proj.weight")[0],
    )


def value_head_shape(sd: dict[str, torch.Tensor]) -> tuple[int, tuple[int, ...]] | None:
    """``(input width, hidden sizes)`` of the ``value_head.mlp.<i>`` linears in ``sd``, or None without one."""
    linears = sorted(int(k.split(".")[2]) for k in sd if re.fullmatch(r"value_head\.mlp\.\d+\.weight", k))
    if not linears:
        return None
    shapes = [tuple(sd[f"value_head.mlp.{i}.weight"].shape) for i in linears]
    return shapes[0][1], tuple(out for out, _ in shapes[:-1])


def noise_std_range(sd: dict[str, torch.Tensor]) -> tuple[float, float] | None:
    """flow_noise's ``[min_std, max_std]`` from the noise head's ``logvar_min`` / ``logvar_max``, or None."""
    if not all(k in sd for k in NOISE_BUFFERS):
        return None
    lo, hi = (float(sd[k].float().reshape(-1)[0]) for k in NOISE_BUFFERS)
    return math.exp(0.5 * lo), math.exp(0.5 * hi)
