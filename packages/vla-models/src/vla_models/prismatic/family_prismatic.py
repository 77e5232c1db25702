"""What every model family on the Prismatic backbone shares (``prismatic_family``): its config from a dict or from
the app's settings, its builder, its checkpoint layouts and checks; ``vla_models/family_openvla.py`` and
``family_openvla_oft.py`` register their families with it.

Light on purpose: the registry imports the family modules on its first lookup, so model code (torch, transformers) is
imported only inside the functions (or named as ``"module:name"``), when a policy is built or loaded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vla_models.families import ModelFamily, check_at_least

#: Block classes FSDP shards one by one: the Llama decoder layers and the layers of both vision towers.
PRISMATIC_FSDP_CLASSES = ("LlamaDecoderLayer", "Dinov2WithRegistersLayer", "SiglipEncoderLayer")
#: Layouts of ``vla_models.prismatic.checkpoint_prismatic``: a save_pretrained folder, a published OpenVLA folder.
PRISMATIC_LAYOUTS = ("save_pretrained", "openvla_published")
#: Settings every Prismatic family reads (beyond those of every family).
PRISMATIC_SETTINGS = frozenset(
    {
        "size",
        "model_path",
        "lora_path",
        "precision",
        "action_dim",
        "num_action_chunks",
        "n_action_bins",
        "image_size",
        "proprio_dim",
        "add_value_head",
        "is_lora",
        "lora_rank",
        "unnorm_key",
    }
)
#: Settings that size a tiny backbone (``size: tiny``).
_TINY_KEYS = ("image_size", "patch_size", "hidden_size", "vision_stem")
#: the tiny sizes a settings block's ``extra`` may hold
_TINY_EXTRA_KEYS = ("patch_size", "hidden_size", "vision_stem")
#: The config fields ``build_policy`` passes on when it loads ``model_path``: the run's own settings.
PRISMATIC_LOAD_KEYS = (
    "is_lora",
    "lora_rank",
    "lora_alpha",
    "lora_dropout",
    "add_value_head",
    "detach_critic_input",
    "value_head_hidden_sizes",
    "precision",
    "attn_implementation",
    "unnorm_key",
    "action_dim",
    "num_action_chunks",
    "n_action_bins",
    "normalization_type",
)


def prismatic_config_from_dict(family: str) -> Callable[[dict[str, Any]], Any]:
    """``config_from_dict`` of the Prismatic family ``family``.

    Keys: ``size`` ("tiny" | "7b", default "7b"), for tiny also ``image_size`` / ``patch_size`` /
    ``hidden_size`` / ``vision_stem``, and any config field (``action_dim``, ``use_proprio``, ``is_lora``, ...). ``vocab_size`` /
    ``hidden_size`` of a 7B config are checked, not set.
    """

    def config_from_dict(d: dict[str, Any]) -> Any:
        from vla_models.families import get_family

        cls = get_family(family).config_class
        d = dict(d)
        size = d.pop("size", "7b")
        if size == "tiny":
            tiny_kw = {k: d.pop(k) for k in _TINY_KEYS if k in d}
            base = cls.tiny(**tiny_kw)
        elif size == "7b":
            base = cls.openvla_7b()
        else:
            raise ValueError(f"size={size!r} is not supported; allowed: ('tiny', '7b')")
        merged = {**base.to_dict(), **d}
        merged["backbone"] = d.get("backbone", base.backbone)
        return cls.from_dict(merged)

    return config_from_dict


def build_prismatic(config: Any, extra_load_keys: tuple[str, ...] = ()) -> Any:
    """A Prismatic policy from its typed config.

    With ``config.model_path`` set, the checkpoint there is loaded: the config's RL fields
    (``PRISMATIC_LOAD_KEYS`` and ``extra_load_keys``) override the checkpoint's, and its architecture fields
    must agree with the checkpoint (see ``load_policy``). Otherwise random weights are initialised and the
    tokenizer is the in-code tiny one (``tokenizer="tiny"``), so it works fully offline.
    """
    from vla_models.checkpoint import load_policy
    from vla_models.dtypes import DTYPES, default_dtype
    from vla_models.families import get_family
    from vla_models.tokenizer import build_tiny_tokenizer

    if config.model_path is not None:
        keys = PRISMATIC_LOAD_KEYS + extra_load_keys
        return load_policy(
            config.model_path, model_type=config.family, **{k: getattr(config, k) for k in keys}
        )
    if config.tokenizer == "tiny":
        tokenizer = build_tiny_tokenizer(vocab_size=config.backbone.vocab_size, n_bins=config.n_action_bins)
    else:
        raise ValueError(
            "tokenizer='checkpoint' needs model_path (a local checkpoint directory); use tokenizer='tiny'"
        )
    if tokenizer.pad_token_id != config.backbone.pad_token_id:
        raise ValueError(f"tiny tokenizer pad id {tokenizer.pad_token_id} != backbone.pad_token_id")
    with default_dtype(DTYPES[config.precision]):
        policy = get_family(config.family).policy_class(config, tokenizer)
    return policy.finalize()


def prismatic_saved_architecture(saved: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture settings a saved Prismatic config fixes, its backbone's sizes included."""
    from vla_models.prismatic.checkpoint_prismatic import saved_architecture

    return saved_architecture(saved)


def detect_prismatic(family: str, *, published: bool | None) -> Callable[[Path], bool]:
    """Whether a folder is a save_pretrained folder of ``family``, or (``published`` not None) a published
    OpenVLA folder with (True) or without (False) OpenVLA-OFT training side files."""

    def detect(path: Path) -> bool:
        from vla_models.prismatic.openvla_folder import published_prismatic_folder, saved_family

        if saved_family(path) == family:
            return True
        return published is not None and published_prismatic_folder(path) is published

    return detect


def prismatic_checks(s: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Checks of the settings every Prismatic family reads."""
    errors = check_at_least(f"{prefix}n_action_bins", s.get("n_action_bins", 256), 2)
    errors += check_at_least(f"{prefix}num_images_in_input", s.get("num_images_in_input", 1), 1)
    errors += check_at_least(f"{prefix}lora_rank", s.get("lora_rank", 32), 1)
    if s.get("lora_path") and not s.get("model_path"):
        errors.append(
            f"{prefix}lora_path={s['lora_path']!r} is invalid without {prefix}model_path (the adapter's base)"
        )
    return errors


def prismatic_extra_checks(family: str, s: Mapping[str, Any], prefix: str = "") -> list[str]:
    """One line per key of ``extra`` that is neither a field of ``family``'s config nor a tiny backbone's size
    (``patch_size``, ``hidden_size``, ``vision_stem``): such a key would only fail once the policy is built or loaded, and then
    under another key's name."""
    from vla_models.families import get_family

    cls = get_family(family).config_class
    known = {f.name for f in dataclasses.fields(cls)} | set(_TINY_EXTRA_KEYS)
    return [
        f"{prefix}extra.{key} is not a field of {cls.__name__}; allowed: {', '.join(sorted(known))}"
        for key in s.get("extra") or {}
        if key not in known
    ]


def prismatic_common(s: Mapping[str, Any]) -> dict[str, Any]:
    """The config fields of a settings dict every Prismatic family reads."""
    keys = ("action_dim", "num_action_chunks", "n_action_bins", "unnorm_key", "add_value_head", "is_lora")
    return {k: s[k] for k in (*keys, "lora_rank", "precision") if k in s}


def prismatic_config_from_settings(
    family: str, family_fields: Callable[[Mapping[str, Any]], dict[str, Any]] = lambda s: {}
) -> Callable[[Mapping[str, Any]], Any]:
    """``config_from_settings`` of a Prismatic family: a tiny config (``image_size``, ``patch_size`` /
    ``hidden_size`` / ``vision_stem`` from ``extra``) with the settings' fields, ``family_fields`` and the rest of ``extra``."""

    def config_from_settings(s: Mapping[str, Any]) -> Any:
        from vla_models.families import get_family

        extra = dict(s.get("extra") or {})
        sizes = {k: extra.pop(k) for k in _TINY_EXTRA_KEYS if k in extra}
        fields = {**prismatic_common(s), **family_fields(s)}
        image_size = s.get("image_size", 64)
        return get_family(family).config_class.tiny(image_size=image_size, **sizes, **fields, **extra)

    return config_from_settings


def prismatic_load_settings(
    family_fields: Callable[[Mapping[str, Any]], dict[str, Any]] = lambda s: {},
) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """``load_settings`` of a Prismatic family: ``model_type``, the architecture keys the folder must agree
    with, the run's own keys, ``family_fields``, ``lora_path`` and ``extra``."""

    def load_settings(s: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = dict(model_type=s["model_type"])
        keys = ("action_dim", "num_action_chunks", "n_action_bins", "image_size", "is_lora", "lora_rank")
        out.update({k: s[k] for k in (*keys, "precision", "unnorm_key") if k in s})
        out.update(family_fields(s))
        if s.get("lora_path"):
            out["lora_path"] = s["lora_path"]
        out.update(s.get("extra") or {})
        return out

    return load_settings


def prismatic_family(
    name: str,
    *,
    config: type | str,
    policy: type | str,
    published: bool | None = None,
    layouts: tuple[str, ...] = PRISMATIC_LAYOUTS,
    settings_keys: frozenset[str] = PRISMATIC_SETTINGS,
    check_settings: Callable[[Mapping[str, Any], str], list[str]] = prismatic_checks,
    family_fields: Callable[[Mapping[str, Any]], dict[str, Any]] = lambda s: {},
    tiny_fields: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None,
    build: Callable[[Any], Any] = build_prismatic,
    **kw: Any,
) -> ModelFamily:
    """The ``ModelFamily`` of a policy on the Prismatic backbone (a subclass of ``PrismaticVLAPolicy`` whose
    config subclasses ``OpenVLAConfig`` and names ``name`` as its ``family``): it reads and writes the
    ``vla_models.prismatic.checkpoint_prismatic`` layouts, FSDP shards the backbone's blocks.

    Args:
        published: whether published OpenVLA folders without (False) or with (True) OpenVLA-OFT training side
            files load as this family (None: only its own save_pretrained folders).
        family_fields: settings dict -> this family's own config fields (loading; tiny configs too unless
            ``tiny_fields`` says otherwise).
        **kw: further ``ModelFamily`` fields.
    """
    return ModelFamily(
        name=name,
        config=config,
        policy=policy,
        config_from_dict=prismatic_config_from_dict(name),
        build=build,
        load="vla_models.prismatic.checkpoint_prismatic:load_prismatic",
        saved_architecture=prismatic_saved_architecture,
        detect_checkpoint=detect_prismatic(name, published=published),
        checkpoint_layouts=layouts if published is not None else layouts[:1],
        fsdp_wrap_classes=PRISMATIC_FSDP_CLASSES,
        settings_keys=settings_keys,
        check_settings=lambda s, prefix="": (
            check_settings(s, prefix) + prismatic_extra_checks(name, s, prefix)
        ),
        config_from_settings=prismatic_config_from_settings(name, tiny_fields or family_fields),
        load_settings=prismatic_load_settings(family_fields),
        reads_dataset_statistics=True,
        **kw,
    )
