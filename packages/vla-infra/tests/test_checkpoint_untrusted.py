"""Checkpoints from others: nothing in a checkpoint folder can run code on load (a hostile pickle planted in any
file, its manifest updated so the checksums pass, runs nothing and is refused with one line), a checkpoint of
another model size or world size is one line naming the tensor or the sizes, and a save that fails on a full
disk removes its temporary folder and leaves older checkpoints intact."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
from pathlib import Path

import pytest
import torch
from torch import nn

import vla_infra.checkpoint.state_files as ckpt_mod
from vla_infra.checkpoint import (
    MANIFEST,
    CheckpointError,
    CheckpointSaveError,
    checkpoint_dir,
    checkpoint_tensor_shapes,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


class _Hostile:
    """Unpickling it creates the file `marker` (what a hostile checkpoint would do instead)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _save(root: Path, step: int = 1, width: int = 3) -> Path:
    torch.manual_seed(step)
    model = nn.Linear(4, width)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(2, 4)).sum().backward()
    optim.step()
    return save_checkpoint(checkpoint_dir(root, step), model, optim, {"step": step, "history": [1.5]})


def _reseal(ckpt: Path) -> None:
    """Rewrite the manifest for the folder's current files: the checksums no longer catch a replaced file."""
    manifest = json.loads((ckpt / MANIFEST).read_text())
    paths = [p for p in sorted(ckpt.rglob("*")) if p.is_file() and p.name not in (MANIFEST, "COMPLETE")]
    manifest["files"] = {str(p.relative_to(ckpt)): p.stat().st_size for p in paths}
    manifest["sha256"] = {str(p.relative_to(ckpt)): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}
    (ckpt / MANIFEST).write_text(json.dumps(manifest))


def _payloads(marker: Path, tmp: Path) -> dict[str, bytes]:
    """A raw pickle and a torch.save zip, both running `touch marker` when unpickled."""
    torch.save(_Hostile(marker), tmp / "hostile.pt")
    return {"pickle": pickle.dumps(_Hostile(marker)), "torch-save": (tmp / "hostile.pt").read_bytes()}


def test_the_planted_payload_is_live(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    pickle.loads(_payloads(marker, tmp_path)["pickle"])
    assert marker.exists()


FILES = ["model.safetensors", "state/trainer.json", "state/trainer.safetensors", "state/rank0.json",
         "state/rank0.safetensors"]  # fmt: skip


@pytest.mark.parametrize("kind", ["pickle", "torch-save"])
@pytest.mark.parametrize("name", FILES)
def test_a_hostile_pickle_in_any_file_runs_nothing(tmp_path: Path, name: str, kind: str) -> None:
    ckpt = _save(tmp_path / "run")
    assert {str(p.relative_to(ckpt)) for p in ckpt.rglob("*") if p.is_file()} == {
        *FILES,
        MANIFEST,
        "COMPLETE",
    }
    marker = tmp_path / "ran"
    (ckpt / name).write_bytes(_payloads(marker, tmp_path)[kind])
    _reseal(ckpt)
    model = nn.Linear(4, 3)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(ckpt, model=model, optimizer=torch.optim.AdamW(model.parameters()))
    assert name in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(CheckpointError):
        checkpoint_tensor_shapes(ckpt)
    assert not marker.exists()


def test_hostile_files_beside_the_checkpoint_are_never_opened(tmp_path: Path) -> None:
    """DCP's and torch.save's file names (`.metadata`, `__0_0.distcp`, `*.pt`), listed in the manifest."""
    ckpt = _save(tmp_path / "run")
    marker = tmp_path / "ran"
    payload = _payloads(marker, tmp_path)
    for name in ("state/.metadata", "state/__0_0.distcp", "optimizer.pt", "trainer_state.pt"):
        (ckpt / name).write_bytes(payload["pickle"] if name.startswith("state") else payload["torch-save"])
    _reseal(ckpt)
    model = nn.Linear(4, 3)
    loaded = load_checkpoint(ckpt, model=model, optimizer=torch.optim.AdamW(model.parameters()))
    assert loaded.trainer_state == {"step": 1, "history": [1.5]}
    assert not marker.exists()


def test_a_checkpoint_in_the_pickle_based_format_is_refused(tmp_path: Path) -> None:
    ckpt = _save(tmp_path)
    manifest = json.loads((ckpt / MANIFEST).read_text())
    manifest["format_version"] = 1
    (ckpt / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"format 1 .*pickle"):
        load_checkpoint(ckpt)
    assert latest_checkpoint(tmp_path, verify=True) is None


def test_another_model_size_names_the_tensor(tmp_path: Path) -> None:
    ckpt = _save(tmp_path, width=5)
    model = nn.Linear(4, 3)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(ckpt, model=model, optimizer=torch.optim.AdamW(model.parameters()))
    assert str(info.value) == (
        f"{ckpt / 'model.safetensors'}: tensor bias has shape [5], the model's is [3] "
        "(a checkpoint of another model size)"
    )
    assert checkpoint_tensor_shapes(ckpt) == {"bias": [5], "weight": [5, 4]}


def test_another_world_size_is_refused_with_both_sizes(tmp_path: Path) -> None:
    ckpt = _save(tmp_path)
    manifest = json.loads((ckpt / MANIFEST).read_text())
    manifest["world_size"] = 2
    (ckpt / MANIFEST).write_text(json.dumps(manifest))
    model = nn.Linear(4, 3)
    with pytest.raises(CheckpointError, match="saved by 2 rank\\(s\\) and is loaded by 1"):
        load_checkpoint(ckpt, model=model, optimizer=torch.optim.AdamW(model.parameters()))
    assert load_checkpoint(ckpt, model=model).trainer_state["step"] == 1  # weights alone still load


def test_state_round_trips_without_pickle(tmp_path: Path) -> None:
    """Tuples, numpy arrays, non-string keys and tensors in the trainer state come back as they were saved."""
    import numpy as np

    state = {"step": 3, "pair": (1, "a"), "arr": np.arange(3, dtype=np.uint32), 7: {"t": torch.ones(2)}}
    ckpt = save_checkpoint(tmp_path / "c", {"w": torch.zeros(1)}, trainer_state=state)
    back = load_checkpoint(ckpt).trainer_state
    assert back["pair"] == (1, "a") and back["arr"].dtype == np.uint32 and list(back["arr"]) == [0, 1, 2]
    assert torch.equal(back[7]["t"], torch.ones(2))
    with pytest.raises(TypeError, match=r"trainer\.bad is a object"):
        save_checkpoint(tmp_path / "d", {"w": torch.zeros(1)}, trainer_state={"bad": object()})
    assert not list(tmp_path.glob("d.tmp-*"))


def test_a_full_disk_removes_the_temporary_folder_and_keeps_older_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _save(tmp_path, step=1)
    before = {p: p.read_bytes() for p in first.rglob("*") if p.is_file()}
    real = ckpt_mod.save_file

    def full_disk(tensors, filename, metadata=None):
        if filename.endswith("rank0.safetensors"):  # the model file is already written: a half-done folder
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(ckpt_mod, "save_file", full_disk)
    with pytest.raises(CheckpointSaveError) as info:
        _save(tmp_path, step=2)
    message = str(info.value)
    assert "\n" not in message and str(checkpoint_dir(tmp_path, 2)) in message
    assert "No space left on device" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_1"]
    assert {p: p.read_bytes() for p in first.rglob("*") if p.is_file()} == before
    assert latest_checkpoint(tmp_path, verify=True) == first


@pytest.mark.parametrize("name", [MANIFEST, "state/trainer.json"])
def test_json_nested_past_the_parsers_depth_is_one_line(tmp_path: Path, name: str) -> None:
    ckpt = _save(tmp_path)
    assert (ckpt / name).is_file()
    (ckpt / name).write_text("[" * 100_000 + "]" * 100_000)
    if name != MANIFEST:
        _reseal(ckpt)  # the checksums pass: the parser meets the nesting
    with pytest.raises(CheckpointError, match=r"nests deeper than the JSON parser allows"):
        load_checkpoint(ckpt, model=nn.Linear(4, 3))
    if name == MANIFEST:  # the search for the newest checkpoint passes over it with the same line
        skipped: list[str] = []
        assert latest_checkpoint(tmp_path, skipped=skipped) is None
        assert "nests deeper than the JSON parser allows" in skipped[0]
