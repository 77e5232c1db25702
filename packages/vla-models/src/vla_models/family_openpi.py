"""The pi0 / pi0.5 family (openpi): flow-matching policies, their checkpoint layouts (openpi, the reference
framework's lerobot one, transformers' PI0) and their ``actor.model`` settings (the ``openpi`` section).

Light on purpose: model code is imported inside the functions, when a policy is built or loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vla_models.families import ModelFamily, check_at_least, check_one_of, register_family
from vla_models.openpi.configuration_openpi import NOISE_METHODS

#: OpenPiConfig keys accepted in the ``openpi`` section (the reference documents also write ``OpenPI``).
OPENPI_KEYS = (
    "config_name",
    "pi05",
    "action_horizon",
    "model_action_dim",
    "num_steps",
    "max_token_len",
    "discrete_state_input",
    "num_images_in_input",
    "noise_method",
    "noise_level",
    "noise_anneal",
    "noise_params",
    "noise_logvar_range",
    "joint_logprob",
    "ignore_last",
    "train_expert_only",
    "value_after_vlm",
    "value_vlm_mode",
    "detach_critic_input",
    "chunk_critic_input",
    "value_head_hidden_sizes",
    "value_head_activation",
    "state_indices",
    "use_quantile_norm",
    "delta_action_mask",
    "adapt_to_pi",
    "asset_id",
    "norm_stats_path",
    "norm_style",
    "sft_loss_dims",
    "time_embedding_dtype",
    "tokenizer",
    "action_chunk",
    "action_env_dim",
)
SECTIONS = ("openpi", "OpenPI")
#: The reference framework's names of two flat settings inside the ``openpi`` section.
_SECTION_ALIASES = {"action_chunk": "num_action_chunks", "action_env_dim": "action_dim"}


def _config_from_dict(d: dict[str, Any]) -> Any:
    from vla_models.openpi.factory_openpi import openpi_config_from_dict

    return openpi_config_from_dict(d)


def _build(config: Any) -> Any:
    from vla_models.openpi.factory_openpi import build_openpi

    return build_openpi(config)


def _load(path: str | Path, **settings: Any) -> Any:
    from vla_models.openpi.checkpoint_openpi import load_openpi

    return load_openpi(path, **settings)


def _detect(path: Path) -> bool:
    from vla_models.openpi.checkpoint_openpi import is_openpi_folder

    return is_openpi_folder(path)


def _section(s: Mapping[str, Any]) -> dict[str, Any]:
    """The ``openpi`` / ``OpenPI`` sections merged (``action_chunk`` / ``action_env_dim`` are the flat
    ``num_action_chunks`` / ``action_dim``, checked to agree), plus the flat ``num_steps``."""
    merged = {**(s.get("openpi") or {}), **(s.get("OpenPI") or {})}
    for alias in _SECTION_ALIASES:
        merged.pop(alias, None)
    if s.get("num_steps") is not None:
        merged.setdefault("num_steps", s["num_steps"])
    return merged


def _fields(s: Mapping[str, Any]) -> dict[str, Any]:
    """OpenPiConfig fields: the flat keys, then the ``openpi`` section (which wins for
    ``num_images_in_input``), then ``extra``."""
    keys = (
        "action_dim",
        "num_action_chunks",
        "add_value_head",
        "precision",
        "num_images_in_input",
        "is_lora",
        "lora_rank",
    )
    fields: dict[str, Any] = {k: s[k] for k in keys if k in s}
    fields.update(_section(s))
    fields.update(s.get("extra") or {})
    return fields


def _config_from_settings(s: Mapping[str, Any]) -> Any:
    fields = _fields(s)
    stats = fields.pop("norm_stats_path", None)
    if stats is not None:
        from vla_models.openpi.processing_openpi import read_norm_stats

        fields["norm_stats"] = read_norm_stats(stats)
    size = "tiny" if s.get("size") == "tiny" else "pi0_base"
    extra = {"image_size": s["image_size"]} if size == "tiny" and "image_size" in s else {}
    return _config_from_dict({"size": size, **extra, **fields})


def _load_settings(s: Mapping[str, Any]) -> dict[str, Any]:
    fields = _fields(s)
    fields.pop("add_value_head", None)  # load_policy's caller sets it
    return dict(model_type="openpi", image_size=s.get("image_size"), **fields)


def _is_anneal_schedule(value: Any) -> bool:
    numbers = isinstance(value, (list, tuple)) and len(value) == 3
    numbers = numbers and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
    return numbers and value[2] > 0


def _checks(s: Mapping[str, Any], prefix: str = "") -> list[str]:
    errors: list[str] = []
    if s.get("num_steps") is not None:
        errors += check_at_least(f"{prefix}num_steps", s["num_steps"], 1)
    if s.get("is_lora"):
        errors += check_at_least(f"{prefix}lora_rank", s.get("lora_rank", 32), 1)
    for key in SECTIONS:
        section = s.get(key) or {}
        for name, value in section.items():
            if name not in OPENPI_KEYS:
                errors.append(
                    f"{prefix}{key}.{name} is not a pi0 / pi0.5 key; allowed: {', '.join(OPENPI_KEYS)}"
                )
            elif name == "noise_method":
                errors += check_one_of(f"{prefix}{key}.noise_method", value, NOISE_METHODS)
            elif name == "noise_params" and not _is_anneal_schedule(value):
                errors.append(
                    f"{prefix}{key}.noise_params={value!r} is invalid; allowed: [start, end, steps] with steps > 0 "
                    "(noise_level goes linearly from start to end over that many training iterations)"
                )
        for name, flat in _SECTION_ALIASES.items():
            if name in section and section[name] != s.get(flat):
                errors.append(
                    f"{prefix}{key}.{name}={section[name]!r} contradicts {prefix}{flat}={s.get(flat)!r}"
                )
    return errors


register_family(
    ModelFamily(
        name="openpi",
        config="vla_models.openpi.configuration_openpi:OpenPiConfig",
        policy="vla_models.openpi.modeling_openpi:OpenPiPolicy",
        config_from_dict=_config_from_dict,
        build=_build,
        load=_load,
        detect_checkpoint=_detect,
        checkpoint_layouts=("openpi", "lerobot", "transformers_pi0"),
        fsdp_wrap_classes=("ExpertLayer", "GemmaDecoderLayer", "SiglipEncoderLayer"),
        settings_keys=frozenset(
            {
                "size",
                "model_path",
                "precision",
                "action_dim",
                "num_action_chunks",
                "image_size",
                "use_proprio",
                "proprio_dim",
                "num_images_in_input",
                "add_value_head",
                "num_steps",
                "is_lora",
                "lora_rank",
                *SECTIONS,
            }
        ),
        check_settings=_checks,
        config_from_settings=_config_from_settings,
        load_settings=_load_settings,
        fixed_image_size=False,  # frames of any size are resized with padding
        states_without_proprio=False,
    )
)
