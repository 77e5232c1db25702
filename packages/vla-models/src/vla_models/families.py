"""Model-family registry: each family folder registers its config class, policy class, how it builds and loads,
which checkpoint layouts it reads and which block classes FSDP wraps one by one.

The shared entry points (``config_from_dict``, ``build_policy``, ``load_policy``) look families up here, so the
shared code imports no family; a family registers itself when its package is imported (``vla_models``'s
``__init__`` imports every family).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ModelFamily:
    """What the shared entry points need to know about one family.

    Attributes:
        name: ``model_type`` value.
        config_class / policy_class: its typed config and policy.
        config_from_dict: a flat (app) dict -> config.
        build: config -> policy with random weights (or loaded from ``config.model_path``).
        load: ``(path, **overrides)`` -> policy.
        detect_checkpoint: whether a folder holds one of this family's layouts.
        checkpoint_layouts: names of the layouts ``load`` reads.
        fsdp_wrap_classes: module class names FSDP shards one by one.
    """

    name: str
    config_class: type
    policy_class: type
    config_from_dict: Callable[[dict[str, Any]], Any]
    build: Callable[[Any], Any]
    load: Callable[..., Any]
    detect_checkpoint: Callable[[Path], bool]
    checkpoint_layouts: tuple[str, ...] = ()
    fsdp_wrap_classes: tuple[str, ...] = ()


_FAMILIES: dict[str, ModelFamily] = {}


def register_family(family: ModelFamily) -> None:
    _FAMILIES[family.name] = family


def registered_families() -> dict[str, ModelFamily]:
    return dict(_FAMILIES)


def family_of_config(config: Any) -> ModelFamily | None:
    for f in _FAMILIES.values():
        if isinstance(config, f.config_class):
            return f
    return None


def family_for_checkpoint(path: str | Path, model_type: str | None = None) -> ModelFamily | None:
    """The registered family named ``model_type``, else the one whose layout the folder holds, else None."""
    if model_type is not None:
        return _FAMILIES.get(model_type)
    p = Path(path)
    for f in _FAMILIES.values():
        if f.detect_checkpoint(p):
            return f
    return None


def fsdp_wrap_classes() -> tuple[str, ...]:
    """Block class names of every registered family."""
    out: list[str] = []
    for f in _FAMILIES.values():
        out += [c for c in f.fsdp_wrap_classes if c not in out]
    return tuple(out)
