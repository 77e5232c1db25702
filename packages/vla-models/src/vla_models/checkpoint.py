"""Checkpoint folders: ``load_policy`` (the folder's model family, from the registry, reads it) and the layout
of the Prismatic-based families (OpenVLA, OpenVLA-OFT, ...) on disk (safetensors only, no pickle, no remote code).

A save_pretrained directory holds::

    config.json                          Prismatic/OpenVLA fields (text_config, timm_model_ids, norm_stats, ...)
                                         + a "vla_models" block with our full typed config (its "family")
    model-0000i-of-0000N.safetensors     weights under the original names (vision_backbone.featurizer.blocks...,
    model.safetensors.index.json         projector.fc1..., language_model.model.layers...), LoRA merged
    dataset_statistics.json              norm_stats (when present)
    tokenizer.json, tokenizer_config.json, ...
    manifest.json                        every other file with its size and sha256 (``write_model_manifest``)

A published OpenVLA directory (config.json without "vla_models") is read from its Prismatic fields. This module
imports no family: config and policy classes come from ``vla_models.families``.

Every family reads its weights with :func:`read_state_dict`, which checks them before use: a folder with a
``manifest.json`` has each file's size and sha256 verified (a manifest without checksums is refused), every
tensor must have the dtype ``config.json`` declares (``torch_dtype`` / ``precision``; float32 is allowed beside
a half-precision dtype) and finite values; an error is one line naming the file or the tensor.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from vla_models.dtypes import DTYPES, default_dtype
from vla_models.families import family_for_checkpoint, family_names, get_family
from vla_models.lora import (
    deferred_merged_state_dict,
    is_language_model_target,
    load_adapter_weights,
    merge_adapter_into,
    read_lora_adapter,
)
from vla_models.meta_init import assign_state_dict, weights_from_checkpoint, zero_fill_meta
from vla_models.prismatic.checkpoint_keys import (
    film_state_dict,
    from_openvla_names,
    to_openvla_names,
    unused_tower_keys,
)
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
from vla_models.safetensors_writer import INDEX_NAME, write_weights

logger = logging.getLogger(__name__)

MODEL_MANIFEST = "manifest.json"
_MANIFEST_FORMAT = 1
_HASH_CHUNK = 8 << 20
# what config.json may declare as the weights' dtype (``torch_dtype``, ``precision``, ``vla_models.precision``)
_DECLARED_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
KNOWN_TIMM_IDS = ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"]
_VALUE_HEAD = "value_head."
_OPTIONAL_PREFIXES = (_VALUE_HEAD,)  # may be absent: a fresh critic on a pretrained actor
_OWN_PREFIXES = (
    _VALUE_HEAD,
    "proprio_projector.",
    "action_queries",
    "l1_head.",
)  # stored outside the backbone


def _prismatic_fields(cfg: Any) -> dict[str, Any]:
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


def save_policy(policy: Any, path: str | Path, *, max_shard_bytes: int = 4 * 1024**3) -> None:
    """Write ``policy`` to ``path`` in the OpenVLA layout (see module docstring)."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    cfg = policy.config
    # LoRA (on the language model, whose names are kept) is exported merged, each merged weight computed as it is
    # written; the towers' renaming concatenates their q/k/v (a copy of those alone)
    sd = deferred_merged_state_dict(policy)
    sd = to_openvla_names({k.removeprefix("backbone."): v for k, v in sd.items()}, cfg.backbone.vision_towers)
    write_weights(out, sd, max_shard_bytes=max_shard_bytes)
    d = _prismatic_fields(cfg)
    vla = cfg.to_dict()
    vla["is_lora"] = False  # weights are merged; pass is_lora=True to load_policy to add fresh adapters
    vla["model_path"] = None
    d["vla_models"] = vla
    (out / "config.json").write_text(json.dumps(d, indent=2))
    if cfg.norm_stats:
        (out / "dataset_statistics.json").write_text(json.dumps(cfg.norm_stats, indent=2))
    policy.tokenizer.save_pretrained(str(out))
    write_model_manifest(out)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_model_manifest(folder: str | Path) -> Path:
    """Write ``<folder>/manifest.json``: every other file below ``folder`` with its size and sha256 (call it
    last, after every file of the folder is written). :func:`read_state_dict` verifies it on load."""
    root = Path(folder)
    files = {
        str(f.relative_to(root)): {"size": f.stat().st_size, "sha256": _sha256(f)}
        for f in sorted(root.rglob("*"))
        if f.is_file() and f.relative_to(root) != Path(MODEL_MANIFEST)
    }
    out = root / MODEL_MANIFEST
    out.write_text(json.dumps({"format_version": _MANIFEST_FORMAT, "files": files}, indent=1))
    return out


def verify_model_manifest(folder: str | Path, *, checksums: bool = True) -> dict[str, Any] | None:
    """Check ``folder`` against its ``manifest.json``: every listed file present, inside the folder, at its size
    and (``checksums``) with its sha256. Returns the listed files, or None when the folder has no manifest.

    Raises:
        ValueError: a malformed manifest, one without a sha256 for a file, or a missing, truncated or altered
            file (one line naming it).
    """
    root = Path(folder)
    path = root / MODEL_MANIFEST
    if not path.exists():
        return None
    manifest = read_json(path)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise ValueError(f"{path} has no 'files' object")
    for rel, entry in files.items():
        file = root / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"{path} lists {rel!r}, which is outside the folder")
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            raise ValueError(
                f"{path} has no sha256 for {rel}: the folder cannot be verified (write it with "
                "write_model_manifest, or remove the manifest to load it with the dtype and finiteness checks only)"
            )
        if not file.is_file():
            raise FileNotFoundError(f"{file} is missing (listed in {MODEL_MANIFEST})")
        if file.stat().st_size != entry.get("size"):
            raise ValueError(
                f"{file} is truncated or altered: {file.stat().st_size} bytes, {MODEL_MANIFEST} recorded {entry.get('size')}"
            )
        if checksums:
            try:
                digest = _sha256(file)
            except OSError as exc:
                raise ValueError(f"{file} cannot be read: {exc.strerror or exc}") from None
            if digest != entry["sha256"]:
                raise ValueError(
                    f"{file} is altered: its sha256 differs from the one recorded in {MODEL_MANIFEST}"
                )
    return files


def declared_dtype(config: Any) -> torch.dtype | None:
    """The weights' dtype a ``config.json`` object declares (``torch_dtype``, ``precision`` or
    ``vla_models.precision``), or None."""
    if not isinstance(config, dict):
        return None
    block = config.get("vla_models") if isinstance(config.get("vla_models"), dict) else {}
    for value in (config.get("torch_dtype"), config.get("precision"), block.get("precision")):
        if isinstance(value, str) and value in _DECLARED_DTYPES:
            return _DECLARED_DTYPES[value]
    return None


def _allowed_dtypes(declared: torch.dtype | None) -> set[torch.dtype] | None:
    # half-precision models keep some tensors (norms, heads) in float32
    return None if declared is None else {declared, torch.float32}


def check_tensor(file: Path, name: str, tensor: torch.Tensor, declared: torch.dtype | None) -> None:
    """One line naming the tensor if its dtype is not the declared one (or float32) or it holds NaN/inf."""
    allowed = _allowed_dtypes(declared)
    if allowed is not None and tensor.dtype not in allowed:
        raise ValueError(
            f"{file}: tensor {name} has dtype {str(tensor.dtype).removeprefix('torch.')}, config.json declares "
            f"{str(declared).removeprefix('torch.')}"
        )
    if tensor.is_floating_point() and not _all_finite(tensor):
        bad = int((~torch.isfinite(tensor)).sum())
        raise ValueError(f"{file}: tensor {name} holds {bad} non-finite value(s) (NaN or inf)")


_FINITE_CHUNK = 1 << 22  # elements per isfinite() call: its bool mask stays small beside a large embedding


def _all_finite(tensor: torch.Tensor) -> bool:
    flat = tensor.reshape(-1)
    return all(bool(torch.isfinite(part).all()) for part in flat.split(_FINITE_CHUNK))


def read_json(path: Path) -> Any:
    """A JSON file of a checkpoint folder; a missing or malformed file is one line naming it."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None


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
    params = read_json(f).get("tvf_normalize_params")
    if params is None:
        return None
    if len(params) != n_towers:
        raise ValueError(f"{f}: tvf_normalize_params has {len(params)} entries for {n_towers} vision towers")
    return [(tuple(float(x) for x in p["mean"]), tuple(float(x) for x in p["std"])) for p in params]


def _config_from_prismatic(
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


def _weight_files(p: Path) -> list[Path]:
    if (p / INDEX_NAME).exists():
        index = read_json(p / INDEX_NAME)
        if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
            raise ValueError(f"{p / INDEX_NAME} has no 'weight_map'")
        files = [p / str(name) for name in sorted(set(index["weight_map"].values()))]
    elif (p / "model.safetensors").exists():
        files = [p / "model.safetensors"]
    else:
        raise FileNotFoundError(
            f"{p} has neither {INDEX_NAME} nor model.safetensors (only safetensors are loaded)"
        )
    for f in files:
        if f.parent != p:
            raise ValueError(f"{p / INDEX_NAME} names {f.name!r}, which is outside the folder")
        if not f.is_file():
            raise FileNotFoundError(f"{f} (listed in {INDEX_NAME}) does not exist")
    return files


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint directory (sharded with an index, or a single ``model.safetensors``), checked:
    the folder's manifest verified when it has one (every weights file must be listed), each tensor's dtype
    against the one ``config.json`` declares, and every value finite (see the module docstring)."""
    p = Path(path)
    files = _weight_files(p)
    listed = verify_model_manifest(p)
    if listed is not None:
        for f in files:
            if f.name not in listed:
                raise ValueError(f"{f} is not listed in {p / MODEL_MANIFEST}: the folder cannot be verified")
    declared = declared_dtype(read_json(p / "config.json")) if (p / "config.json").is_file() else None
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            # read into the process's own memory, not mapped from the file: the tensors become the model's
            # weights (meta_init), which must not change or fault when the folder is later overwritten
            tensors = load_file(str(f), backend="pread")
        except Exception as e:  # safetensors raises its own error types for a truncated/corrupt file
            raise ValueError(f"{f} is not a readable safetensors file: {' '.join(str(e).split())}") from None
        for name, tensor in tensors.items():
            check_tensor(f, name, tensor, declared)
        sd.update(tensors)
    return sd


def check_weight_headers(path: str | Path) -> None:
    """What :func:`read_state_dict` checks without reading a tensor's values: the manifest's sizes, that every
    weights file has a readable safetensors header, and each tensor's dtype against ``config.json``.

    Raises:
        FileNotFoundError / ValueError: one line naming the file or the tensor.
    """
    from safetensors import safe_open

    p = Path(path)
    files = _weight_files(p)
    listed = verify_model_manifest(p, checksums=False)
    declared = declared_dtype(read_json(p / "config.json")) if (p / "config.json").is_file() else None
    allowed = _allowed_dtypes(declared)
    for f in files:
        if listed is not None and f.name not in listed:
            raise ValueError(f"{f} is not listed in {p / MODEL_MANIFEST}: the folder cannot be verified")
        try:
            with safe_open(str(f), framework="pt") as handle:
                dtypes = {k: handle.get_slice(k).get_dtype() for k in handle.keys()}  # noqa: SIM118
        except Exception as e:  # a cut or malformed header, an unreadable file
            raise ValueError(f"{f} is not a readable safetensors file: {' '.join(str(e).split())}") from None
        for name, code in dtypes.items():
            dtype = _SAFETENSORS_DTYPES.get(code)
            if allowed is not None and dtype not in allowed:
                raise ValueError(
                    f"{f}: tensor {name} has dtype {str(dtype).removeprefix('torch.') if dtype else code}, "
                    f"config.json declares {str(declared).removeprefix('torch.')}"
                )


_SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


# settings that describe the architecture: a loaded folder fixes them, and a differing user value is an error
ARCHITECTURE_KEYS = (
    "model_type",
    "action_dim",
    "num_action_chunks",
    "n_action_bins",
    "use_proprio",
    "proprio_dim",
    "num_images_in_input",
    "use_film",
    "action_query",
    "implement_version",
    "image_size",
    "patch_size",
    "hidden_size",
)
# keys that describe the backbone, compared against it rather than set
_BACKBONE_KEYS = {
    "image_size": lambda b: b.image_size,
    "patch_size": lambda b: b.vision_towers[0].patch_size,
    "hidden_size": lambda b: b.text.hidden_size,
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


def _saved_defaults(family: str) -> Mapping[str, Any]:
    """What a saved config of ``family`` implies for fields it lacks (none for an unknown family)."""
    return get_family(family).saved_config_defaults if family in family_names() else {}


def _side_file(folder: Path, kind: str) -> Path | None:
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


def _contradiction(path: Path, key: str, value: Any, saved: Any) -> ValueError:
    return ValueError(
        f"{key}={value!r} contradicts the checkpoint at {path}, which has {key}={saved!r}; "
        f"set {key}: {saved!r} or leave it unset"
    )


def _check_against(path: Path, given: dict[str, Any], facts: dict[str, Any]) -> None:
    for key, value in given.items():
        if key in facts and facts[key] is not None and value is not None and value != facts[key]:
            raise _contradiction(path, key, value, facts[key])


def _published_oft_facts(folder: Path, side: dict[str, dict[str, torch.Tensor]]) -> dict[str, Any]:
    """What the side files fix: proprio size (projector input), action size (L1 head output)."""
    facts: dict[str, Any] = {}
    if "proprio_projector" in side:
        w = side["proprio_projector"].get("fc1.weight")
        if w is None:
            raise ValueError(f"{_side_file(folder, 'proprio_projector')} has no fc1.weight")
        facts["proprio_dim"] = int(w.shape[1])
    if "l1_head" in side:
        w = side["l1_head"].get("model.fc2.weight")
        if w is None:
            raise ValueError(f"{_side_file(folder, 'l1_head')} has no model.fc2.weight")
        facts["action_dim"] = int(w.shape[0])
    return facts


def load_policy(path: str | Path, **overrides: Any) -> Any:
    """Load a policy from a local checkpoint folder: the family named ``model_type``, else the first registered
    family whose layouts the folder holds (``vla_models.families``), reads it with ``overrides``.

    Raises:
        FileNotFoundError: no such folder, or one no family reads that lacks ``config.json``.
        ValueError: ``model_type`` names no family, a malformed ``config.json``, or a folder no family reads.
    """
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"checkpoint folder {p} does not exist")
    family = family_for_checkpoint(p, overrides.get("model_type"))
    if family is None:
        raise _unreadable(p)
    return family.load(p, **overrides)


def _unreadable(p: Path) -> Exception:
    """The error for a folder no registered family reads, naming what is wrong with its ``config.json``."""
    d = read_json(p / "config.json")
    if not isinstance(d, dict):
        return ValueError(f"{p / 'config.json'} does not hold a JSON object")
    names = ", ".join(family_names())
    saved = d.get("vla_models")
    if isinstance(saved, dict):
        return ValueError(
            f"unknown model family {saved.get('family')!r} in {p / 'config.json'}; allowed: {names}"
        )
    return ValueError(f"{p} holds no checkpoint layout of a known model family ({names})")


def saved_family(path: Path) -> str | None:
    """The family of a folder written by ``save_pretrained`` (its ``vla_models.family``; configs saved before
    the key existed are OpenVLA ones), or None for any other folder."""
    try:
        d = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or not isinstance(d.get("vla_models"), dict):
        return None
    return str(d["vla_models"].get("family", UNNAMED_SAVED_FAMILY))


def published_prismatic_folder(path: Path) -> bool | None:
    """Whether a folder without a ``vla_models`` block carries OpenVLA-OFT training side files (None: the folder
    has a readable ``vla_models`` block or no readable JSON object in ``config.json``)."""
    try:
        d = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or "vla_models" in d:
        return None
    return any(next(path.glob(pattern), None) is not None for pattern in SIDE_FILES.values())


def load_prismatic(path: str | Path, **overrides: Any) -> Any:
    """Load a policy from a local checkpoint directory: one written by ``save_pretrained``, a published OpenVLA
    folder, or an OpenVLA-OFT training folder (merged model + side files).

    Architecture settings (``ARCHITECTURE_KEYS``: ``model_type``, ``action_dim``, ``num_action_chunks``,
    ``use_proprio``, ``proprio_dim``, ``num_images_in_input``, ``use_film``, ``implement_version``,
    ``image_size``, ``patch_size``, ``hidden_size``, ...) that the folder fixes must agree with it (an error
    names the key, the given value and the checkpoint's); what a published folder cannot say (the OFT layout,
    chunk size, cameras) comes from them. Everything else (LoRA, value head, precision, ``unnorm_key``,
    ``action_head``, ...) overrides the saved config.

    Published folders: towers are sized from their tensors, the DINOv2 normalisation comes from
    ``preprocessor_config.json``, statistics from ``dataset_statistics.json``. ``model_type="openvla_oft"``
    reads OpenVLA-OFT's side files with ``torch.load(weights_only=True)``: ``proprio_projector--*.pt``
    (``use_proprio``; default: present), ``action_head--*.pt`` (``action_head="l1"``) and
    ``vision_backbone--*.pt`` (``use_film``; default: present). A side file whose feature is switched off is
    not used (logged); a feature switched on without its file is an error.

    The value head follows the (overridden) config, whatever the checkpoint holds:

    * checkpoint with a value head, ``add_value_head=False``: the head's weights are dropped (logged at INFO),
      e.g. to evaluate or serve the actor of a PPO checkpoint;
    * checkpoint without a value head, ``add_value_head=True``: a fresh head is initialised (its last layer
      at zero, so initial values are 0; logged at INFO), e.g. to start PPO from a pretrained actor;
    * a checkpoint holding only part of the value head's tensors is refused (ValueError naming them).

    ``lora_path``: a peft adapter folder trained on this checkpoint (``adapter_config.json`` +
    ``adapter_model.safetensors``). With ``is_lora=True`` its language-model adapters stay trainable LoRA (rank
    and alpha from the adapter; a different ``lora_rank`` is an error) and the rest is merged; otherwise all of
    it is merged into the weights.

    Args:
        path: checkpoint directory.
        **overrides: config fields (see above).

    Raises:
        FileNotFoundError: no such directory, no ``config.json``, no weights, or a side file a setting needs.
        ValueError: a malformed file, a setting the checkpoint contradicts, or weights that do not fit the
            config (missing/unexpected tensors or a wrong shape, named).
    """
    from vla_models.tokenizer import load_tokenizer

    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"checkpoint folder {p} does not exist")
    d = read_json(p / "config.json")
    if not isinstance(d, dict):
        raise ValueError(f"{p / 'config.json'} does not hold a JSON object")
    overrides = dict(overrides)
    lora_path = overrides.pop("lora_path", None)
    given = {k: overrides.pop(k) for k in ARCHITECTURE_KEYS if k in overrides}
    sd = read_state_dict(p)
    side: dict[str, dict[str, torch.Tensor]] = {}
    if "vla_models" in d:
        cd = dict(d["vla_models"])
        family = cd.pop("family", UNNAMED_SAVED_FAMILY)
        for key, value in _saved_defaults(family).items():
            cd.setdefault(key, value)
        facts = {k: v for k, v in cd.items() if k in ARCHITECTURE_KEYS}
        facts["model_type"] = family
        backbone = PrismaticConfig(**cd["backbone"]) if isinstance(cd.get("backbone"), dict) else None
        if backbone is not None:
            facts.update({k: f(backbone) for k, f in _BACKBONE_KEYS.items()})
        _check_against(p, given, facts)
    else:
        cd = _config_from_prismatic(d, sd, p)
        if (p / "dataset_statistics.json").exists():
            cd["norm_stats"] = read_json(p / "dataset_statistics.json")
        present = {kind: f for kind in SIDE_FILES if (f := _side_file(p, kind)) is not None}
        given_family = given.get("model_type")
        fam = get_family(given_family) if given_family is not None else family_for_checkpoint(p)
        if fam is None or PUBLISHED_LAYOUT not in fam.checkpoint_layouts:
            raise ValueError(f"model_type={given_family!r} cannot read the published OpenVLA folder {p}")
        family = fam.name
        facts = {k: f(cd["backbone"]) for k, f in _BACKBONE_KEYS.items()}
        facts["n_action_bins"] = cd["n_action_bins"]
        if OFT_TRAINING_LAYOUT in fam.checkpoint_layouts:
            wanted = {
                "proprio_projector": given.get("use_proprio", "proprio_projector" in present),
                "l1_head": overrides.get("action_head", "discrete") == "l1",
                "film": given.get("use_film", "film" in present),
            }
            switch = {
                "proprio_projector": "use_proprio=True",
                "l1_head": "action_head='l1'",
                "film": "use_film=True",
            }
            for kind, on in wanted.items():
                if on and kind not in present:
                    raise FileNotFoundError(
                        f"{switch[kind]} needs {p / SIDE_FILES[kind]}, which does not exist"
                    )
                if on:
                    side[kind] = read_side_file(present[kind])
                elif kind in present:
                    logger.info("%s: %s is not used (%s is off)", p, present[kind].name, switch[kind])
            facts.update(_published_oft_facts(p, side))
            cd["use_proprio"] = wanted["proprio_projector"]
            cd["use_film"] = wanted["film"]
        elif present:
            logger.info(
                "%s: OpenVLA-OFT side files %s are not used (model_type=%r)", p, sorted(present), family
            )
        _check_against(p, {k: v for k, v in given.items() if k != "model_type"}, facts)
        for k in ("proprio_dim", "action_dim"):
            if k in facts and k not in given:
                cd[k] = facts[k]
    if family not in family_names():
        raise ValueError(
            f"unknown model family {family!r} in {p / 'config.json'}; allowed: {list(family_names())}"
        )
    cfg_cls, policy_cls = get_family(family).config_class, get_family(family).policy_class
    cd.update({k: v for k, v in given.items() if k not in _BACKBONE_KEYS and k != "model_type"})
    adapter, kept_lora = None, []
    if lora_path is not None:
        adapter = read_lora_adapter(lora_path)
        if overrides.get("is_lora", cd.get("is_lora", False)):
            # kept as trainable LoRA: the language model's projections (the ones apply_lora adapts) stay
            # adapters; anything else the adapter touches (towers, projector) is merged into the frozen base
            for key, value in (("lora_rank", adapter.rank), ("lora_alpha", adapter.alpha)):
                if overrides.get(key) is not None and float(overrides[key]) != float(value):
                    raise _contradiction(Path(lora_path), key, overrides[key], value)
            overrides["lora_rank"] = adapter.rank
            overrides["lora_alpha"] = (
                int(adapter.alpha) if float(adapter.alpha).is_integer() else adapter.alpha
            )
            kept_lora = [n for n in adapter.modules if is_language_model_target(n)]
        merged = [n for n in adapter.modules if n not in kept_lora]
        if kept_lora and merged:
            logger.info("%s: merged the adapters outside the language model: %s", lora_path, merged[:5])
        merge_adapter_into(sd, adapter, merged)
    cd.update(overrides)
    cd["model_path"] = str(p)
    cd["tokenizer"] = "checkpoint"
    cfg = cfg_cls.from_dict(cd)
    # the backbone is built on meta (the folder holds its weights) and the folder's tensors become its weights
    # (meta_init): one copy of the weights in memory, never an fp32 one
    with default_dtype(DTYPES[cfg.precision]), weights_from_checkpoint():
        policy = policy_cls(cfg, load_tokenizer(p))
    if "film" in side:
        sd.update(film_state_dict(side.pop("film"), cfg.backbone.vision_towers))
    sd = from_openvla_names(sd, cfg.backbone.vision_towers)
    for kind, tensors in side.items():
        sd.update({f"{kind}.{k}": v for k, v in tensors.items()})
    own = {(k if k.startswith(_OWN_PREFIXES) else "backbone." + k): v for k, v in sd.items()}
    del sd  # `own` holds the only references: a tensor cast on assignment is freed at once
    saved_head = sorted(k for k in own if k.startswith(_VALUE_HEAD))
    if saved_head and policy.value_head is None:
        logger.info("%s: dropping the checkpoint's value head (add_value_head=False): %s", p, saved_head)
        own = {k: v for k, v in own.items() if not k.startswith(_VALUE_HEAD)}
    if saved_head and policy.value_head is not None:
        own.update(_reference_value_head(p, own, policy.value_head))
    saved_l1 = [k for k in own if k.startswith("l1_head.")]
    if saved_l1 and policy.l1_head is None:
        logger.info("%s: the L1 action head is not used (action_head='discrete')", p)
        own = {k: v for k, v in own.items() if not k.startswith("l1_head.")}
    _check_shapes(p, policy, own)
    missing, unexpected = assign_state_dict(policy, own)
    if saved_head and any(k.startswith(_VALUE_HEAD) for k in missing):
        # optional as a whole (a fresh critic), never in part: keep the partial head's keys in the error
        optional = unused_tower_keys(cfg.backbone.vision_towers)
    else:
        optional = _OPTIONAL_PREFIXES + unused_tower_keys(cfg.backbone.vision_towers)
        if policy.value_head is not None and not saved_head:
            logger.info("%s has no value head: initialised a fresh one (add_value_head=True)", p)
    missing = [k for k in missing if not k.startswith(optional)]
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {p} does not match the config: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    filled = zero_fill_meta(policy)  # tower parts the forward never reads (unused_tower_keys)
    if filled:
        logger.info(
            "%s: weights the forward does not read, absent from the folder, set to zero: %s", p, filled[:5]
        )
    policy = policy.finalize()
    if kept_lora:
        load_adapter_weights(policy.backbone, adapter, kept_lora, prefix="")
    return policy


def _check_shapes(path: Path, policy: Any, sd: dict[str, torch.Tensor]) -> None:
    """A tensor whose shape differs from the model's is one line naming it (not torch's multi-line error)."""
    own = policy.state_dict()
    for k, v in sd.items():
        if k in own and tuple(own[k].shape) != tuple(v.shape):
            name = k.removeprefix("backbone.")
            raise ValueError(
                f"checkpoint {path}: tensor {name} has shape {list(v.shape)}, the config needs "
                f"{list(own[k].shape)}"
            )


def _reference_value_head(path: Path, sd: dict[str, torch.Tensor], head: Any) -> dict[str, torch.Tensor]:
    """The reference framework's value head has the same ``mlp.*`` layout but no bias on its last layer (the
    same function as a zero bias, which this supplies). Its ``action_level`` head (one value per chunk) is
    refused: this value head gives one value per decision."""
    last = len(head.mlp) - 1
    weight, bias = f"{_VALUE_HEAD}mlp.{last}.weight", f"{_VALUE_HEAD}mlp.{last}.bias"
    if weight not in sd:
        return {}
    if sd[weight].shape[0] != 1:
        raise ValueError(
            f"checkpoint {path}: {weight} gives {sd[weight].shape[0]} values per decision (the reference "
            "framework's value_type=action_level, one per chunk); this value head gives one (chunk_level): "
            "load with add_value_head=False to start a fresh critic"
        )
    if bias not in sd:
        logger.info("%s: value head without a last-layer bias (reference layout): using a zero bias", path)
        return {bias: torch.zeros(1, dtype=sd[weight].dtype)}
    return {}


def check_checkpoint(path: str | Path, **settings: Any) -> None:
    """What ``load_policy(path, **settings)`` would refuse that the folder shows without decoding its tensors: a
    missing folder, ``config.json`` or weights file, a file that is not valid JSON, a folder no known family
    reads (a ``config.json`` of another model family), the manifest's sizes and sha256 (reads every listed file
    once), a safetensors header that is cut or malformed, a tensor dtype other than the one ``config.json``
    declares, and (for a folder written by ``save_pretrained``) an architecture setting the saved config
    contradicts. Meant for validating a run's configuration before anything is built; ``load_policy`` still
    checks everything (tensor shapes and values too).

    Raises:
        FileNotFoundError: no such directory, no ``config.json``, or no weights.
        ValueError: a malformed file, an unknown family or a contradicted setting (naming the key and both
            values), an altered file or a wrong dtype (naming the file or the tensor).
    """
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"checkpoint folder {p} does not exist")
    d = read_json(p / "config.json")
    if not isinstance(d, dict):
        raise ValueError(f"{p / 'config.json'} does not hold a JSON object")
    verify_model_manifest(p)
    check_weight_headers(p)
    if family_for_checkpoint(p) is None:
        raise _unreadable(p)
    if not isinstance(d.get("vla_models"), dict):
        return  # a published folder: its architecture is read from its tensors by load_policy
    cd = dict(d["vla_models"])
    family = cd.pop("family", UNNAMED_SAVED_FAMILY)
    for key, value in _saved_defaults(family).items():
        cd.setdefault(key, value)
    facts = {k: v for k, v in cd.items() if k in ARCHITECTURE_KEYS}
    facts["model_type"] = family
    if isinstance(cd.get("backbone"), dict):  # a Prismatic backbone: its sizes are architecture keys too
        backbone = PrismaticConfig(**cd["backbone"])
        facts.update({k: f(backbone) for k, f in _BACKBONE_KEYS.items()})
    given = {k: v for k, v in settings.items() if k in ARCHITECTURE_KEYS}
    _check_against(p, given, facts)
