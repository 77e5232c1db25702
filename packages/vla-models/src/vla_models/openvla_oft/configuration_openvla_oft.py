"""Typed configuration of OpenVLA-OFT (parallel decoding of action chunks, proprio, several cameras, FiLM)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from vla_models.openvla.configuration_openvla import OpenVLAConfig

ACTION_QUERIES = ("zero", "learned")
IMPLEMENT_VERSIONS = ("official", "rlinf", "causal_prefix")
ACTION_HEADS = ("discrete", "l1")


@dataclass(kw_only=True)
class OpenVLAOFTConfig(OpenVLAConfig):
    """OpenVLA-OFT configuration: everything of :class:`OpenVLAConfig` plus

    Attributes:
        use_proprio: project ``states`` into one extra token after the image tokens.
        proprio_dim: size of ``states``.
        num_images_in_input: 1 = main camera; 2+ adds the first wrist cameras of ``wrist_images``.
        use_film: FiLM-condition the vision features on the mean language embedding.
        action_query: input embedding of the action placeholders: "zero" (OFT) or "learned" (one vector per slot;
            gives a shallow model distinct slots from the first layer; ``causal_prefix`` only).
        implement_version: sequence layout and attention.
            "official": OpenVLA-OFT's ``[BOS][images][proprio][prompt][slots][STOP]``, every position attends to
            every other, slot k is read at the position before it (default for published folders);
            "rlinf": the reference framework's own variant, the same without STOP and without a proprio token;
            "causal_prefix": causal over the prefix, slots attend to each other and are read at themselves
            (the tiny CPU models).
        action_head: "discrete" (256-bin action tokens, sampled for RL) or "l1" (OFT's L1-regression MLP on the
            slot hidden states: deterministic actions for evaluation and SFT; ``predict`` needs mode="greedy").
        constant_dims_deterministic: report the action dimensions whose statistics are constant (a normalised
            dimension with ``q01 == q99``: every bin decodes to the same action) as deterministic, log-prob 0 and
            entropy 0, instead of their tokens' log-probs and entropies. Their tokens never change what the env
            executes, so they then stay out of the PPO ratio, the policy gradient and the entropy. Off by
            default (the reference framework scores every token); no effect without action statistics.
    """

    family: ClassVar[str] = "openvla_oft"
    num_action_chunks: int = 8
    use_proprio: bool = False
    proprio_dim: int = 8
    num_images_in_input: int = 1
    use_film: bool = False
    action_query: str = "zero"
    implement_version: str = "official"
    action_head: str = "discrete"
    constant_dims_deterministic: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.implement_version not in IMPLEMENT_VERSIONS:
            raise ValueError(
                f"implement_version={self.implement_version!r} is not supported; allowed: {IMPLEMENT_VERSIONS}"
            )
        if self.action_head not in ACTION_HEADS:
            raise ValueError(f"action_head={self.action_head!r} is not supported; allowed: {ACTION_HEADS}")
        if self.implement_version != "causal_prefix" and self.action_query != "zero":
            raise ValueError(
                f"action_query={self.action_query!r} is invalid with implement_version="
                f"{self.implement_version!r}: its slots are zero embeddings (use action_query='zero')"
            )
        if self.implement_version == "rlinf" and self.use_proprio:
            raise ValueError(
                "use_proprio=True is invalid with implement_version='rlinf': that layout has no proprio token "
                "(use implement_version='official', or use_proprio=False)"
            )
        if self.action_query not in ACTION_QUERIES:
            raise ValueError(
                f"action_query={self.action_query!r} is not supported; allowed: {ACTION_QUERIES}"
            )
        if not isinstance(self.constant_dims_deterministic, bool):
            raise ValueError(
                f"constant_dims_deterministic must be true or false, got {self.constant_dims_deterministic!r}"
            )
        for name in ("proprio_dim", "num_images_in_input"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")

    @classmethod
    def tiny(
        cls,
        *,
        image_size: int = 64,
        patch_size: int | None = None,
        hidden_size: int = 128,
        vision_stem: str = "vit",
        **overrides: Any,
    ) -> OpenVLAOFTConfig:
        """CPU-sized OFT (about 1M parameters, learned action queries, causal prefix, in-code tokenizer)."""
        overrides.setdefault("implement_version", "causal_prefix")
        overrides.setdefault(
            "action_query", "learned" if overrides["implement_version"] == "causal_prefix" else "zero"
        )
        overrides.setdefault("num_action_chunks", 1)
        return super().tiny(
            image_size=image_size,
            patch_size=patch_size,
            hidden_size=hidden_size,
            vision_stem=vision_stem,
            **overrides,
        )  # type: ignore[return-value]
