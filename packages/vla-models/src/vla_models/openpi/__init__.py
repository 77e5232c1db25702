"""pi0 and pi0.5 (openpi): flow-matching VLA policies with RL log-probabilities of the denoising chain."""

from __future__ import annotations

from typing import Any

from vla_models.families import ModelFamily, register_family
from vla_models.openpi.checkpoint_openpi import LAYOUTS, is_openpi_folder, load_openpi
from vla_models.openpi.configuration_openpi import CONFIG_PRESETS, OpenPiConfig, PaliGemmaExpertSizes
from vla_models.openpi.modeling_openpi import OpenPiPolicy

__all__ = ["CONFIG_PRESETS", "OpenPiConfig", "OpenPiPolicy", "PaliGemmaExpertSizes", "build_openpi"]

#: Keys of a flat (app) dict that size a tiny model.
_TINY_KEYS = ("image_size", "patch_size")


def openpi_config_from_dict(d: dict[str, Any]) -> OpenPiConfig:
    """``{"model_type": "openpi", "size": "tiny" | "pi0_base", <OpenPiConfig fields>, "openpi": {...}}`` -> config.

    The nested ``openpi`` (or ``OpenPI``) section holds the reference framework's ``actor.model.openpi`` keys;
    flat keys and nested keys are merged (a key given in both with different values is an error).
    """
    d = dict(d)
    d.pop("model_type", None)
    nested: dict[str, Any] = {}
    for key in ("openpi", "OpenPI"):
        nested.update(d.pop(key, None) or {})
    for k, v in nested.items():
        if k in d and d[k] != v:
            raise ValueError(f"{k} is given twice with different values: {d[k]!r} and openpi.{k}={v!r}")
        d[k] = v
    size = d.pop("size", "pi0_base")
    if size == "tiny":
        tiny_kw = {k: d.pop(k) for k in _TINY_KEYS if k in d}
        return OpenPiConfig.tiny(**tiny_kw, **d)
    if size == "pi0_base":
        return OpenPiConfig.pi0_base(**d)
    raise ValueError(f"size={size!r} is not supported for model_type='openpi'; allowed: ('tiny', 'pi0_base')")


def build_openpi(config: OpenPiConfig) -> OpenPiPolicy:
    """Random weights (or ``config.model_path`` loaded with the config's settings). A real-size config builds
    inside ``torch.device("meta")`` without allocating memory."""
    import torch

    from vla_models.dtypes import DTYPES, default_dtype
    from vla_models.tokenizer import build_tiny_tokenizer, load_tokenizer

    if config.model_path is not None:
        fields = {k: v for k, v in config.to_dict().items() if k not in ("model_path", "sizes")}
        return load_openpi(config.model_path, **fields)
    if config.tokenizer == "tiny":
        tokenizer = build_tiny_tokenizer(vocab_size=config.sizes.vocab_size - 1, n_bins=8)
    elif config.tokenizer == "checkpoint":
        raise ValueError(
            "tokenizer='checkpoint' needs model_path (a local checkpoint folder); use tokenizer='tiny'"
        )
    else:
        tokenizer = load_tokenizer(config.tokenizer)
    with default_dtype(DTYPES[config.precision]):
        policy = OpenPiPolicy(config, tokenizer)
    if torch.empty(0).device.type == "meta":
        return policy
    return policy.finalize()


register_family(
    ModelFamily(
        name="openpi",
        config_class=OpenPiConfig,
        policy_class=OpenPiPolicy,
        config_from_dict=openpi_config_from_dict,
        build=build_openpi,
        load=load_openpi,
        detect_checkpoint=is_openpi_folder,
        checkpoint_layouts=LAYOUTS,
        fsdp_wrap_classes=("ExpertLayer", "GemmaDecoderLayer", "SiglipEncoderLayer"),
    )
)
