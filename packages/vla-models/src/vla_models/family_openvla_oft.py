"""The OpenVLA-OFT family: OpenVLA's backbone and checkpoint layouts, plus OpenVLA-OFT's training folders
(merged model and side files)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vla_models.families import check_one_of, register_family
from vla_models.openvla_oft.configuration_openvla_oft import ACTION_HEADS, IMPLEMENT_VERSIONS
from vla_models.prismatic.family_prismatic import (
    PRISMATIC_LAYOUTS,
    PRISMATIC_SETTINGS,
    build_prismatic,
    prismatic_checks,
    prismatic_family,
)

#: Config fields only OpenVLA-OFT has.
OFT_SETTINGS = frozenset(
    {"use_proprio", "num_images_in_input", "use_film", "implement_version", "action_head"}
)


def _oft_fields(s: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenVLA-OFT settings (``proprio_dim`` only where a proprio input exists, ``implement_version`` only
    when set: null means the checkpoint's own, or causal_prefix for a tiny model)."""
    defaults = dict(use_proprio=False, num_images_in_input=1, use_film=False, action_head="discrete")
    out = {k: s.get(k, v) for k, v in defaults.items()}
    if out["use_proprio"]:
        out["proprio_dim"] = s["proprio_dim"]
    if s.get("implement_version") is not None:
        out["implement_version"] = s["implement_version"]
    return out


def _tiny_fields(s: Mapping[str, Any]) -> dict[str, Any]:
    out = _oft_fields(s)
    if "proprio_dim" in s:
        out.setdefault("proprio_dim", s["proprio_dim"])
    return out


def _checks(s: Mapping[str, Any], prefix: str = "") -> list[str]:
    errors = prismatic_checks(s, prefix)
    errors += check_one_of(f"{prefix}action_head", s.get("action_head", "discrete"), ACTION_HEADS)
    if s.get("implement_version") is not None:
        errors += check_one_of(f"{prefix}implement_version", s["implement_version"], IMPLEMENT_VERSIONS)
    if s.get("implement_version") == "rlinf" and s.get("use_proprio"):
        errors.append(
            f"{prefix}use_proprio=True is invalid with implement_version='rlinf' (that layout has no proprio token; use "
            "implement_version=official or use_proprio=false)"
        )
    return errors


def _build(config: Any) -> Any:
    keys = (
        "use_proprio",
        "num_images_in_input",
        "use_film",
        "implement_version",
        "action_head",
        "constant_dims_deterministic",
    )
    return build_prismatic(config, extra_load_keys=keys + (("proprio_dim",) if config.use_proprio else ()))


register_family(
    prismatic_family(
        "openvla_oft",
        config="vla_models.openvla_oft.configuration_openvla_oft:OpenVLAOFTConfig",
        policy="vla_models.openvla_oft.modeling_openvla_oft:OpenVLAOFTPolicy",
        published=True,
        layouts=(*PRISMATIC_LAYOUTS, "openvla_oft_training"),
        settings_keys=PRISMATIC_SETTINGS | OFT_SETTINGS,
        check_settings=_checks,
        family_fields=_oft_fields,
        tiny_fields=_tiny_fields,
        build=_build,
        # folders saved before configs named their layout hold the causal-prefix one
        saved_config_defaults={"implement_version": "causal_prefix"},
        reads_robot_platform=True,
    )
)
