"""OpenVLA-OFT: parallel decoding of action chunks, proprio token, several cameras, FiLM (names imported on
first use)."""

from typing import TYPE_CHECKING

from vla_models._lazy import lazy_exports

if TYPE_CHECKING:
    from vla_models.openvla_oft.configuration_openvla_oft import OpenVLAOFTConfig
    from vla_models.openvla_oft.modeling_openvla_oft import OpenVLAOFTPolicy
    from vla_models.openvla_oft.processing_openvla_oft import OpenVLAOFTProcessor

__all__ = ["OpenVLAOFTConfig", "OpenVLAOFTPolicy", "OpenVLAOFTProcessor"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "OpenVLAOFTConfig": "vla_models.openvla_oft.configuration_openvla_oft",
        "OpenVLAOFTPolicy": "vla_models.openvla_oft.modeling_openvla_oft",
        "OpenVLAOFTProcessor": "vla_models.openvla_oft.processing_openvla_oft",
    },
)
