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
    """Learning rate of the policy (AdamW)."""
    value_lr: float = 1e-4
    """Learning rate of the value head."""
    weight_decay: float = 0.0
    """AdamW's weight decay."""
    clip_grad: float = 1.0
    """Maximum gradient norm over the trained parameters; 0: no clipping."""
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW's beta1 and beta2."""
    adam_eps: float = 1e-8
    """AdamW's epsilon."""
    lr_warmup_steps: int = 0
    """Linear warmup over the first this many optimizer steps that train the policy (critic warm-up steps run
    at the full rate)."""
    lr_decay_style: str = "constant"
    """Decay of every learning rate over the run's training iterations: constant, linear or cosine."""
    min_lr: float = 0.0
    """Learning rate the decay ends at (the value head's keeps its ratio to `lr`)."""

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
    """`fsdp` or `fsdp2` shard an actor placed on several processes with FSDP2; `none` refuses several actor
    processes."""
    sharding_strategy: str = "no_shard"
    """`full_shard` reshards after the forward, `shard_grad_op` keeps the gathered weights until the backward;
    the others are refused with several processes."""
    gradient_checkpointing: bool = False
    """Recompute the activations of each decoder and vision block in the backward pass instead of keeping
    them."""
    cpu_offload: bool = False
    """FSDP2's CPU offload of parameter shards (several actor processes; with one, use
    `actor.enable_offload`)."""
    mixed_precision: dict[str, Any] = field(default_factory=dict)
    """`param_dtype` and `reduce_dtype` (fp32, bf16, fp16) of the training; `buffer_dtype` fp32 only; with one
    process `param_dtype` runs the forward under autocast."""

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
    """Policy family: a registered vla-models family (openvla, openvla_oft, openpi, or one a module
    registers)."""
    size: str = "tiny"
    """`tiny` builds a small model from scratch (CPU runs); `full` loads the checkpoint at `model_path`."""
    model_path: str | None = None
    """Policy folder to start from (a published checkpoint, a `vla-sft` output or a run's `policy/`); null: a
    tiny model built from scratch."""
    lora_path: str | None = None
    """A peft adapter folder applied on top of `model_path`: kept as trainable LoRA when `is_lora` is true,
    merged into the weights otherwise."""
    precision: str = "fp32"
    """Weight dtype of the policy: fp32, bf16 or fp16."""
    action_dim: int = 4
    """Numbers in one action (4 for MetaWorld, 7 for LIBERO and ManiSkill, 14 for RoboTwin)."""
    num_action_chunks: int = 1
    """Actions per policy decision: the chunk the env executes."""
    n_action_bins: int = 256
    """Bins per action dimension of the discrete action tokens (OpenVLA families)."""
    image_size: int = 64
    """Side in pixels of the square images the policy takes."""
    use_proprio: bool = True
    """Feed the robot state (`states`) to the policy."""
    proprio_dim: int = 4
    """Entries of `states` the policy reads (the first ones)."""
    num_images_in_input: int = 1
    """Camera images per observation the policy takes (the main camera, then wrist cameras)."""
    use_film: bool = False
    """FiLM conditioning of the vision features on the instruction (OpenVLA-OFT)."""
    implement_version: str | None = None
    """OpenVLA-OFT layout: official, rlinf or causal_prefix; null: the checkpoint's own, or causal_prefix for
    a tiny model."""
    action_head: str = "discrete"
    """How OpenVLA-OFT decodes actions: `discrete` tokens or an `l1` regression head."""
    add_value_head: bool = True
    """Give the policy a value head, the critic that a loss with a value term trains."""
    is_lora: bool = False
    """Train LoRA adapters instead of the full weights."""
    lora_rank: int = 32
    """Rank of the LoRA adapters."""
    unnorm_key: str | None = None
    """Key of the checkpoint's action statistics used to un-normalise actions (OpenVLA families)."""
    num_steps: int | None = None
    """Denoising steps of a flow policy (pi0, pi0.5); null: the preset's."""
    openpi: dict[str, Any] = field(default_factory=dict)
    """pi0 / pi0.5 settings of vla-models' `OpenPiConfig` (`config_name`, `noise_method`, `noise_level`)."""
    OpenPI: dict[str, Any] = field(default_factory=dict)
    """The reference documents' spelling of `openpi`; both are accepted."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Further settings passed to the family's vla-models config (`normalization_type`, `detach_critic_input`,
    ...)."""

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
    """The trained policy."""
    optim: OptimSection = field(default_factory=OptimSection)
    """The policy's optimizer."""
    micro_batch_size: int = 128
    """Samples per forward and backward pass."""
    global_batch_size: int = 256
    """Samples per optimizer step, a multiple of `micro_batch_size`: one minibatch."""
    enable_offload: bool = False
    """Keep the actor's parameters, gradients and optimizer state in host memory between calls."""
    fsdp_config: FSDPSection = field(default_factory=FSDPSection)
    """Sharding of an actor placed on several processes."""
    torch_num_threads: int = 0
    """Intra-op threads while the actor trains (the update; `vla-sft`'s training); 0:
    `runner.torch_num_threads`."""

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
