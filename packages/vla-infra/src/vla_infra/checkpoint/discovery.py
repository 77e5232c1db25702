"""Finding the newest complete checkpoint under a root, after moving back a copy an interrupted overwrite left."""

from __future__ import annotations

import os
from pathlib import Path

from vla_infra.checkpoint.files import LEFTOVER_DIR, MANIFEST, STEP_DIR, fsync_dir, read_json
from vla_infra.checkpoint.verify import checkpoint_problem, is_complete


def _recover_interrupted_overwrites(base: Path) -> list[Path]:
    """Rename a complete ``<dir>.tmp-*`` (preferred: the newer copy) or ``<dir>.old-*`` back to ``<dir>``
    where ``<dir>`` is missing (an overwrite killed between its two renames); returns the recovered dirs.

    Call it while no save into ``base`` is in flight."""
    candidates: dict[str, list[tuple[bool, float, str, Path]]] = {}
    for entry in base.iterdir():
        match = LEFTOVER_DIR.match(entry.name)
        if match and entry.is_dir() and not (base / match["final"]).exists() and is_complete(entry):
            try:
                created = float(read_json(entry / MANIFEST).get("created_unix") or 0.0)
            except (OSError, ValueError, TypeError):
                created = 0.0
            candidates.setdefault(match["final"], []).append(
                (match["kind"] == "tmp", created, entry.name, entry)
            )
    recovered = []
    for final, found in candidates.items():
        source = max(found)[3]
        try:
            os.rename(source, base / final)
        except OSError:  # the final name appeared meanwhile (a save finished its rename)
            continue
        recovered.append(base / final)
    if recovered:
        fsync_dir(base)
    return recovered


def latest_checkpoint(
    root: str | os.PathLike[str], *, verify: bool = False, skipped: list[str] | None = None
) -> Path | None:
    """The complete ``global_step_<N>`` directory under ``root`` with the largest N, or None.

    With ``verify=True`` the files' checksums are compared too; a damaged checkpoint is skipped and the newest
    intact one is returned. Each newer checkpoint passed over adds its :func:`checkpoint_problem` line to
    ``skipped`` (when given). A checkpoint whose overwrite was interrupted between its two renames is first moved
    back into place."""
    base = Path(root)
    if not base.is_dir():
        return None
    _recover_interrupted_overwrites(base)
    found = []
    for entry in base.iterdir():
        match = STEP_DIR.match(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry))
    for _, entry in sorted(found, reverse=True):
        problem = checkpoint_problem(entry, checksums=verify)
        if problem is None:
            return entry
        if skipped is not None:
            skipped.append(problem)
    return None
