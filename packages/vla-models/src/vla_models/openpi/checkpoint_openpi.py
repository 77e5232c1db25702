"""pi0 / pi0.5 checkpoint folders (safetensors only; a ``.pt`` in the folder, e.g. the reference framework's
``metadata.pt``, is never opened), in any of the layouts of ``vla_models.openpi.checkpoint_keys`` (``openpi``,
``lerobot``, ``transformers_pi0``).

Tensors the layout is known to carry unused are dropped (logged); any other tensor the model lacks, or a tensor the
model needs and the folder lacks, is an error naming them. Norm stats come from ``norm_stats_path``, else
``assets/<asset_id>/norm_stats.json``, ``<asset_id>/norm_stats.json``, the one ``assets/*/norm_stats.json`` or
``norm_stats.json``.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import torch

from vla_models.checkpoint_files import read_json, read_state_dict, write_model_manifest
from vla_models.dtypes import default_dtype
from vla_models.lora import deferred_merged_state_dict, has_lora
from vla_models.meta_init import assign_state_dict, meta_parameters, weights_from_checkpoint
from vla_models.openpi.checkpoint_keys import (
    NOISE_BUFFERS,
    OPTIONAL_HEADS,
    detect_layout,
    facts_from_tensors,
    noise_std_range,
    sizes_from_tensors,
    to_internal,
    to_openpi_names,
    value_head_shape,
)
from vla_models.openpi.configuration_openpi import CONFIG_PRESETS, OpenPiConfig, PaliGemmaExpertSizes
from vla_models.openpi.lerobot_folder import (
    is_lerobot_config,
    lerobot_norm_stats,
    lerobot_settings,
    lerobot_tokenizer_name,
)
from vla_models.openpi.processing_openpi import read_norm_stats, write_norm_stats
from vla_models.safetensors_writer import INDEX_NAME, write_weights

logger = logging.getLogger(__name__)

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")
# folder facts a setting may not contradict
_ARCH_FIELDS = ("pi05", "action_horizon", "model_action_dim")


def is_openpi_folder(path: Path) -> bool:
    """Whether ``path`` holds a pi0 / pi0.5 checkpoint (a saved config naming the family, or openpi tensor names)."""
    cfg = path / "config.json"
    if cfg.is_file():
        try:
            d = read_json(cfg)
        except ValueError:
            return False
        if isinstance(d, dict):
            if isinstance(d.get("vla_models"), dict):
                return d["vla_models"].get("family") == "openpi"
            if d.get("type") in ("pi0", "pi05") or d.get("model_type") == "pi0" or "paligemma_variant" in d:
                return True
    index = path / INDEX_NAME
    if index.is_file():
        try:
            return detect_layout(read_json(index, expect=dict).get("weight_map", {})) is not None
        except ValueError:
            return False
    single = path / "model.safetensors"
    if single.is_file():
        from safetensors import safe_open

        with safe_open(str(single), framework="pt") as f:
            return detect_layout(f.keys()) is not None
    return False


def _published_config(
    folder: Path, d: dict[str, Any], sd: dict[str, torch.Tensor]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Config fields of a folder without our block (openpi / lerobot / transformers config.json): the sizes the
    tensors show, what the tensors and the config.json state; and the settings a lerobot config records."""
    cd: dict[str, Any] = {
        "sizes": sizes_from_tensors(sd),
        "tokenizer": "checkpoint",
        "value_head_activation": "relu",  # the reference framework's pi0 / pi0.5 critic
    }
    recorded: dict[str, Any] = {}
    if is_lerobot_config(d):
        recorded, image_size = lerobot_settings(folder, d)
        if image_size is not None and image_size != cd["sizes"].image_size:
            raise ValueError(
                f"{folder}/config.json: image_resolution={d['image_resolution']!r} does not fit the vision "
                f"tower's {cd['sizes'].image_size} px position embedding"
            )
    else:
        horizon = d.get("action_horizon", d.get("chunk_size", d.get("n_action_steps")))
        if isinstance(horizon, int):
            cd["action_horizon"] = horizon
    cd.update(facts_from_tensors(sd))
    cd.update(recorded)
    return cd, recorded


def _head_settings(
    sd: dict[str, torch.Tensor], merged: dict[str, Any], sizes: PaliGemmaExpertSizes
) -> dict[str, Any]:
    """The critic's and the noise head's settings the folder's tensors fix (for the heads the config keeps)."""
    out: dict[str, Any] = {}
    shape = value_head_shape(sd) if merged.get("add_value_head") else None
    if shape is not None:
        width, hidden = shape
        out["value_head_hidden_sizes"] = hidden
        if sizes.width != sizes.expert_width and width in (sizes.width, sizes.expert_width):
            out["value_after_vlm"] = width == sizes.width
    std = noise_std_range(sd) if merged.get("noise_method") == "flow_noise" else None
    if std is not None:
        out["noise_logvar_range"] = std
    return out


def _same(key: str, given: Any, saved: Any) -> bool:
    if key == "noise_logvar_range":
        return len(given) == 2 and all(math.isclose(float(a), b, rel_tol=1e-5) for a, b in zip(given, saved))
    if isinstance(saved, tuple):
        return tuple(given) == saved
    return given == saved


def find_norm_stats(folder: Path, asset_id: str | None) -> Path | None:
    candidates = []
    if asset_id:
        candidates += [
            folder / "assets" / asset_id / "norm_stats.json",
            folder / asset_id / "norm_stats.json",
        ]
    found = sorted((folder / "assets").glob("**/norm_stats.json")) if (folder / "assets").is_dir() else []
    if len(found) == 1:
        candidates.append(found[0])
    candidates.append(folder / "norm_stats.json")
    return next((c for c in candidates if c.is_file()), None)


def load_openpi(path: str | Path, **overrides: Any) -> Any:
    """Load pi0 / pi0.5 from a folder in any of ``LAYOUTS``.

    ``overrides`` are ``OpenPiConfig`` fields (``config_name`` fills the preset's settings first), plus
    ``norm_stats_path`` and ``model_type`` (must be "openpi"). What the folder fixes (``pi05``, ``action_horizon``,
    ``model_action_dim``, the sizes) may not be contradicted (an error names the key). The value head and the
    flow_noise head follow the config: added fresh when asked for and absent, dropped (logged) when present and
    not asked for.
    """
    from vla_models.families import registered_families
    from vla_models.tokenizer import build_tiny_tokenizer, load_tokenizer

    # the family's policy class, from the registry: the modeling module imports this one for save/load
    policy_class = registered_families()["openpi"].policy_class

    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"checkpoint folder {p} does not exist")
    overrides = dict(overrides)
    model_type = overrides.pop("model_type", "openpi")
    if model_type != "openpi":
        raise ValueError(f"model_type={model_type!r} contradicts the checkpoint at {p}, which holds 'openpi'")
    stats_path = overrides.pop("norm_stats_path", None)
    d = read_json(p / "config.json") if (p / "config.json").exists() else {}
    sd, layout, dropped = to_internal(read_state_dict(p))
    if dropped:
        logger.info("%s (%s layout): unused tensors not loaded: %s", p, layout, dropped)
    recorded: dict[str, Any] = {}
    if isinstance(d.get("vla_models"), dict):
        cd = dict(d["vla_models"])
        cd.pop("family", None)
        cd.setdefault("value_head_activation", "gelu")  # a block that does not name it holds a GELU critic
    else:
        cd, recorded = _published_config(p, d, sd)
    sizes = cd.get("sizes")
    sizes = PaliGemmaExpertSizes(**sizes) if isinstance(sizes, dict) else sizes
    for key in ("image_size", "patch_size"):
        given = overrides.pop(key, None)
        if given is not None and given != getattr(sizes, key):
            raise ValueError(
                f"{key}={given!r} contradicts the checkpoint at {p}, which has {key}={getattr(sizes, key)!r}; "
                f"set {key}: {getattr(sizes, key)!r} or leave it unset"
            )
    facts = {k: cd[k] for k in _ARCH_FIELDS if k in cd}
    facts.update({k: v for k, v in facts_from_tensors(sd).items() if k in _ARCH_FIELDS})
    name = overrides.get("config_name", cd.get("config_name"))
    preset = CONFIG_PRESETS.get(name, {}) if name else {}
    merged = {**cd, **{k: v for k, v in preset.items() if k not in facts}, **overrides}
    for key, saved in facts.items():
        given = overrides.get(key, preset.get(key))
        if given is not None and given != saved:
            raise ValueError(
                f"{key}={given!r} contradicts the checkpoint at {p}, which has {key}={saved!r}; "
                f"set {key}: {saved!r} or leave it unset"
            )
        merged[key] = saved
    for key, saved in recorded.items():
        given = overrides.get(key, preset.get(key))
        if key not in facts and given is not None and given != saved:
            raise ValueError(
                f"{key}={given!r} contradicts the lerobot folder at {p}, which records {key}={saved!r}; "
                f"leave {key} unset to use it"
            )
        merged[key] = saved
    if "noise_method" not in merged:
        merged["noise_method"] = OpenPiConfig.noise_method
    for key, saved in _head_settings(sd, merged, sizes).items():
        given = overrides.get(key)
        if given is not None and not _same(key, given, saved):
            raise ValueError(
                f"{key}={given!r} contradicts the checkpoint at {p}, whose tensors have {key}={list(saved)!r}"
                if isinstance(saved, tuple)
                else f"{key}={given!r} contradicts the checkpoint at {p}, whose tensors have {key}={saved!r}"
            )
        merged[key] = saved
    merged["model_path"] = str(p)
    if stats_path is not None:
        merged["norm_stats"] = read_norm_stats(stats_path)
    elif merged.get("norm_stats") is None:
        found = find_norm_stats(p, merged.get("asset_id"))
        if found is not None:
            merged["norm_stats"] = read_norm_stats(found)
        else:
            merged["norm_stats"] = lerobot_norm_stats(p)
    try:
        cfg = OpenPiConfig.from_dict(merged)
    except TypeError as e:
        raise ValueError(f"{p}: {e}") from None
    if cfg.tokenizer == "tiny":
        tokenizer = build_tiny_tokenizer(vocab_size=cfg.sizes.vocab_size - 1, n_bins=8)
    elif cfg.tokenizer == "checkpoint" and not any((p / f).is_file() for f in _TOKENIZER_FILES):
        named = lerobot_tokenizer_name(p)
        source = f"; its pre-processor names {named!r}, which is not downloaded" if named else ""
        raise FileNotFoundError(
            f"{p} has no tokenizer ({' or '.join(_TOKENIZER_FILES)}){source}: set tokenizer=<a local folder "
            "with tokenizer.json or tokenizer.model> (actor.model.openpi.tokenizer in the app)"
        )
    else:
        tokenizer = load_tokenizer(p if cfg.tokenizer == "checkpoint" else cfg.tokenizer)
    # PaliGemma and the expert are built on meta (the folder holds every weight of theirs), in the dtype layout of
    # `precision`; the folder's tensors then become the weights (meta_init): one copy of them in memory
    with default_dtype(torch.float32), weights_from_checkpoint():
        policy = policy_class(cfg, tokenizer).apply_precision()
    own = policy.state_dict()
    for head in OPTIONAL_HEADS:
        have = [k for k in sd if k.startswith(head)]
        want = [k for k in own if k.startswith(head)]
        if have and not want:
            logger.info("%s: %s tensors dropped (not configured)", p, head.rstrip("."))
            for k in have:
                sd.pop(k)
        elif want and not have:
            logger.info("%s: no %s tensors; a fresh one is initialised", p, head.rstrip("."))
            sd.update({k: own[k] for k in want})
        elif want and head == "noise_head." and not any(k in sd for k in NOISE_BUFFERS):
            sd.update({k: own[k] for k in NOISE_BUFFERS})  # the range comes from the config
        elif want and set(have) != set(want):
            raise ValueError(
                f"{p}: the {head.rstrip('.')} tensors do not match (missing "
                f"{sorted(set(want) - set(have))}, unexpected {sorted(set(have) - set(want))})"
            )
    missing = sorted(set(own) - set(sd))
    unexpected = sorted(set(sd) - set(own))
    if missing or unexpected:
        hint = ""
        if cfg.pi05 and any(k.endswith("layernorm.weight") and "gemma_expert" in k for k in unexpected):
            hint = (
                " (pi0.5 needs adaptive expert norms, '...layernorm.dense.*'; this looks like a pi0 expert)"
            )
        raise ValueError(
            f"{p} ({layout} layout) does not fit the config: missing {_short(missing)}, "
            f"unexpected {_short(unexpected)}{hint}"
        )
    for k, v in sd.items():
        if tuple(v.shape) != tuple(own[k].shape):
            raise ValueError(
                f"{p}: tensor {k} has shape {list(v.shape)}, the config needs {list(own[k].shape)}"
            )
    assign_state_dict(policy, sd)
    unfilled = meta_parameters(policy)
    if unfilled:  # the key check above makes this unreachable; a model holding meta tensors must never leave
        raise ValueError(f"{p}: no tensor for {_short(unfilled)}")
    return policy.finalize()


def _short(names: list[str], n: int = 8) -> str:
    if not names:
        return "[]"
    more = f" and {len(names) - n} more" if len(names) > n else ""
    return "[" + ", ".join(names[:n]) + "]" + more


def save_openpi(policy: Any, path: str | Path, *, max_shard_bytes: int = 4 * 1024**3) -> None:
    """Write ``policy`` in the openpi layout: weights (sharded past ``max_shard_bytes`` with an index), openpi's
    config fields plus a ``"vla_models"`` block, ``assets/<asset_id>/norm_stats.json``, the tokenizer and
    ``manifest.json`` (every file's size and sha256, checked when the folder is loaded)."""
    cfg: OpenPiConfig = policy.config
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    # LoRA is exported merged, each merged weight computed as it is written (one beside the model at a time)
    state = deferred_merged_state_dict(policy) if has_lora(policy) else policy.state_dict()
    write_weights(
        out, to_openpi_names(state), max_shard_bytes=max_shard_bytes, single_file="model.safetensors"
    )
    vla = cfg.to_dict()
    vla["family"] = "openpi"
    vla["is_lora"] = False  # weights are merged; pass is_lora=True to load_policy to add fresh adapters
    vla["model_path"] = None
    vla["norm_stats"] = None
    if cfg.tokenizer != "tiny":
        vla["tokenizer"] = "checkpoint"
        policy.tokenizer.save_pretrained(str(out))
    tiny = cfg.sizes != PaliGemmaExpertSizes.pi0_base()
    d = {
        "action_dim": cfg.model_action_dim,
        "action_horizon": cfg.action_horizon,
        "paligemma_variant": "custom" if tiny else "gemma_2b",
        "action_expert_variant": "custom" if tiny else "gemma_300m",
        "precision": {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[cfg.precision],
        "pi05": cfg.pi05,
        "vla_models": vla,
    }
    (out / "config.json").write_text(json.dumps(d, indent=2))
    if cfg.norm_stats:
        write_norm_stats(out / "assets" / (cfg.asset_id or "default") / "norm_stats.json", cfg.norm_stats)
    write_model_manifest(out)  # last: every file's size and sha256, verified by read_state_dict on loading
