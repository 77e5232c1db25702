"""`actor`: the trained policy (`actor.model`), its optimizer (`actor.optim`), FSDP settings (`actor.fsdp_config`)
and batch sizes."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from train_embodied.config.value_checks import at_least, one_of

PRECISIONS = ("fp32", "bf16", "fp16")
MODEL_SIZES = ("tiny", "full")
LR_DECAY_STYLES = ("constant", "linear", "cosine")
FSDP_STRATEGIES = ("fsdp", "fsdp2", "none")
SHARDING_STRATEGIES = ("full_shard", "shard_grad_op", "hybrid_shard", "no_shard")
#: `actor.fsdp_config.mixed_precision` keys (the reference's FSDP MixedPrecision fields)
MIXED_PRECISION_KEYS = ("param_dtype", "reduce_dtype", "buffer_dtype")


@dataclass
class OptimSection:
    """`actor.optim`: AdamW settings; `value_lr` is the value head's learning rate.

    `lr_decay_style` (constant, linear, cosine) decays every learning rate over the run's training iterations
    (`runner.max_epochs`, capped by `runner.max_steps`) from its value towards `min_lr` x its value / `lr` (so the
    value head's lr keeps its ratio to the policy's); the warmup (`lr_warmup_steps`) scales on top of it.
    """

    lr: float = 1e-4
    value_lr: float = 1e-4
    weight_decay: float = 0.0
    clip_grad: float = 1.0
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    adam_eps: float = 1e-8
    lr_warmup_steps: int = 0
    lr_decay_style: str = "constant"
    min_lr: float = 0.0

    def check(self, prefix: str) -> list[str]:
        errors = at_least(f"{prefix}.lr_warmup_steps", self.lr_warmup_steps, 0)
        errors += one_of(f"{prefix}.lr_decay_style", self.lr_decay_style, LR_DECAY_STYLES)
        errors += at_least(f"{prefix}.min_lr", self.min_lr, 0.0)
        if self.min_lr > self.lr > 0:  # a non-positive lr is reported below, once
            errors.append(f"{prefix}.min_lr={self.min_lr!r} is invalid: must be <= {prefix}.lr={self.lr!r}")
        for name in ("lr", "value_lr", "adam_eps"):
            if getattr(self, name) <= 0:
                errors.append(f"{prefix}.{name}={getattr(self, name)!r} is invalid: must be > 0")
        errors += at_least(f"{prefix}.weight_decay", self.weight_decay, 0.0)
        errors += at_least(f"{prefix}.clip_grad", self.clip_grad, 0.0)
        if len(self.adam_betas) != 2 or not all(0.0 <= b < 1.0 for b in self.adam_betas):
            errors.append(f"{prefix}.adam_betas={self.adam_betas!r} is invalid: two numbers in [0, 1)")
        return errors


@dataclass
class FSDPSection:
    """`actor.fsdp_config`: FSDP2 sharding of an actor placed on several processes. With one process the policy
    is not sharded (`strategy` and `sharding_strategy` have nothing to shard) and the other settings apply to the
    plain module (`train_embodied.unsharded`)."""

    strategy: str = "none"
    sharding_strategy: str = "no_shard"
    gradient_checkpointing: bool = False
    cpu_offload: bool = False
    mixed_precision: dict[str, Any] = field(default_factory=dict)

    def check(self, prefix: str) -> list[str]:
        errors = one_of(f"{prefix}.strategy", self.strategy, FSDP_STRATEGIES)
        errors += one_of(f"{prefix}.sharding_strategy", self.sharding_strategy, SHARDING_STRATEGIES)
        for key, value in self.mixed_precision.items():
            if key not in MIXED_PRECISION_KEYS:
                errors.append(
                    f"{prefix}.mixed_precision.{key} is not a known key: allowed {', '.join(MIXED_PRECISION_KEYS)}"
                )
            elif key == "buffer_dtype" and value not in (None, "fp32"):
                errors.append(
                    f"{prefix}.mixed_precision.buffer_dtype={value!r} is not supported: FSDP2 (and autocast on one "
                    "process) does not cast buffers; allowed: fp32 or null"
                )
            elif value is not None:
                errors += one_of(f"{prefix}.mixed_precision.{key}", value, PRECISIONS)
        return errors


@dataclass
class ModelSection:
    """`actor.model`: which policy, where its weights are, and its action interface.

    With `model_path` set, the architecture keys (model_type, action_dim, num_action_chunks, n_action_bins,
    image_size, use_proprio, proprio_dim, num_images_in_input, use_film, implement_version, and extra
    patch_size / hidden_size) must agree with the checkpoint: vla_models names any key it contradicts.
    `implement_version` null means the checkpoint's own (published folders: official), or causal_prefix for a
    tiny model built from scratch. `lora_path`: a peft adapter folder applied on top of `model_path`, kept as
    trainable LoRA when `is_lora` is true, merged into the weights otherwise.
    """

    model_type: str = "openvla_oft"
    size: str = "tiny"
    model_path: str | None = None
    lora_path: str | None = None
    precision: str = "fp32"
    action_dim: int = 4
    num_action_chunks: int = 1
    n_action_bins: int = 256
    image_size: int = 64
    use_proprio: bool = True
    proprio_dim: int = 4
    num_images_in_input: int = 1
    use_film: bool = False
    implement_version: str | None = None
    action_head: str = "discrete"
    add_value_head: bool = True
    is_lora: bool = False
    lora_rank: int = 32
    unnorm_key: str | None = None
    num_steps: int | None = None
    openpi: dict[str, Any] = field(default_factory=dict)
    OpenPI: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def settings(self) -> dict[str, Any]:
        """Every key of the section, as the settings dict a vla_models family reads."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def check(self, prefix: str) -> list[str]:
        """The keys every family reads, then the family's own checks; a key only other families read must keep
        its default."""
        from vla_models import families, family_names, registered_families

        errors = one_of(f"{prefix}.model_type", self.model_type, family_names())
        errors += one_of(f"{prefix}.size", self.size, MODEL_SIZES)
        errors += one_of(f"{prefix}.precision", self.precision, PRECISIONS)
        errors += at_least(f"{prefix}.action_dim", self.action_dim, 1)
        errors += at_least(f"{prefix}.num_action_chunks", self.num_action_chunks, 1)
        errors += at_least(f"{prefix}.image_size", self.image_size, 8)
        errors += at_least(f"{prefix}.proprio_dim", self.proprio_dim, 1)
        if self.size == "full" and not self.model_path:
            errors.append(
                f"{prefix}.model_path={self.model_path!r} is invalid: size=full loads a checkpoint folder"
            )
        family = registered_families().get(self.model_type)
        if family is None:
            return errors
        others = {key for f in families() if f is not family for key in f.settings_keys}
        for key in sorted(others - family.settings_keys, key=_FIELD_ORDER.index):
            value, default = getattr(self, key), family.unread_settings.get(key, _DEFAULTS[key])
            if value != default:
                readers = ", ".join(f.name for f in families() if key in f.settings_keys)
                errors.append(
                    f"{prefix}.{key}={value!r} is invalid with model_type={self.model_type!r} (read by model_type "
                    f"{readers} only; allowed: {default!r})"
                )
        return errors + family.check_settings(self.settings(), f"{prefix}.")


_FIELD_ORDER = [f.name for f in fields(ModelSection)]
_DEFAULTS = {
    f.name: (f.default_factory() if f.default_factory is not MISSING else f.default)
    for f in fields(ModelSection)
}


@dataclass
class ActorSection:
    """`actor`: the trained policy, its optimizer and batch sizes."""

    model: ModelSection = field(default_factory=ModelSection)
    optim: OptimSection = field(default_factory=OptimSection)
    micro_batch_size: int = 128
    global_batch_size: int = 256
    enable_offload: bool = False
    fsdp_config: FSDPSection = field(default_factory=FSDPSection)
    #: intra-op threads while the actor trains (the update; `vla-sft`'s training); 0: `runner.torch_num_threads`
    torch_num_threads: int = 0

    def check(self, prefix: str) -> list[str]:
        errors = at_least(f"{prefix}.micro_batch_size", self.micro_batch_size, 1)
        errors += at_least(f"{prefix}.torch_num_threads", self.torch_num_threads, 0)
        errors += at_least(f"{prefix}.global_batch_size", self.global_batch_size, 1)
        if self.micro_batch_size >= 1 and self.global_batch_size % self.micro_batch_size != 0:
            errors.append(
                f"{prefix}.global_batch_size={self.global_batch_size!r} is invalid: must be a multiple of "
                f"{prefix}.micro_batch_size={self.micro_batch_size!r}"
            )
        return errors
