"""``build_policy(config)`` and ``load_policy(path)``: the package's entry points."""

from __future__ import annotations

from typing import Any

from vla_models.checkpoint import load_policy
from vla_models.dtypes import DTYPES, default_dtype
from vla_models.families import family_of_config, registered_families
from vla_models.openvla import OpenVLAConfig, OpenVLAPolicy
from vla_models.openvla_oft import OpenVLAOFTConfig, OpenVLAOFTPolicy
from vla_models.policy_base import PrismaticVLAPolicy
from vla_models.tokenizer import build_tiny_tokenizer

__all__ = ["build_policy", "config_from_dict", "load_policy"]

_FAMILIES = {"openvla": OpenVLAConfig, "openvla_oft": OpenVLAOFTConfig}
_TINY_KEYS = ("image_size", "patch_size", "hidden_size")


def config_from_dict(d: dict[str, Any]) -> OpenVLAConfig:
    """Typed config from a flat dict (e.g. an app's ``actor.model`` section).

    Keys: ``model_type`` ("openvla" | "openvla_oft"), ``size`` ("tiny" | "7b", default "7b"), for tiny also
    ``image_size`` / ``patch_size`` / ``hidden_size``, and any config field (``action_dim``, ``use_proprio``,
    ``is_lora``, ...). ``vocab_size`` / ``hidden_size`` of a 7B config are checked, not set.
    """
    d = dict(d)
    model_type = d.pop("model_type", None)
    registered = registered_families()
    if model_type in registered:
        return registered[model_type].config_from_dict(d)
    if model_type not in _FAMILIES:
        raise ValueError(
            f"model_type={model_type!r} is not supported; allowed: {sorted({*_FAMILIES, *registered})}"
        )
    cls = _FAMILIES[model_type]
    size = d.pop("size", "7b")
    if size == "tiny":
        tiny_kw = {k: d.pop(k) for k in _TINY_KEYS if k in d}
        base = cls.tiny(**tiny_kw)
    elif size == "7b":
        base = cls.openvla_7b()
    else:
        raise ValueError(f"size={size!r} is not supported; allowed: ('tiny', '7b')")
    merged = {**base.to_dict(), **d}
    merged["backbone"] = d.get("backbone", base.backbone)
    return cls.from_dict(merged)


def build_policy(config: OpenVLAConfig, **overrides: Any) -> PrismaticVLAPolicy:
    """Build a policy from a typed config.

    With ``config.model_path`` set, the checkpoint there is loaded: the config's RL fields (LoRA, value head,
    precision, ``unnorm_key``) override the checkpoint's, and its architecture fields (action shape, OFT layout,
    proprio, cameras) must agree with the checkpoint (see ``load_policy``). Otherwise random weights are initialised and the
    tokenizer is the in-code tiny one (``tokenizer="tiny"``), so it works fully offline.
    """
    family = family_of_config(config)
    if family is not None:
        return family.build(config.replace(**overrides) if overrides else config)
    if not isinstance(config, OpenVLAConfig):
        raise TypeError(f"config must be an OpenVLAConfig or OpenVLAOFTConfig, got {type(config).__name__}")
    if overrides:
        config = config.replace(**overrides)
    if config.model_path is not None:
        rl_keys = (
            "is_lora",
            "lora_rank",
            "lora_alpha",
            "lora_dropout",
            "add_value_head",
            "detach_critic_input",
            "value_head_hidden_sizes",
            "precision",
            "attn_implementation",
            "unnorm_key",
            "action_dim",
            "num_action_chunks",
            "n_action_bins",
            "normalization_type",
        )
        if isinstance(config, OpenVLAOFTConfig):
            rl_keys += ("use_proprio", "num_images_in_input", "use_film", "implement_version", "action_head")
            rl_keys += ("proprio_dim",) if config.use_proprio else ()
        return load_policy(
            config.model_path, model_type=config.family, **{k: getattr(config, k) for k in rl_keys}
        )
    if config.tokenizer == "tiny":
        tokenizer = build_tiny_tokenizer(vocab_size=config.backbone.vocab_size, n_bins=config.n_action_bins)
    else:
        raise ValueError(
            "tokenizer='checkpoint' needs model_path (a local checkpoint directory); use tokenizer='tiny'"
        )
    if tokenizer.pad_token_id != config.backbone.pad_token_id:
        raise ValueError(f"tiny tokenizer pad id {tokenizer.pad_token_id} != backbone.pad_token_id")
    cls = OpenVLAOFTPolicy if isinstance(config, OpenVLAOFTConfig) else OpenVLAPolicy
    with default_dtype(DTYPES[config.precision]):
        policy = cls(config, tokenizer)
    return policy.finalize()
