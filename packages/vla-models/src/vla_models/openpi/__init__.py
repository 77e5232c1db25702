"""pi0 and pi0.5 (openpi): flow-matching VLA policies with RL log-probabilities of the denoising chain (names
imported on first use)."""

from typing import TYPE_CHECKING

from vla_models._lazy import lazy_exports

if TYPE_CHECKING:
    from vla_models.openpi.configuration_openpi import CONFIG_PRESETS, OpenPiConfig, PaliGemmaExpertSizes
    from vla_models.openpi.factory_openpi import build_openpi
    from vla_models.openpi.modeling_openpi import OpenPiPolicy

__all__ = ["CONFIG_PRESETS", "OpenPiConfig", "OpenPiPolicy", "PaliGemmaExpertSizes", "build_openpi"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CONFIG_PRESETS": "vla_models.openpi.configuration_openpi",
        "OpenPiConfig": "vla_models.openpi.configuration_openpi",
        "PaliGemmaExpertSizes": "vla_models.openpi.configuration_openpi",
        "build_openpi": "vla_models.openpi.factory_openpi",
        "OpenPiPolicy": "vla_models.openpi.modeling_openpi",
    },
)
