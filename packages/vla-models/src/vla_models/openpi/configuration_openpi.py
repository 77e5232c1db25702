"""Typed configuration of pi0 / pi0.5 (openpi's flow-matching VLA) with the RL settings of its PPO recipes."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

PRECISIONS = ("fp32", "bf16", "fp16")
NOISE_METHODS = ("flow_sde", "flow_noise", "flow_cps", "flow_ode")
VALUE_VLM_MODES = ("mean_token", "last_token", "first_token")
SFT_LOSS_DIMS = ("all", "env")
ATTN_IMPLEMENTATIONS = ("sdpa", "eager")
TIME_DTYPES = ("float64", "float32")
VALUE_HEAD_ACTIVATIONS = ("relu", "gelu", "tanh")
NORM_STYLES = ("openpi", "lerobot")


@dataclass(kw_only=True)
class PaliGemmaExpertSizes:
    """Sizes of the SigLIP tower, the PaliGemma language model (Gemma) and the action expert.

    The expert attends to the language model's keys and values layer by layer, so both share the depth, the
    number of heads, the key/value heads and the head size; only the width and the MLP size differ.
    """

    image_size: int = 224
    patch_size: int = 14
    vision_width: int = 1152
    vision_depth: int = 27
    vision_heads: int = 16
    vision_mlp: int = 4304
    width: int = 2048
    depth: int = 18
    mlp: int = 16384
    num_heads: int = 8
    num_kv_heads: int = 1
    head_dim: int = 256
    vocab_size: int = 257152
    expert_width: int = 1024
    expert_mlp: int = 4096

    @classmethod
    def pi0_base(cls) -> PaliGemmaExpertSizes:
        """PaliGemma 3B (SigLIP so400m/14 at 224 px, Gemma 2B) with the 300M Gemma action expert."""
        return cls()

    @classmethod
    def tiny(
        cls, *, image_size: int = 64, patch_size: int = 16, vocab_size: int = 1024
    ) -> PaliGemmaExpertSizes:
        """A CPU-sized model (about 0.6M parameters) with the same structure."""
        return cls(
            image_size=image_size,
            patch_size=patch_size,
            vision_width=64,
            vision_depth=2,
            vision_heads=2,
            vision_mlp=128,
            width=128,
            depth=2,
            mlp=256,
            num_heads=4,
            num_kv_heads=1,
            head_dim=32,
            vocab_size=vocab_size,
            expert_width=64,
            expert_mlp=128,
        )

    def __post_init__(self) -> None:
        for name, v in asdict(self).items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"sizes.{name} must be an int >= 1, got {v!r}")
        if self.image_size % self.patch_size:
            raise ValueError(
                f"sizes.image_size={self.image_size} is not a multiple of patch_size={self.patch_size}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"sizes.num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}"
            )

    @property
    def tokens_per_image(self) -> int:
        return (self.image_size // self.patch_size) ** 2


#: openpi / RLinf training-config names -> the settings they fix (openpi ``training/config.py``, RLinf
#: ``models/embodiment/openpi/dataconfig``).
CONFIG_PRESETS: dict[str, dict[str, Any]] = {
    "pi0_metaworld": dict(pi05=False, action_horizon=5, asset_id="lerobot/metaworld_mt50"),
    "pi05_metaworld": dict(
        pi05=True, action_horizon=5, discrete_state_input=False, asset_id="lerobot/metaworld_mt50"
    ),
    "pi0_libero": dict(
        pi05=False,
        action_horizon=50,
        delta_action_mask=(True,) * 6 + (False,),
        asset_id="physical-intelligence/libero",
    ),
    "pi05_libero": dict(
        pi05=True,
        action_horizon=10,
        discrete_state_input=False,
        delta_action_mask=(True,) * 6 + (False,),
        asset_id="physical-intelligence/libero",
        value_head_hidden_sizes=(1024, 512, 256),
    ),
    "pi0_aloha_robotwin": dict(
        pi05=False,
        action_horizon=50,
        delta_action_mask=((True,) * 6 + (False,)) * 2,
        adapt_to_pi=False,
        asset_id="robotwin",
    ),
    "pi05_aloha_robotwin": dict(
        pi05=True,
        action_horizon=50,
        delta_action_mask=((True,) * 6 + (False,)) * 2,
        adapt_to_pi=True,
        asset_id="robotwin",
    ),
}


@dataclass(kw_only=True)
class OpenPiConfig:
    """pi0 / pi0.5 policy configuration (RLinf ``actor.model.openpi`` keys where they exist).

    Attributes:
        sizes: model sizes (``PaliGemmaExpertSizes.pi0_base()`` or ``.tiny()``).
        pi05: pi0.5 (adaptive RMSNorm in the expert from a time MLP, no state token, quantile normalisation,
            VLM critic by default) instead of pi0.
        config_name: an openpi preset (``CONFIG_PRESETS``); fixes ``pi05``, ``action_horizon``, ... unless given.
        action_horizon: H, actions the model denoises per decision (>= ``num_action_chunks``).
        model_action_dim: width of the model's action space (32); env actions are zero-padded to it.
        action_dim: A, env action dims scored and executed (``action_env_dim`` in RLinf).
        num_action_chunks: C, env steps executed per decision (``action_chunk`` in RLinf).
        num_steps: K, denoising steps.
        max_token_len: prompt tokens after padding (48 for pi0, 200 for pi0.5 in openpi).
        discrete_state_input: pi0.5 writes the normalised state into the prompt as 256-bin integers.
        num_images_in_input: cameras (the base camera, then wrist cameras; missing ones are masked).
        noise_method: how the sampled denoising step is made stochastic (``flow_sde``, ``flow_noise`` with a learned
            std, ``flow_cps``, ``flow_ode`` = deterministic).
        noise_level: the std scale of flow_sde / flow_cps (times the rollout temperature).
        noise_anneal / noise_params: anneal noise_level linearly from ``noise_params[0]`` to ``[1]`` over ``[2]``
            training steps (``set_global_step``).
        noise_logvar_range: ``[min_std, max_std]`` of flow_noise's learned std.
        joint_logprob: score every denoising step (the mean over K+1 Gaussian terms) instead of one step per row.
        ignore_last: draw the scored step from ``[0, K-2]`` (the last step of flow_cps has zero std).
        train_expert_only: freeze PaliGemma (vision tower, projector, language model).
        add_value_head: the critic, with the six keys below (see the package README, "pi0 / pi0.5"); the
            reference framework's critic MLP is ReLU, (512, 256, 128) or (1024, 512, 256) for pi0.5 LIBERO.
        value_after_vlm: the critic (above).
        value_vlm_mode: the critic (above).
        detach_critic_input: the critic (above).
        chunk_critic_input: the critic (above).
        value_head_hidden_sizes: the critic (above).
        value_head_activation: the critic (above).
        state_indices: env state columns the model sees (None: all).
        norm_stats: openpi ``norm_stats.json`` content (``{"state": {...}, "actions": {...}}``) or None (identity).
        use_quantile_norm: quantile instead of z-score normalisation (None: pi0 z-score, pi0.5 quantiles).
        norm_style: the normalisation's epsilon: "openpi" (``std + 1e-6``, ``q99 - q01 + 1e-6``) or "lerobot"
            (``std + 1e-8``; quantiles divide by ``q99 - q01``, 1e-8 only where the two are equal).
        delta_action_mask: per action dim, whether the model predicts it relative to the state (None: absolute).
        adapt_to_pi: ALOHA joint flips and gripper maps between the env and the pi0 space.
        asset_id: where ``load_policy`` looks for ``norm_stats.json`` (``assets/<asset_id>/`` or ``<asset_id>/``).
        sft_loss_dims: "all" (the 32 model dims over the first C steps, openpi) or "env" (``[:C, :A]``).
        time_embedding_dtype: dtype of the sinusoidal time embedding ("float64" as openpi; "float32" as transformers'
            PI0).
        tokenizer: "tiny" (in-code BPE), "checkpoint" (from ``model_path``) or a tokenizer folder.
        is_lora / lora_rank: LoRA (peft, alpha = rank) on the attention and MLP projections of the Gemma language
            model and of the action expert (of the expert alone with ``train_expert_only``). The vision tower,
            projector, embeddings, norms and base projections are frozen; the action, state and time
            projections and the value and noise heads train. ``save_pretrained`` writes merged weights.
    """

    family: ClassVar[str] = "openpi"
    sizes: PaliGemmaExpertSizes = field(default_factory=PaliGemmaExpertSizes.pi0_base)
    pi05: bool = False
    config_name: str | None = None
    action_horizon: int = 50
    model_action_dim: int = 32
    action_dim: int = 7
    num_action_chunks: int = 5
    num_steps: int = 10
    max_token_len: int | None = None
    discrete_state_input: bool | None = None
    num_images_in_input: int = 2
    noise_method: str = "flow_sde"
    noise_level: float = 0.5
    noise_anneal: bool = False
    noise_params: tuple[float, float, float] = (0.7, 0.3, 400)
    noise_logvar_range: tuple[float, float] = (0.08, 0.16)
    joint_logprob: bool = False
    ignore_last: bool = False
    train_expert_only: bool = False
    add_value_head: bool = False
    value_after_vlm: bool | None = None
    value_vlm_mode: str = "mean_token"
    detach_critic_input: bool = False
    chunk_critic_input: bool = False
    value_head_hidden_sizes: tuple[int, ...] = (512, 256, 128)
    value_head_activation: str = "relu"
    state_indices: tuple[int, ...] | None = None
    norm_stats: dict[str, Any] | None = None
    use_quantile_norm: bool | None = None
    norm_style: str = "openpi"
    delta_action_mask: tuple[bool, ...] | None = None
    adapt_to_pi: bool = False
    asset_id: str | None = None
    sft_loss_dims: str = "all"
    time_embedding_dtype: str = "float64"
    precision: str = "bf16"
    attn_implementation: str = "sdpa"
    model_path: str | None = None
    tokenizer: str = "checkpoint"
    is_lora: bool = False
    lora_rank: int = 32

    def __post_init__(self) -> None:
        if isinstance(self.sizes, dict):
            self.sizes = PaliGemmaExpertSizes(**self.sizes)
        if self.config_name is not None and self.config_name not in CONFIG_PRESETS:
            raise ValueError(
                f"config_name={self.config_name!r} is not supported; allowed: {sorted(CONFIG_PRESETS)}"
            )
        for name in ("action_horizon", "model_action_dim", "action_dim", "num_action_chunks", "num_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if self.num_action_chunks > self.action_horizon:
            raise ValueError(
                f"num_action_chunks={self.num_action_chunks} exceeds action_horizon={self.action_horizon}"
            )
        if self.action_dim > self.model_action_dim:
            raise ValueError(f"action_dim={self.action_dim} exceeds model_action_dim={self.model_action_dim}")
        checks = {
            "noise_method": (self.noise_method, NOISE_METHODS),
            "value_vlm_mode": (self.value_vlm_mode, VALUE_VLM_MODES),
            "sft_loss_dims": (self.sft_loss_dims, SFT_LOSS_DIMS),
            "precision": (self.precision, PRECISIONS),
            "attn_implementation": (self.attn_implementation, ATTN_IMPLEMENTATIONS),
            "time_embedding_dtype": (self.time_embedding_dtype, TIME_DTYPES),
            "value_head_activation": (self.value_head_activation, VALUE_HEAD_ACTIVATIONS),
            "norm_style": (self.norm_style, NORM_STYLES),
        }
        for name, (v, allowed) in checks.items():
            if v not in allowed:
                raise ValueError(f"{name}={v!r} is not supported; allowed: {allowed}")
        if isinstance(self.lora_rank, bool) or not isinstance(self.lora_rank, int) or self.lora_rank < 1:
            raise ValueError(f"lora_rank must be an int >= 1, got {self.lora_rank!r}")
        if not self.noise_level >= 0:
            raise ValueError(f"noise_level must be >= 0, got {self.noise_level!r}")
        self.noise_params = tuple(float(x) for x in self.noise_params)  # type: ignore[assignment]
        if len(self.noise_params) != 3 or self.noise_params[2] <= 0:
            raise ValueError(f"noise_params must be [start, end, steps > 0], got {list(self.noise_params)}")
        lo_hi = tuple(float(x) for x in self.noise_logvar_range)
        if len(lo_hi) != 2 or not 0 < lo_hi[0] <= lo_hi[1]:
            raise ValueError(
                f"noise_logvar_range must be [min_std, max_std] with 0 < min <= max, got {lo_hi}"
            )
        self.noise_logvar_range = lo_hi  # type: ignore[assignment]
        if self.ignore_last and self.num_steps < 2:
            raise ValueError("ignore_last=True needs num_steps >= 2")
        if any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in self.value_head_hidden_sizes):
            raise ValueError(
                f"value_head_hidden_sizes must be ints >= 1, got {list(self.value_head_hidden_sizes)!r}"
            )
        self.value_head_hidden_sizes = tuple(self.value_head_hidden_sizes)
        if self.state_indices is not None:
            self.state_indices = tuple(int(i) for i in self.state_indices)
        if self.delta_action_mask is not None:
            self.delta_action_mask = tuple(bool(b) for b in self.delta_action_mask)
        if self.tokenizer not in ("tiny", "checkpoint") and not isinstance(self.tokenizer, str):
            raise ValueError(f"tokenizer must be 'tiny', 'checkpoint' or a folder, got {self.tokenizer!r}")
        if self.adapt_to_pi and self.action_dim != 14:
            raise ValueError(f"adapt_to_pi=True maps the 14 ALOHA dims; action_dim={self.action_dim}")

    # ---- derived settings (None = the pi0 / pi0.5 default) ------------------------------------------------
    @property
    def token_len(self) -> int:
        return self.max_token_len if self.max_token_len is not None else (200 if self.pi05 else 48)

    @property
    def state_in_prompt(self) -> bool:
        return self.pi05 if self.discrete_state_input is None else bool(self.discrete_state_input)

    @property
    def critic_after_vlm(self) -> bool:
        return self.pi05 if self.value_after_vlm is None else bool(self.value_after_vlm)

    @property
    def quantile_norm(self) -> bool:
        return self.pi05 if self.use_quantile_norm is None else bool(self.use_quantile_norm)

    def noise_level_at(self, global_step: int) -> float:
        """``noise_level``, or with ``noise_anneal`` the linear anneal of ``noise_params`` at ``global_step``."""
        if not self.noise_anneal:
            return float(self.noise_level)
        start, end, steps = self.noise_params
        frac = min(max(global_step, 0) / steps, 1.0)
        return float(start + (end - start) * frac)

    # ---- (de)serialisation --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sizes"] = asdict(self.sizes)
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = list(v)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OpenPiConfig:
        d = dict(d)
        d.pop("family", None)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown openpi config keys {unknown}; allowed: {sorted(names)}")
        return cls(**d)

    def replace(self, **changes: Any) -> OpenPiConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_preset(cls, config_name: str | None, **fields: Any) -> OpenPiConfig:
        """A config whose unset fields come from the openpi preset ``config_name`` (``CONFIG_PRESETS``)."""
        preset = dict(CONFIG_PRESETS.get(config_name, {})) if config_name else {}
        if config_name and config_name not in CONFIG_PRESETS:
            raise ValueError(
                f"config_name={config_name!r} is not supported; allowed: {sorted(CONFIG_PRESETS)}"
            )
        return cls(config_name=config_name, **{**preset, **fields})

    @classmethod
    def tiny(cls, *, image_size: int = 64, patch_size: int = 16, **fields: Any) -> OpenPiConfig:
        """A CPU-sized pi0 (``pi05=True`` for pi0.5): in-code tokenizer, fp32, 5-step chunks of 4-D actions."""
        base: dict[str, Any] = dict(
            sizes=PaliGemmaExpertSizes.tiny(image_size=image_size, patch_size=patch_size),
            action_horizon=5,
            action_dim=4,
            num_action_chunks=5,
            num_steps=4,
            max_token_len=64 if fields.get("pi05") else 32,  # pi0.5 writes the state into the prompt
            num_images_in_input=1,
            precision="fp32",
            tokenizer="tiny",
            value_head_hidden_sizes=(64, 32),
        )
        base.update(fields)
        return cls.from_preset(base.pop("config_name", None), **base)

    @classmethod
    def pi0_base(cls, **fields: Any) -> OpenPiConfig:
        """Real size (PaliGemma 3B + 300M expert); build it on the meta device or load it from ``model_path``."""
        fields.setdefault("sizes", PaliGemmaExpertSizes.pi0_base())
        return cls.from_preset(fields.pop("config_name", None), **fields)
