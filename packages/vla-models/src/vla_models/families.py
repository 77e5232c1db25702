"""Model-family registry: every model family (OpenVLA, OpenVLA-OFT, pi0 / pi0.5, ...) is one ``ModelFamily``
record, and every place that needs to enumerate families looks them up here.

A family lives in a module ``vla_models/family_<name>.py`` that calls ``register_family``. The registry imports
those modules on its first lookup, so importing ``vla_models`` imports no model code; the family modules
themselves stay light (their config and policy classes are named as ``"module:Class"`` and imported on first
use). The shared code (``checkpoint``, ``factory``, ...) imports no family module: it asks the registry.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from vla_models.checkpoint_settings import architecture_settings


def _no_errors(settings: Mapping[str, Any], prefix: str = "") -> list[str]:
    return []


def _no_config_from_settings(settings: Mapping[str, Any]) -> Any:
    raise ValueError(
        f"model_type={settings.get('model_type')!r} builds no policy from settings (give model_path)"
    )


def _no_load_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {"model_type": settings.get("model_type")}


def _resolve(ref: Any) -> Any:
    """A class or function, or the one ``"package.module:name"`` names, imported now."""
    if not isinstance(ref, str):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class ModelFamily:
    """Everything the shared entry points and the apps need to know about one family.

    Attributes:
        name: the ``model_type`` value (and the ``family`` of its config class and saved configs).
        config / policy: the typed config and policy classes, or ``"module:Class"`` names imported on first use
            (read them as ``config_class`` / ``policy_class``).
        config_from_dict: a flat dict (``size``, config fields, ...; no ``model_type``) -> config.
        build: config -> policy with random weights (or loaded from ``config.model_path``).
        load: ``(path, **settings)`` -> policy, for a folder this family's ``detect_checkpoint`` accepts, or its
            ``"module:function"`` name imported on first use (call it as ``loader``).
        detect_checkpoint: whether a folder holds one of this family's layouts; families are asked in
            registration order (built-in families in name order) and the first that accepts a folder loads it.
        checkpoint_layouts: names of the layouts ``load`` reads.
        fsdp_wrap_classes: module class names FSDP shards one by one.
        settings_keys: the keys of an ``actor.model``-style settings dict this family reads; a key that only other
            families read must keep its default, or the value ``unread_settings`` gives (an app refuses others).
        unread_settings: the one value allowed for a key this family does not read, where that is not the
            settings' default (e.g. ``use_proprio: False`` for a policy without a proprio input).
        check_settings: ``(settings dict, prefix)`` -> one-line errors naming each key as ``prefix + key``
            (e.g. ``"actor.model."``), the bad value and what is allowed; imports no model code.
        config_from_settings: settings dict (the keys above, ``size`` and ``image_size``) -> config of a policy
            built from scratch.
        load_settings: settings dict -> ``load_policy`` keywords (architecture keys the folder must agree with,
            and the run's own keys).
        saved_config_defaults: values of config fields that configs saved before the field existed imply.
        saved_architecture: a saved config block (``config.json``'s ``vla_models``, its defaults filled in) -> the
            architecture settings it fixes (``vla_models.checkpoint_settings.ARCHITECTURE_KEYS``, including those
            its nested configs hold, e.g. a Prismatic backbone's ``image_size``); a setting that differs is refused.
        fixed_image_size: whether a policy built from scratch only takes frames of its ``image_size`` (a family
            that resizes frames itself sets False).
        reads_robot_platform: whether the family's official code picks its action / proprio normalisation from the
            ``ROBOT_PLATFORM`` environment variable (``normalization_type`` ``bounds`` for ALOHA).
        states_without_proprio: whether the policy still receives ``states`` when ``use_proprio`` is off.
        reads_dataset_statistics: whether the config takes OpenVLA's dataset statistics (``norm_stats``, a
            ``dataset_statistics.json``): actions binned over each dimension's [q01, q99], not [-1, 1].
    """

    name: str
    config: type | str
    policy: type | str
    config_from_dict: Callable[[dict[str, Any]], Any]
    build: Callable[[Any], Any]
    load: Callable[..., Any] | str
    detect_checkpoint: Callable[[Path], bool]
    checkpoint_layouts: tuple[str, ...] = ()
    fsdp_wrap_classes: tuple[str, ...] = ()
    settings_keys: frozenset[str] = frozenset()
    unread_settings: Mapping[str, Any] = field(default_factory=dict)
    check_settings: Callable[[Mapping[str, Any], str], list[str]] = _no_errors
    config_from_settings: Callable[[Mapping[str, Any]], Any] = _no_config_from_settings
    load_settings: Callable[[Mapping[str, Any]], dict[str, Any]] = _no_load_settings
    saved_config_defaults: Mapping[str, Any] = field(default_factory=dict)
    saved_architecture: Callable[[Mapping[str, Any]], dict[str, Any]] = architecture_settings
    fixed_image_size: bool = True
    states_without_proprio: bool = True
    reads_robot_platform: bool = False
    reads_dataset_statistics: bool = False

    @cached_property
    def config_class(self) -> type:
        return _resolve(self.config)  # type: ignore[no-any-return]

    @cached_property
    def policy_class(self) -> type:
        return _resolve(self.policy)  # type: ignore[no-any-return]

    @cached_property
    def loader(self) -> Callable[..., Any]:
        return _resolve(self.load)  # type: ignore[no-any-return]


_FAMILIES: dict[str, ModelFamily] = {}
_DISCOVERED = False


def _discover() -> None:
    """Import every ``vla_models.family_*`` module once (each registers its family)."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    here = [str(Path(__file__).parent)]  # this package's folder (not `vla_models.__path__`: no import back)
    names = sorted(m.name for m in pkgutil.iter_modules(here) if m.name.startswith("family_"))
    for name in names:
        importlib.import_module(f"vla_models.{name}")


def register_family(family: ModelFamily) -> ModelFamily:
    """Add ``family`` (a name registered twice with different records is an error); returns it."""
    known = _FAMILIES.get(family.name)
    if known is not None and known is not family:
        raise ValueError(f"model family {family.name!r} is already registered")
    _FAMILIES[family.name] = family
    return family


def unregister_family(name: str) -> None:
    """Remove a registered family (e.g. one a test registered)."""
    _FAMILIES.pop(name, None)


def families() -> tuple[ModelFamily, ...]:
    """Every registered family, by name: the order checkpoint detection tries them in, whatever order their
    modules were imported in (a published OpenVLA folder is any folder without a saved family, so the
    families with a specific layout, pi0's, come first)."""
    _discover()
    return tuple(sorted(_FAMILIES.values(), key=lambda f: f.name))


def family_names() -> tuple[str, ...]:
    """The ``model_type`` values of every registered family, sorted."""
    return tuple(sorted(f.name for f in families()))


def get_family(name: Any) -> ModelFamily:
    """The family registered as ``name``; an unknown name is a one-line ValueError listing the known ones."""
    _discover()
    family = _FAMILIES.get(name) if isinstance(name, str) else None
    if family is None:
        raise ValueError(
            f"model_type={name!r} is not a known model family; known: {', '.join(family_names())}"
        )
    return family


def family_of_config(config: Any) -> ModelFamily:
    """The family of a typed config (its class's ``family`` name)."""
    name = getattr(type(config), "family", None)
    if not isinstance(name, str):
        raise TypeError(f"{type(config).__name__} is not a model config (it names no family)")
    family = get_family(name)
    if not isinstance(config, family.config_class):
        raise TypeError(
            f"{type(config).__name__} names family {name!r}, whose config class is {family.config_class.__name__}"
        )
    return family


def family_for_checkpoint(path: str | Path, model_type: str | None = None) -> ModelFamily | None:
    """The family named ``model_type``, else the first whose ``detect_checkpoint`` accepts the folder, else None."""
    if model_type is not None:
        return get_family(model_type)
    p = Path(path)
    for f in families():
        if f.detect_checkpoint(p):
            return f
    return None


def fsdp_wrap_classes() -> tuple[str, ...]:
    """Block class names of every registered family."""
    out: list[str] = []
    for f in families():
        out += [c for c in f.fsdp_wrap_classes if c not in out]
    return tuple(out)


def check_one_of(key: str, value: Any, allowed: tuple[str, ...]) -> list[str]:
    """``["key='v' is not one of: a, b"]`` if ``value`` is not allowed, else [] (for ``check_settings``)."""
    return [] if value in allowed else [f"{key}={value!r} is not one of: {', '.join(allowed)}"]


def check_at_least(key: str, value: Any, low: float) -> list[str]:
    """``["key=v is invalid: must be >= low"]`` unless ``value >= low`` (for ``check_settings``)."""
    return [] if value >= low else [f"{key}={value!r} is invalid: must be >= {low}"]


def registered_families() -> dict[str, ModelFamily]:
    """Name -> family of every registered family."""
    return {f.name: f for f in families()}
