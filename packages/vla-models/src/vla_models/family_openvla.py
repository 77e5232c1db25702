"""The OpenVLA family: a Prismatic-backbone policy that decodes one action (``prismatic_family``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vla_models.families import register_family
from vla_models.prismatic.family_prismatic import prismatic_checks, prismatic_family


def _openvla_checks(s: Mapping[str, Any], prefix: str = "") -> list[str]:
    errors = prismatic_checks(s, prefix)
    chunks = s.get("num_action_chunks", 1)
    if chunks != 1:
        errors.append(
            f"{prefix}num_action_chunks={chunks!r} is invalid: OpenVLA decodes one action "
            "(use model_type=openvla_oft for chunks)"
        )
    return errors


register_family(
    prismatic_family(
        "openvla",
        config="vla_models.openvla.configuration_openvla:OpenVLAConfig",
        policy="vla_models.openvla.modeling_openvla:OpenVLAPolicy",
        published=False,
        check_settings=_openvla_checks,
        unread_settings={"use_proprio": False},  # no proprio token
    )
)
