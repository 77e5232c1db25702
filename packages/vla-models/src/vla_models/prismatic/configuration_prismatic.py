"""Typed configuration of the Prismatic backbone, with the OpenVLA-7B sizes and a tiny CPU size."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# What the released OpenVLA processors normalise DINOv2 inputs with (`tvf_normalize_params` of
# preprocessor_config.json): ImageNet's constants rounded to bfloat16, because the conversion script ran with
# bf16 as the default dtype. Used when a published folder has no preprocessor_config.json.
OPENVLA_DINOV2_MEAN = (0.484375, 0.455078125, 0.40625)
OPENVLA_DINOV2_STD = (0.228515625, 0.2236328125, 0.224609375)
# head sizes of the published towers: heads = width / head_dim (DINOv2-L 1024/64, SigLIP-So400m 1152/72)
HEAD_DIMS = {"dinov2_reg": 64, "siglip": 72}
SIGLIP_MEAN = (0.5, 0.5, 0.5)
SIGLIP_STD = (0.5, 0.5, 0.5)
VISION_KINDS = ("dinov2_reg", "siglip", "keypoints")
#: what the tiny backbone's ``vision_stem`` setting selects: two ViT towers, or one keypoint stem
VISION_STEMS = ("vit", "keypoints")
KEYPOINT_MEAN = (0.5, 0.5, 0.5)
KEYPOINT_STD = (0.25, 0.25, 0.25)


@dataclass(kw_only=True)
class VisionTowerConfig:
    """One vision tower. ``kind`` "dinov2_reg" (DINOv2 with registers) or "siglip": a ViT whose feature is the
    output of the second-to-last block (patch tokens only), as in Prismatic.

    ``kind`` "keypoints": a small convolutional stem that localises (a tiny-model option for tasks where the
    policy must find a small object): ``num_layers`` convolutions of ``mlp_dim`` channels at full resolution, the
    last a 1x1 to ``hidden_size / 2`` maps, and a spatial softmax that gives each map's expected image position;
    the feature is one token of those ``hidden_size`` coordinates. It reads the whole image, so its
    ``patch_size`` is the image size; ``num_heads`` is unused (1).
    """

    kind: str
    hidden_size: int
    num_layers: int
    num_heads: int
    mlp_dim: int
    patch_size: int
    num_registers: int = 0
    layer_norm_eps: float = 1e-6
    image_mean: tuple[float, float, float] = IMAGENET_MEAN
    image_std: tuple[float, float, float] = IMAGENET_STD

    def __post_init__(self) -> None:
        if self.kind not in VISION_KINDS:
            raise ValueError(f"vision tower kind={self.kind!r} is not supported; allowed: {VISION_KINDS}")
        if self.num_layers < 2:
            raise ValueError(
                f"vision tower num_layers must be >= 2 (the 2nd-to-last is used), got {self.num_layers}"
            )
        if self.kind == "keypoints" and self.hidden_size % 2:
            raise ValueError(
                f"keypoints tower hidden_size must be even (x, y per keypoint), got {self.hidden_size}"
            )
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"vision hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}"
            )
        self.image_mean = tuple(self.image_mean)  # type: ignore[assignment]
        self.image_std = tuple(self.image_std)  # type: ignore[assignment]


@dataclass(kw_only=True)
class LanguageModelConfig:
    """Llama decoder sizes (``vocab_size`` here is the padded embedding size, e.g. 32064)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"LM hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"LM num_heads {self.num_heads} is not divisible by num_kv_heads {self.num_kv_heads}"
            )


def _dinov2_large() -> VisionTowerConfig:
    return VisionTowerConfig(
        kind="dinov2_reg",
        hidden_size=1024,
        num_layers=24,
        num_heads=16,
        mlp_dim=4096,
        patch_size=14,
        num_registers=4,
        image_mean=OPENVLA_DINOV2_MEAN,
        image_std=OPENVLA_DINOV2_STD,
    )


def _siglip_so400m() -> VisionTowerConfig:
    return VisionTowerConfig(
        kind="siglip",
        hidden_size=1152,
        num_layers=27,
        num_heads=16,
        mlp_dim=4304,
        patch_size=14,
        image_mean=SIGLIP_MEAN,
        image_std=SIGLIP_STD,
    )


def _llama2_7b() -> LanguageModelConfig:
    return LanguageModelConfig(
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        intermediate_size=11008,
        rms_norm_eps=1e-6,  # the published config.json omits it: LlamaConfig's default applies
    )


@dataclass(kw_only=True)
class PrismaticConfig:
    """Backbone: vision towers (their 2nd-to-last features are channel-concatenated), fused GELU MLP projector,
    Llama decoder.

    Attributes:
        image_size: side of the square image each tower sees (224 for OpenVLA).
        vision_towers: one or two towers; two = OpenVLA's fused DINOv2 + SigLIP.
        text: Llama decoder sizes.
        vocab_size: tokenizer vocabulary size; the action bins are its last ids (32000 for Llama-2).
        pad_to_multiple_of: the embedding / LM head rows are ``vocab_size + 1`` (pad) rounded up to this.
        pad_token_id: id of the pad token (32000 for OpenVLA).
        bos_token_id: id prepended to every prompt.
    """

    image_size: int = 224
    vision_towers: tuple[VisionTowerConfig, ...] = field(
        default_factory=lambda: (_dinov2_large(), _siglip_so400m())
    )
    text: LanguageModelConfig = field(default_factory=_llama2_7b)
    vocab_size: int = 32000
    pad_to_multiple_of: int = 64
    pad_token_id: int = 32000
    bos_token_id: int = 1

    def __post_init__(self) -> None:
        towers = tuple(VisionTowerConfig(**t) if isinstance(t, dict) else t for t in self.vision_towers)
        if not 1 <= len(towers) <= 2:
            raise ValueError(f"vision_towers must hold 1 or 2 towers, got {len(towers)}")
        for t in towers:
            if self.image_size % t.patch_size:
                raise ValueError(
                    f"image_size {self.image_size} is not divisible by patch_size {t.patch_size}"
                )
        if any(t.kind == "keypoints" for t in towers):
            if len(towers) != 1:
                raise ValueError("a keypoints tower is the only tower of its backbone; got two towers")
            if towers[0].patch_size != self.image_size:
                raise ValueError(
                    f"a keypoints tower reads the whole image: patch_size must be image_size "
                    f"{self.image_size}, got {towers[0].patch_size}"
                )
        if len(towers) == 2 and towers[0].patch_size != towers[1].patch_size:
            raise ValueError("fused vision towers must share patch_size (their patch grids are concatenated)")
        self.vision_towers = towers
        if isinstance(self.text, dict):
            self.text = LanguageModelConfig(**self.text)
        if not 0 <= self.pad_token_id < self.padded_vocab_size:
            raise ValueError(
                f"pad_token_id {self.pad_token_id} outside the embedding ({self.padded_vocab_size})"
            )

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the embedding / LM head: ``max(vocab_size, pad_token_id) + 1`` rounded up."""
        n = max(self.vocab_size, self.pad_token_id + 1)
        m = self.pad_to_multiple_of
        return ((n + m - 1) // m) * m if m > 1 else n

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.vision_towers[0].patch_size) ** 2

    @property
    def vision_stem(self) -> str:
        """The tiny backbone's ``vision_stem``: "keypoints" for a keypoint-stem backbone, else "vit"."""
        return "keypoints" if self.vision_towers[0].kind == "keypoints" else "vit"

    @property
    def vision_dim(self) -> int:
        return sum(t.hidden_size for t in self.vision_towers)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def openvla_7b(cls) -> PrismaticConfig:
        """OpenVLA-7B: DINOv2-L/14 reg4 + SigLIP-So400m/14 at 224 px, Llama-2-7B (vocab 32000, padded 32064)."""
        return cls()

    @classmethod
    def tiny(
        cls,
        *,
        image_size: int = 64,
        patch_size: int | None = None,
        vision_dim: int = 64,
        hidden_size: int = 128,
        num_layers: int = 2,
        vocab_size: int = 1024,
        vision_stem: str = "vit",
    ) -> PrismaticConfig:
        """A CPU-sized backbone with the same structure (both towers, projector, Llama).

        ``vision_stem`` "vit" (default): DINOv2 and SigLIP towers with ``patch_size`` patches (8 when None);
        "keypoints": one keypoint stem (16 keypoints, 4 convolutions of 32 channels; see
        :class:`VisionTowerConfig`), which takes no ``patch_size`` (None, or the image size).
        """
        text = LanguageModelConfig(
            hidden_size=hidden_size,
            num_layers=num_layers,
            num_heads=4,
            num_kv_heads=4,
            intermediate_size=2 * hidden_size,
            max_position_embeddings=1024,
        )
        common = dict(
            image_size=image_size,
            text=text,
            vocab_size=vocab_size,
            pad_to_multiple_of=64,
            pad_token_id=vocab_size,
            bos_token_id=1,
        )
        if vision_stem == "keypoints":
            if patch_size not in (None, image_size):
                raise ValueError(
                    f"patch_size={patch_size} is a ViT's setting; the keypoints vision_stem reads the whole "
                    "image: leave patch_size unset (null)"
                )
            stem = VisionTowerConfig(
                kind="keypoints",
                hidden_size=32,
                num_layers=4,
                num_heads=1,
                mlp_dim=32,
                patch_size=image_size,
                image_mean=KEYPOINT_MEAN,
                image_std=KEYPOINT_STD,
            )
            return cls(vision_towers=(stem,), **common)
        if vision_stem != "vit":
            raise ValueError(f"vision_stem={vision_stem!r} is not supported; allowed: {VISION_STEMS}")
        patch_size = 8 if patch_size is None else patch_size
        dino = VisionTowerConfig(
            kind="dinov2_reg",
            hidden_size=vision_dim,
            num_layers=2,
            num_heads=2,
            mlp_dim=4 * vision_dim,
            patch_size=patch_size,
            num_registers=4,
        )
        siglip = VisionTowerConfig(
            kind="siglip",
            hidden_size=vision_dim,
            num_layers=2,
            num_heads=2,
            mlp_dim=2 * vision_dim,
            patch_size=patch_size,
            image_mean=SIGLIP_MEAN,
            image_std=SIGLIP_STD,
        )
        return cls(vision_towers=(dino, siglip), **common)
