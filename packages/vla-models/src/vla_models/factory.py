"""``config_from_dict(d)``, ``build_policy(config)`` and ``load_policy(path)``: the package's entry points, each
a lookup in the family registry (``vla_models.families``)."""

from __future__ import annotations

from typing import Any

from vla_models.checkpoint import load_policy
from vla_models.families import family_of_config, get_family

__all__ = ["build_policy", "config_from_dict", "load_policy"]


def config_from_dict(d: dict[str, Any]) -> Any:
    """Typed config from a flat dict (e.g. an app's ``actor.model`` section).

    Keys: ``model_type`` (a registered family: "openvla", "openvla_oft", "openpi", ...), ``size`` (OpenVLA
    families: "tiny" | "7b", default "7b"; for tiny also ``image_size`` / ``patch_size`` / ``hidden_size`` /
    ``vision_stem`` ("vit" | "keypoints");
    pi0: "tiny" | "pi0_base"), and any config field (``action_dim``, ``use_proprio``, ``is_lora``, ...).
    ``vocab_size`` / ``hidden_size`` of a 7B config are checked, not set.
    """
    d = dict(d)
    return get_family(d.pop("model_type", None)).config_from_dict(d)


def build_policy(config: Any, **overrides: Any) -> Any:
    """Build a policy from a typed config (``overrides``: config fields replaced first).

    With ``config.model_path`` set, the checkpoint there is loaded: the config's RL fields (LoRA, value head,
    precision, ``unnorm_key``) override the checkpoint's, and its architecture fields (action shape, OFT layout,
    proprio, cameras) must agree with the checkpoint (see ``load_policy``). Otherwise random weights are
    initialised and the tokenizer is the in-code tiny one (``tokenizer="tiny"``), so it works fully offline.
    """
    family = family_of_config(config)
    return family.build(config.replace(**overrides) if overrides else config)
