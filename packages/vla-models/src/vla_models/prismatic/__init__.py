"""Prismatic VLM backbone (fused DINOv2-with-registers + SigLIP towers, MLP projector, Llama-2) from transformers
(names imported on first use)."""

from typing import TYPE_CHECKING

from vla_models._lazy import lazy_exports

if TYPE_CHECKING:
    from vla_models.prismatic.configuration_prismatic import (
        LanguageModelConfig,
        PrismaticConfig,
        VisionTowerConfig,
    )
    from vla_models.prismatic.modeling_prismatic import PrismaticBackbone

__all__ = ["LanguageModelConfig", "PrismaticBackbone", "PrismaticConfig", "VisionTowerConfig"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "LanguageModelConfig": "vla_models.prismatic.configuration_prismatic",
        "PrismaticConfig": "vla_models.prismatic.configuration_prismatic",
        "VisionTowerConfig": "vla_models.prismatic.configuration_prismatic",
        "PrismaticBackbone": "vla_models.prismatic.modeling_prismatic",
    },
)
