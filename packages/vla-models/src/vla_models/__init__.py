"""Vision-language-action policies (OpenVLA, OpenVLA-OFT, pi0 / pi0.5) with value heads, LoRA and fused Triton kernels.

Entry points: ``build_policy(config)`` and ``load_policy(path)``; configs ``OpenVLAConfig`` /
``OpenVLAOFTConfig`` / ``OpenPiConfig`` (``.tiny()`` for CPU). Model families are registered
(``get_family``, ``families``, ``register_family``). Importing the package imports no model code: the names
below are imported on first use.
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING

from vla_models._lazy import lazy_exports
from vla_models.families import (
    ModelFamily,
    families,
    family_names,
    fsdp_wrap_classes,
    get_family,
    register_family,
    registered_families,
    unregister_family,
)
from vla_models.policy_protocol import Policy as Policy  # a Protocol: imports no model code

if TYPE_CHECKING:
    from vla_models.action_tokenizer import ActionTokenizer
    from vla_models.checkpoint import check_checkpoint
    from vla_models.cpu_products import cpu_float32_products
    from vla_models.factory import build_policy, config_from_dict, load_policy
    from vla_models.forward_inputs import PROMPT_KEYS, concat_forward_inputs, pad_prompts
    from vla_models.normalization import BoundsNormalizer, dataset_statistics, stats_from_bounds
    from vla_models.observations import check_observation
    from vla_models.openpi import OpenPiConfig, OpenPiPolicy
    from vla_models.openvla import OpenVLAConfig, OpenVLAPolicy
    from vla_models.openvla_oft import OpenVLAOFTConfig, OpenVLAOFTPolicy
    from vla_models.policy_output import PolicyOutput
    from vla_models.prismatic import LanguageModelConfig, PrismaticConfig, VisionTowerConfig
    from vla_models.prismatic.family_prismatic import prismatic_family
    from vla_models.rl_parameters import rl_parameters
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
    "Policy",
    "PolicyOutput",
    "PrismaticConfig",
    "VisionTowerConfig",
    "__version__",
    "build_policy",
    "build_tiny_tokenizer",
    "check_checkpoint",
    "check_observation",
    "concat_forward_inputs",
    "config_from_dict",
    "cpu_float32_products",
    "dataset_statistics",
    "families",
    "family_names",
    "fsdp_wrap_classes",
    "get_family",
    "load_policy",
    "load_tokenizer",
    "pad_prompts",
    "prismatic_family",
    "register_family",
    "registered_families",
    "rl_parameters",
    "stats_from_bounds",
    "unregister_family",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ActionTokenizer": "vla_models.action_tokenizer",
        "BoundsNormalizer": "vla_models.normalization",
        "stats_from_bounds": "vla_models.normalization",
        "dataset_statistics": "vla_models.normalization",
        "check_checkpoint": "vla_models.checkpoint",
        "check_observation": "vla_models.observations",
        "cpu_float32_products": "vla_models.cpu_products",
        "build_policy": "vla_models.factory",
        "config_from_dict": "vla_models.factory",
        "load_policy": "vla_models.factory",
        "prismatic_family": "vla_models.prismatic.family_prismatic",
        "OpenPiConfig": "vla_models.openpi.configuration_openpi",
        "OpenPiPolicy": "vla_models.openpi.modeling_openpi",
        "OpenVLAConfig": "vla_models.openvla.configuration_openvla",
        "OpenVLAPolicy": "vla_models.openvla.modeling_openvla",
        "OpenVLAOFTConfig": "vla_models.openvla_oft.configuration_openvla_oft",
        "OpenVLAOFTPolicy": "vla_models.openvla_oft.modeling_openvla_oft",
        "concat_forward_inputs": "vla_models.forward_inputs",
        "pad_prompts": "vla_models.forward_inputs",
        "PROMPT_KEYS": "vla_models.forward_inputs",
        "PolicyOutput": "vla_models.policy_output",
        "LanguageModelConfig": "vla_models.prismatic.configuration_prismatic",
        "PrismaticConfig": "vla_models.prismatic.configuration_prismatic",
        "VisionTowerConfig": "vla_models.prismatic.configuration_prismatic",
        "rl_parameters": "vla_models.rl_parameters",
        "build_tiny_tokenizer": "vla_models.tokenizer",
        "load_tokenizer": "vla_models.tokenizer",
    },
)
