"""The checkpoint layout of the Prismatic-based families (OpenVLA, OpenVLA-OFT, ...): ``save_prismatic`` writes it,
``load_prismatic`` reads it and the published OpenVLA / OpenVLA-OFT folders (``vla_models.prismatic.openvla_folder``).

A save_pretrained directory holds::

    config.json                          Prismatic/OpenVLA fields (text_config, timm_model_ids, norm_stats, ...)
                                         + a "vla_models" block with our full typed config (its "family")
    model-0000i-of-0000N.safetensors     weights under the original names (vision_backbone.featurizer.blocks...,
    model.safetensors.index.json         projector.fc1..., language_model.model.layers...), LoRA merged
    dataset_statistics.json              norm_stats (when present)
    tokenizer.json, tokenizer_config.json, ...
    manifest.json                        every other file with its size and sha256 (``write_model_manifest``)

Weights are read with ``vla_models.checkpoint_files.read_state_dict`` (checked before use). Config and policy
classes come from ``vla_models.families``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vla_models.checkpoint import saved_settings
from vla_models.checkpoint_files import read_json, read_state_dict, write_model_manifest
from vla_models.checkpoint_settings import (
    ARCHITECTURE_KEYS,
    architecture_settings,
    check_against,
    contradiction,
)
from vla_models.dtypes import DTYPES, default_dtype
from vla_models.families import family_names, get_family
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
from vla_models.prismatic.configuration_prismatic import PrismaticConfig
from vla_models.prismatic.openvla_folder import (
    BACKBONE_KEYS,
    UNNAMED_SAVED_FAMILY,
    openvla_config_fields,
    read_published_folder,
)
from vla_models.safetensors_writer import write_weights

logger = logging.getLogger(__name__)

_VALUE_HEAD = "value_head."
_OPTIONAL_PREFIXES = (_VALUE_HEAD,)  # may be absent: a fresh critic on a pretrained actor
_OWN_PREFIXES = (
    _VALUE_HEAD,
    "proprio_projector.",
    "action_queries",
    "l1_head.",
)  # stored outside the backbone


def save_prismatic(policy: Any, path: str | Path, *, max_shard_bytes: int = 4 * 1024**3) -> None:
    """Write ``policy`` to ``path`` in the layout of the module docstring."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    cfg = policy.config
    # LoRA (on the language model, whose names are kept) is exported merged, each merged weight computed as it is
    # written; the towers' renaming concatenates their q/k/v (a copy of those alone)
    sd = deferred_merged_state_dict(policy)
    sd = to_openvla_names({k.removeprefix("backbone."): v for k, v in sd.items()}, cfg.backbone.vision_towers)
    write_weights(out, sd, max_shard_bytes=max_shard_bytes)
    d = openvla_config_fields(cfg)
    vla = cfg.to_dict()
    vla["is_lora"] = False  # weights are merged; pass is_lora=True to load_policy to add fresh adapters
    vla["model_path"] = None
    d["vla_models"] = vla
    (out / "config.json").write_text(json.dumps(d, indent=2))
    if cfg.norm_stats:
        (out / "dataset_statistics.json").write_text(json.dumps(cfg.norm_stats, indent=2))
    policy.tokenizer.save_pretrained(str(out))
    write_model_manifest(out)


def saved_architecture(saved: Mapping[str, Any]) -> dict[str, Any]:
    """``ModelFamily.saved_architecture`` of the Prismatic families: the saved config's architecture keys and
    its backbone's sizes (``BACKBONE_KEYS``)."""
    facts = architecture_settings(saved)
    if isinstance(saved.get("backbone"), dict):
        backbone = PrismaticConfig(**saved["backbone"])
        facts.update({k: f(backbone) for k, f in BACKBONE_KEYS.items()})
    return facts


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
    side: dict[str, dict[str, torch.Tensor]] = {}  # OpenVLA-OFT's side files, by kind
    if "vla_models" in d:
        family, cd, facts = saved_settings(d["vla_models"], UNNAMED_SAVED_FAMILY)
        check_against(p, given, facts)
    else:
        family, cd, side = read_published_folder(p, d, sd, given, overrides.get("action_head", "discrete"))
    if family not in family_names():
        raise ValueError(
            f"unknown model family {family!r} in {p / 'config.json'}; allowed: {list(family_names())}"
        )
    cfg_cls, policy_cls = get_family(family).config_class, get_family(family).policy_class
    cd.update({k: v for k, v in given.items() if k not in BACKBONE_KEYS and k != "model_type"})
    adapter, kept_lora = None, []
    if lora_path is not None:
        adapter = read_lora_adapter(lora_path)
        if overrides.get("is_lora", cd.get("is_lora", False)):
            # kept as trainable LoRA: the language model's projections (the ones apply_lora adapts) stay
            # adapters; anything else the adapter touches (towers, projector) is merged into the frozen base
            for key, value in (("lora_rank", adapter.rank), ("lora_alpha", adapter.alpha)):
                if overrides.get(key) is not None and float(overrides[key]) != float(value):
                    raise contradiction(Path(lora_path), key, overrides[key], value)
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
