"""Vision-language-action policies (OpenVLA, OpenVLA-OFT, pi0 / pi0.5) with value heads, LoRA and fused Triton kernels.

Entry points: ``build_policy(config)`` and ``load_policy(path)``; configs ``OpenVLAConfig`` /
``OpenVLAOFTConfig`` (``.tiny()`` for CPU, ``.openvla_7b()`` for the real size).
"""

__version__ = "0.1.0"

from vla_models.action_tokenizer import ActionTokenizer
from vla_models.checkpoint import check_checkpoint
from vla_models.factory import build_policy, config_from_dict, load_policy
from vla_models.families import ModelFamily, fsdp_wrap_classes, register_family, registered_families
from vla_models.normalization import BoundsNormalizer, stats_from_bounds
from vla_models.openpi import OpenPiConfig, OpenPiPolicy
from vla_models.openvla import OpenVLAConfig, OpenVLAPolicy
from vla_models.openvla_oft import OpenVLAOFTConfig, OpenVLAOFTPolicy
from vla_models.policy_base import PROMPT_KEYS, concat_forward_inputs, pad_prompts
from vla_models.policy_output import PolicyOutput
from vla_models.prismatic import LanguageModelConfig, PrismaticConfig, VisionTowerConfig
from vla_models.tokenizer import build_tiny_tokenizer, load_tokenizer

__all__ = [
    "PROMPT_KEYS",
    "ActionTokenizer",
    "BoundsNormalizer",
    "LanguageModelConfig",
    "ModelFamily",
    "OpenPiConfig",
    "OpenPiPolicy",
    "OpenVLAConfig",
    "OpenVLAOFTConfig",
    "OpenVLAOFTPolicy",
    "OpenVLAPolicy",
    "PolicyOutput",
    "PrismaticConfig",
    "VisionTowerConfig",
    "__version__",
    "build_policy",
    "build_tiny_tokenizer",
    "check_checkpoint",
    "concat_forward_inputs",
    "config_from_dict",
    "fsdp_wrap_classes",
    "load_policy",
    "load_tokenizer",
    "pad_prompts",
    "register_family",
    "registered_families",
    "stats_from_bounds",
]
