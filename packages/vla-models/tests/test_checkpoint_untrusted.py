"""Model folders from others: nothing loads silently wrong and nothing in a folder runs code.

A folder written by ``save_pretrained`` carries a sha256 per file (verified on load: a flipped byte is named);
a manifest without checksums is refused; every folder, with or without a manifest, gets its tensors' dtypes
checked against ``config.json`` (a tensor relabelled to another dtype with the same bytes is named) and its
values checked for NaN/inf (named). A hostile pickle planted in any file runs nothing.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from vla_models import OpenVLAOFTConfig, build_policy, check_checkpoint, load_policy
from vla_models.checkpoint_files import MODEL_MANIFEST, write_model_manifest
from vla_models.openpi import OpenPiConfig


class _Hostile:
    """Unpickling it creates the file `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _weights(folder: Path) -> Path:
    return next(f for f in sorted(folder.glob("model*.safetensors")) if f.is_file())


def _oft(folder: Path, precision: str = "fp32") -> Path:
    torch.manual_seed(0)
    build_policy(OpenVLAOFTConfig.tiny(action_dim=4, precision=precision)).save_pretrained(folder)
    return folder


def _relabel(file: Path, name: str, dtype: str) -> None:
    """Give tensor `name` another dtype in the safetensors header, keeping its bytes."""
    data = file.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header[name]["dtype"] = dtype
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= n
    file.write_bytes(data[:8] + text + b" " * (n - len(text)) + data[8 + n :])  # same size, same bytes after


def test_saved_folder_lists_every_file_with_its_sha256(tmp_path: Path) -> None:
    folder = _oft(tmp_path / "m")
    manifest = json.loads((folder / MODEL_MANIFEST).read_text())
    files = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} - {MODEL_MANIFEST}
    assert set(manifest["files"]) == files and "config.json" in files
    assert all(len(entry["sha256"]) == 64 for entry in manifest["files"].values())


def test_a_flipped_byte_is_named(tmp_path: Path) -> None:
    folder = _oft(tmp_path / "m")
    file = _weights(folder)
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside a tensor: the file still parses and every value is finite
    file.write_bytes(bytes(data))
    for check in (load_policy, check_checkpoint):
        with pytest.raises(ValueError, match=f"{file} is altered: its sha256 differs"):
            check(folder)


def test_a_manifest_without_checksums_is_refused(tmp_path: Path) -> None:
    folder = _oft(tmp_path / "m")
    manifest = json.loads((folder / MODEL_MANIFEST).read_text())
    manifest["files"] = {rel: {"size": e["size"]} for rel, e in manifest["files"].items()}
    (folder / MODEL_MANIFEST).write_text(json.dumps(manifest))
    for check in (load_policy, check_checkpoint):
        with pytest.raises(ValueError, match=r"has no sha256 for .*: the folder cannot be verified"):
            check(folder)


@pytest.mark.parametrize(("precision", "relabel"), [("fp32", "I32"), ("bf16", "F16")])
@pytest.mark.parametrize("manifest", ["kept", "removed"])
def test_a_relabelled_dtype_is_named(tmp_path: Path, precision: str, relabel: str, manifest: str) -> None:
    folder = _oft(tmp_path / "m", precision)
    file = _weights(folder)
    name = "projector.fc1.weight"
    _relabel(file, name, relabel)
    if manifest == "removed":  # a folder from others: no manifest, the dtype check still holds
        (folder / MODEL_MANIFEST).unlink()
        expected = f"tensor {name} has dtype"
    else:
        expected = "is altered"
    for check in (load_policy, check_checkpoint):
        with pytest.raises(ValueError, match=expected) as info:
            check(folder)
        assert "\n" not in str(info.value)
    if manifest == "removed":
        declared = {"fp32": "float32", "bf16": "bfloat16"}[precision]
        assert f"config.json declares {declared}" in str(info.value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("manifest", ["rewritten", "removed"])
def test_non_finite_weights_are_named(tmp_path: Path, bad: float, manifest: str) -> None:
    folder = _oft(tmp_path / "m")
    file = _weights(folder)
    sd = load_file(str(file))
    sd["projector.fc2.bias"][3] = bad
    save_file(sd, str(file))
    if manifest == "removed":
        (folder / MODEL_MANIFEST).unlink()
    else:  # sealed after the damage: the checksums pass, the values do not
        write_model_manifest(folder)
    with pytest.raises(ValueError, match=r"tensor projector.fc2.bias holds 1 non-finite value\(s\)"):
        load_policy(folder)


def _pi0(folder: Path) -> Path:
    torch.manual_seed(0)
    build_policy(OpenPiConfig.tiny(action_dim=4)).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("family", ["openvla_oft", "pi0"])
def test_a_hostile_pickle_in_any_file_runs_nothing(tmp_path: Path, family: str) -> None:
    payload = pickle.dumps(_Hostile(tmp_path / "ran"))
    pickle.loads(pickle.dumps(_Hostile(tmp_path / "live")))  # the payload works when unpickled
    assert (tmp_path / "live").exists()
    make = _oft if family == "openvla_oft" else _pi0
    files = [p.name for p in make(tmp_path / "probe").iterdir() if p.is_file() and p.name != MODEL_MANIFEST]
    extra = ["pytorch_model.bin", "training_args.bin", "optimizer.pt", "rng_state.pth"]
    for name in files:
        folder = make(tmp_path / name)
        (folder / name).write_bytes(payload)
        for other in extra:  # pickle-format files beside the weights are never opened
            (folder / other).write_bytes(payload)
        (folder / MODEL_MANIFEST).unlink(missing_ok=True)
        with pytest.raises((ValueError, FileNotFoundError, OSError)) as info:
            load_policy(folder)
        assert "\n" not in str(info.value).strip(), name
        assert not (tmp_path / "ran").exists(), name
    folder = make(tmp_path / "extras_only")
    for other in extra:
        (folder / other).write_bytes(payload)
    (folder / MODEL_MANIFEST).unlink(missing_ok=True)
    load_policy(folder)
    assert not (tmp_path / "ran").exists()
