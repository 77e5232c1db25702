"""Checkpoint integrity: every file's size and sha256 are recorded; a truncated, altered or missing file is found
at load with one line naming it; `latest_checkpoint(verify=True)` falls back to the newest intact checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from vla_infra.checkpoint import (
    MANIFEST,
    MODEL_FILE,
    CheckpointError,
    checkpoint_dir,
    checkpoint_problem,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


def _save(root: Path, step: int) -> Path:
    torch.manual_seed(step)
    model = nn.Linear(4, 3)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(2, 4)).sum().backward()
    optim.step()
    return save_checkpoint(checkpoint_dir(root, step), model, optim, {"step": step})


def _state_file(ckpt: Path) -> Path:
    return ckpt / "state" / "rank0.safetensors"


def test_manifest_records_a_checksum_of_every_file(tmp_path: Path) -> None:
    ckpt = _save(tmp_path, 1)
    manifest = json.loads((ckpt / MANIFEST).read_text())
    assert set(manifest["sha256"]) == set(manifest["files"]) and MODEL_FILE in manifest["sha256"]
    assert checkpoint_problem(ckpt) is None
    assert load_checkpoint(ckpt, model=nn.Linear(4, 3)).step == 1


@pytest.mark.parametrize("damage", ["truncate_model", "alter_model", "truncate_state", "remove_state"])
def test_damaged_file_is_named_at_load(tmp_path: Path, damage: str) -> None:
    ckpt = _save(tmp_path, 1)
    target = ckpt / MODEL_FILE if damage.endswith("model") else _state_file(ckpt)
    data = target.read_bytes()
    if damage.startswith("truncate"):
        target.write_bytes(data[: len(data) // 2])
    elif damage == "alter_model":  # same size, one byte of the tensor data flipped
        target.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    else:
        target.unlink()
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(ckpt, model=nn.Linear(4, 3))
    message = str(info.value)
    assert "\n" not in message and str(target) in message
    expected = {"truncate": "is truncated or altered", "alter": "is altered", "remove": "is missing"}
    assert expected[damage.split("_")[0]] in message


def test_latest_checkpoint_falls_back_to_the_newest_intact_one(tmp_path: Path) -> None:
    first, second, third = (_save(tmp_path, s) for s in (1, 2, 3))
    (third / "COMPLETE").unlink()  # an interrupted save
    data = (second / MODEL_FILE).read_bytes()
    (second / MODEL_FILE).write_bytes(data[:-1] + bytes([data[-1] ^ 0x01]))  # altered, same size
    assert latest_checkpoint(tmp_path) == second  # sizes only: the altered file is not noticed
    skipped: list[str] = []
    assert latest_checkpoint(tmp_path, verify=True, skipped=skipped) == first
    assert len(skipped) == 2 and "global_step_3" in skipped[0] and "no COMPLETE marker" in skipped[0]
    assert f"{second / MODEL_FILE} is altered" in skipped[1]
    assert "no COMPLETE marker" in checkpoint_problem(third)
