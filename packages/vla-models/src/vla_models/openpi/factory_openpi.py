"""pi0 / pi0.5 configs from a flat dict, and policies built from a config (random weights or ``model_path``)."""

from __future__ import annotations

from typing import Any

from vla_models.openpi.checkpoint_openpi import load_openpi
from vla_models.openpi.configuration_openpi import OpenPiConfig
from vla_models.openpi.modeling_openpi import OpenPiPolicy

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
