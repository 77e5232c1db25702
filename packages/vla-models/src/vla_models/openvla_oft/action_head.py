"""OpenVLA-OFT's L1-regression action head (defined with the Prismatic policy machinery that builds it)."""

from vla_models.prismatic.action_head import L1RegressionActionHead, MLPResNet, MLPResNetBlock

__all__ = ["L1RegressionActionHead", "MLPResNet", "MLPResNetBlock"]
