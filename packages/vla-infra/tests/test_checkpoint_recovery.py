"""An overwrite killed between its two renames: the complete copy is moved back into place, not deleted."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from vla_infra.checkpoint import (
    checkpoint_dir,
    is_complete,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


def _half_done_overwrite(root: Path, *, new_complete: bool) -> Path:
    """On disk: step 5 (w = 1) renamed to ``.old-*`` and its replacement (w = 2) still at ``.tmp-*``, exactly
    what ``save_checkpoint(..., overwrite=True)`` leaves when killed between its two renames."""
    final = save_checkpoint(checkpoint_dir(root, 5), {"w": torch.full((3,), 1.0)}, trainer_state={"step": 5})
    save_checkpoint(checkpoint_dir(root, 2), {"w": torch.zeros(3)}, trainer_state={"step": 2})
    tmp = save_checkpoint(
        root / "global_step_5.tmp-0a1b", {"w": torch.full((3,), 2.0)}, trainer_state={"step": 5}
    )
    if not new_complete:  # killed before the new copy's COMPLETE marker was written
        (tmp / "COMPLETE").unlink()
    os.rename(final, root / "global_step_5.old-0a1b")
    return final


def test_interrupted_overwrite_recovers_the_new_copy(tmp_path: Path) -> None:
    final = _half_done_overwrite(tmp_path, new_complete=True)
    assert latest_checkpoint(tmp_path) == final and is_complete(final)
    assert torch.equal(load_checkpoint(final).model_state["w"], torch.full((3,), 2.0))  # type: ignore[index]
    # the stale old copy is left for the operator; it is never taken for a checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "global_step_2",
        "global_step_5",
        "global_step_5.old-0a1b",
    ]


def test_interrupted_overwrite_with_incomplete_new_copy_recovers_the_old(tmp_path: Path) -> None:
    final = _half_done_overwrite(tmp_path, new_complete=False)
    assert latest_checkpoint(tmp_path) == final
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "global_step_2",
        "global_step_5",
        "global_step_5.tmp-0a1b",
    ]
    assert torch.equal(load_checkpoint(final).model_state["w"], torch.full((3,), 1.0))  # type: ignore[index]
