"""Typed configuration of the OpenVLA policy (discrete action tokens, autoregressive decoding)."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from vla_models.prismatic.configuration_prismatic import PrismaticConfig

PRECISIONS = ("fp32", "bf16", "fp16")
NORMALIZATION_TYPES = ("bounds_q99", "bounds")
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2")
OPENVLA_PROMPT = "In: What action should the robot take to {instruction}?\nOut:"


@dataclass(kw_only=True)
class OpenVLAConfig:
    """OpenVLA policy configuration (RLinf ``actor.model`` keys where they exist).

    Attributes:
        backbone: Prismatic backbone sizes (``PrismaticConfig.openvla_7b()`` or ``.tiny()``).
        action_dim: action dimensions per step (7 for a single arm, 14 dual-arm, 4 MetaWorld).
        num_action_chunks: steps predicted per decision (OpenVLA: 1; tokens are decoded one after another).
        n_action_bins: action tokens at the tail of the tokenizer vocabulary (256).
        unnorm_key: which dataset statistics un-normalise the actions (``None``: the only one, or identity).
        norm_stats: OpenVLA ``dataset_statistics.json`` content, or None (actions stay in ``[-1, 1]``).
        normalization_type: "bounds_q99" (``[q01, q99] <-> [-1, 1]``, OpenVLA's and OFT's LIBERO default) or
            "bounds" (``[min, max]``).
        is_lora / lora_rank / lora_alpha / lora_dropout: peft LoRA on the language model's linear layers.
        add_value_head: add a critic MLP on the hidden state before the first action token.
        detach_critic_input: stop value-loss gradients at the value head input.
        value_head_hidden_sizes: widths of the critic MLP.
        precision: "fp32", "bf16" or "fp16" parameter dtype.
        attn_implementation: "sdpa" (default), "eager", or "flash_attention_2" (GPU, optional extra).
        model_path: local checkpoint directory (``load_policy`` fills it).
        prompt_template: OpenVLA prompt with ``{instruction}``.
        prompt_suffix_token_ids: ids appended after the prompt (OpenVLA/Llama-2: ``(29871,)``, the empty token).
        tokenizer: "tiny" builds the in-code tokenizer; "checkpoint" loads it from ``model_path``.
        prompt_length: pad every prompt (tokens after BOS) to exactly this many tokens, so ``forward_inputs`` of
            all rollouts have the same width and stack directly (a longer prompt raises). None: pad to the
            longest prompt of the batch (use ``concat_forward_inputs`` to join batches).
    """

    family: ClassVar[str] = "openvla"
    backbone: PrismaticConfig = field(default_factory=PrismaticConfig.openvla_7b)
    action_dim: int = 7
    num_action_chunks: int = 1
    n_action_bins: int = 256
    unnorm_key: str | None = None
    norm_stats: dict[str, Any] | None = None
    normalization_type: str = "bounds_q99"
    is_lora: bool = False
    lora_rank: int = 32
    lora_alpha: int | None = None
    lora_dropout: float = 0.0
    add_value_head: bool = False
    detach_critic_input: bool = False
    value_head_hidden_sizes: tuple[int, ...] = (512, 128)
    precision: str = "bf16"
    attn_implementation: str = "sdpa"
    model_path: str | None = None
    prompt_template: str = OPENVLA_PROMPT
    prompt_suffix_token_ids: tuple[int, ...] = (29871,)
    tokenizer: str = "checkpoint"
    prompt_length: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.backbone, dict):
            self.backbone = PrismaticConfig(**self.backbone)
        for name in ("action_dim", "num_action_chunks", "n_action_bins", "lora_rank"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision={self.precision!r} is not supported; allowed: {PRECISIONS}")
        if self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise ValueError(
                f"attn_implementation={self.attn_implementation!r} is not supported; allowed: {ATTN_IMPLEMENTATIONS}"
            )
        if self.normalization_type not in NORMALIZATION_TYPES:
            raise ValueError(
                f"normalization_type={self.normalization_type!r} is not supported; allowed: {NORMALIZATION_TYPES}"
            )
        if self.tokenizer not in ("tiny", "checkpoint"):
            raise ValueError(
                f"tokenizer={self.tokenizer!r} is not supported; allowed: ('tiny', 'checkpoint')"
            )
        if self.n_action_bins > self.backbone.vocab_size:
            raise ValueError(
                f"n_action_bins {self.n_action_bins} exceeds vocab_size {self.backbone.vocab_size}"
            )
        if self.n_action_bins < 2:
            raise ValueError(f"n_action_bins must be >= 2 (bins span [-1, 1]), got {self.n_action_bins}")
        if self.prompt_length is not None and (
            isinstance(self.prompt_length, bool)
            or not isinstance(self.prompt_length, int)
            or self.prompt_length < 1
        ):
            raise ValueError(f"prompt_length must be None or an int >= 1, got {self.prompt_length!r}")
        if "{instruction}" not in self.prompt_template:
            raise ValueError(f"prompt_template must contain '{{instruction}}', got {self.prompt_template!r}")
        self.value_head_hidden_sizes = tuple(self.value_head_hidden_sizes)
        if any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in self.value_head_hidden_sizes):
            raise ValueError(
                f"value_head_hidden_sizes must be ints >= 1, got {self.value_head_hidden_sizes!r}"
            )
        self.prompt_suffix_token_ids = tuple(self.prompt_suffix_token_ids)

    # RLinf-style flat keys
    @property
    def vocab_size(self) -> int:
        return self.backbone.vocab_size

    @property
    def hidden_size(self) -> int:
        return self.backbone.text.hidden_size

    @property
    def num_action_tokens(self) -> int:
        return self.num_action_chunks * self.action_dim

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["family"] = self.family
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OpenVLAConfig:
        """Build from a plain dict (e.g. the ``vla_models`` block of config.json); unknown keys fail fast.

        ``vocab_size`` / ``hidden_size`` / ``family`` / ``model_type`` are accepted and checked for consistency.
        """
        d = dict(d)
        family = d.pop("family", None) or d.pop("model_type", None)
        if family is not None and family != cls.family:
            raise ValueError(f"config family={family!r} cannot build {cls.__name__} (family {cls.family!r})")
        vocab, hidden = d.pop("vocab_size", None), d.pop("hidden_size", None)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} keys {unknown}; allowed: {sorted(known)}")
        cfg = cls(**d)
        if vocab is not None and vocab != cfg.vocab_size:
            raise ValueError(f"vocab_size={vocab} does not match the backbone's vocab_size {cfg.vocab_size}")
        if hidden is not None and hidden != cfg.hidden_size:
            raise ValueError(
                f"hidden_size={hidden} does not match the backbone's hidden_size {cfg.hidden_size}"
            )
        return cfg

    def replace(self, **changes: Any) -> OpenVLAConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def openvla_7b(cls, **overrides: Any) -> OpenVLAConfig:
        """OpenVLA-7B sizes (7.54B parameters), bf16."""
        return cls(**overrides)

    @classmethod
    def tiny(
        cls,
        *,
        image_size: int = 64,
        patch_size: int | None = None,
        hidden_size: int = 128,
        vision_stem: str = "vit",
        **overrides: Any,
    ) -> OpenVLAConfig:
        """CPU-sized model (about 1M parameters) with the in-code tokenizer; builds fully offline.
        ``vision_stem`` / ``patch_size``: see :meth:`PrismaticConfig.tiny`."""
        defaults: dict[str, Any] = dict(
            backbone=PrismaticConfig.tiny(
                image_size=image_size,
                patch_size=patch_size,
                hidden_size=hidden_size,
                vision_stem=vision_stem,
            ),
            precision="fp32",
            tokenizer="tiny",
            prompt_suffix_token_ids=(),
            value_head_hidden_sizes=(64,),
            lora_rank=8,
            prompt_length=32,
        )
        defaults.update(overrides)
        return cls(**defaults)
