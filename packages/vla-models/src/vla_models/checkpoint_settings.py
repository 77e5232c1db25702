"""The settings a checkpoint folder fixes (its architecture): a loaded folder sets them, and a user value that
differs is an error naming the key and both values. Imports nothing of the package (the family registry reads
:data:`ARCHITECTURE_KEYS`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

# settings that describe the architecture: a loaded folder fixes them, and a differing user value is an error
ARCHITECTURE_KEYS = (
    "model_type",
    "action_dim",
    "num_action_chunks",
    "n_action_bins",
    "use_proprio",
    "proprio_dim",
    "num_images_in_input",
    "use_film",
    "action_query",
    "implement_version",
    "image_size",
    "patch_size",
    "hidden_size",
    "vision_stem",
)


def architecture_settings(saved: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture keys of a saved config block (``ModelFamily.saved_architecture``'s default)."""
    return {k: v for k, v in saved.items() if k in ARCHITECTURE_KEYS}


def contradiction(path: Path, key: str, value: Any, saved: Any) -> ValueError:
    """The error for a setting ``key=value`` that the checkpoint at ``path``, which has ``saved``, contradicts."""
    return ValueError(
        f"{key}={value!r} contradicts the checkpoint at {path}, which has {key}={saved!r}; "
        f"set {key}: {saved!r} or leave it unset"
    )


def check_against(path: Path, given: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    """Raise :func:`contradiction` for the first setting in ``given`` that differs from the folder's ``facts``
    (None on either side agrees with anything)."""
    for key, value in given.items():
        if key in facts and facts[key] is not None and value is not None and value != facts[key]:
            raise contradiction(path, key, value, facts[key])
