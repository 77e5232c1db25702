"""Checkpoint folders of every family: ``load_policy`` (the folder's model family, from the registry, reads it)
and ``check_checkpoint`` (what loading would refuse, found without decoding a tensor).

A folder written by ``save_pretrained`` holds its weights as safetensors (checked on reading by
``vla_models.checkpoint_files``), a ``config.json`` whose ``vla_models`` block is the full typed config (its
``family`` names the family), and a ``manifest.json`` with every file's size and sha256. The families' own layouts
(OpenVLA's in ``vla_models.prismatic.checkpoint_prismatic``, openpi's in ``vla_models.openpi.checkpoint_openpi``)
also read folders published by others. This module imports no family: it asks ``vla_models.families``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vla_models.checkpoint_files import check_weight_headers, read_json, verify_model_manifest
from vla_models.checkpoint_settings import ARCHITECTURE_KEYS, architecture_settings, check_against
from vla_models.families import family_for_checkpoint, family_names, registered_families


def load_policy(path: str | Path, **overrides: Any) -> Any:
    """Load a policy from a local checkpoint folder: the family named ``model_type``, else the first registered
    family whose layouts the folder holds (``vla_models.families``), reads it with ``overrides``.

    Raises:
        FileNotFoundError: no such folder, or one no family reads that lacks ``config.json``.
        ValueError: ``model_type`` names no family, a malformed ``config.json``, or a folder no family reads.
    """
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"checkpoint folder {p} does not exist")
    family = family_for_checkpoint(p, overrides.get("model_type"))
    if family is None:
        raise _unreadable(p)
    return family.loader(p, **overrides)


def _unreadable(p: Path) -> Exception:
    """The error for a folder no registered family reads, naming what is wrong with its ``config.json``."""
    d = read_json(p / "config.json")
    if not isinstance(d, dict):
        return ValueError(f"{p / 'config.json'} does not hold a JSON object")
    names = ", ".join(family_names())
    saved = d.get("vla_models")
    if isinstance(saved, dict):
        return ValueError(
            f"unknown model family {saved.get('family')!r} in {p / 'config.json'}; allowed: {names}"
        )
    return ValueError(f"{p} holds no checkpoint layout of a known model family ({names})")


def saved_settings(
    saved: Mapping[str, Any], default_family: str
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A saved config block (``config.json``'s ``vla_models``) -> ``(family, config fields, architecture facts)``:
    the family it names (``default_family`` when it names none), its fields with the defaults that family implies
    for the ones it lacks (``ModelFamily.saved_config_defaults``), and the architecture settings they fix
    (``ModelFamily.saved_architecture``, plus ``model_type``)."""
    fields = dict(saved)
    family = str(fields.pop("family", default_family))
    record = registered_families().get(family)
    if record is not None:
        for key, value in record.saved_config_defaults.items():
            fields.setdefault(key, value)
    facts = record.saved_architecture(fields) if record is not None else architecture_settings(fields)
    facts["model_type"] = family
    return family, fields, facts


def check_checkpoint(path: str | Path, **settings: Any) -> None:
    """What ``load_policy(path, **settings)`` would refuse that the folder shows without decoding its tensors: a
    missing folder, ``config.json`` or weights file, a file that is not valid JSON, a folder no known family
    reads (a ``config.json`` of another model family), the manifest's sizes and sha256 (reads every listed file
    once), a safetensors header that is cut or malformed, a tensor dtype other than the one ``config.json``
    declares, and (for a folder written by ``save_pretrained``) an architecture setting the saved config
    contradicts. Meant for validating a run's configuration before anything is built; ``load_policy`` still
    checks everything (tensor shapes and values too).

    Raises:
        FileNotFoundError: no such directory, no ``config.json``, or no weights.
        ValueError: a malformed file, an unknown family or a contradicted setting (naming the key and both
            values), an altered file or a wrong dtype (naming the file or the tensor).
    """
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"checkpoint folder {p} does not exist")
    d = read_json(p / "config.json")
    if not isinstance(d, dict):
        raise ValueError(f"{p / 'config.json'} does not hold a JSON object")
    verify_model_manifest(p)
    check_weight_headers(p)
    detected = family_for_checkpoint(p)
    if detected is None:
        raise _unreadable(p)
    if not isinstance(d.get("vla_models"), dict):
        return  # a published folder: its architecture is read from its tensors by load_policy
    _, _, facts = saved_settings(d["vla_models"], detected.name)
    given = {k: v for k, v in settings.items() if k in ARCHITECTURE_KEYS}
    check_against(p, given, facts)
