"""OpenVLA: discrete action tokens decoded autoregressively (names imported on first use)."""

from typing import TYPE_CHECKING

from vla_models._lazy import lazy_exports

if TYPE_CHECKING:
    from vla_models.openvla.configuration_openvla import OpenVLAConfig
    from vla_models.openvla.modeling_openvla import OpenVLAPolicy
    from vla_models.openvla.processing_openvla import OpenVLAProcessor

__all__ = ["OpenVLAConfig", "OpenVLAPolicy", "OpenVLAProcessor"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "OpenVLAConfig": "vla_models.openvla.configuration_openvla",
        "OpenVLAPolicy": "vla_models.openvla.modeling_openvla",
        "OpenVLAProcessor": "vla_models.openvla.processing_openvla",
    },
)
