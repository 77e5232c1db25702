"""OpenVLA's processor: the Prismatic prompt / image processor shared with OpenVLA-OFT."""

from vla_models.prismatic.processing_prismatic import OpenVLAProcessor

__all__ = ["OpenVLAProcessor"]
