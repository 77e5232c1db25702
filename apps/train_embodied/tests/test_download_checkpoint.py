"""scripts/download_checkpoint.py (the guides' `hf download`, through huggingface_hub) against a local hub cache,
offline: revision pinning, copy to a folder, the config key it prints, one line when the revision is not there.

The cache is laid out as huggingface_hub writes it (blobs, snapshots/<commit>, refs/<branch>); huggingface_hub
itself resolves it."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "download_checkpoint.py"
REPO_ID = "RLinf/RLinf-OpenVLAOFT-RoboTwin-SFT-place_empty_cup"
COMMIT = "5f1c0d2e3b4a69788796a5b4c3d2e1f00f1e2d3c"
FILES = {"config.json": b'{"model_type": "openvla"}', "dataset_statistics.json": b"{}"}


@pytest.fixture
def hub_cache(tmp_path: Path) -> Path:
    root = tmp_path / "hf" / "hub" / ("models--" + REPO_ID.replace("/", "--"))
    (root / "blobs").mkdir(parents=True)
    (root / "snapshots" / COMMIT).mkdir(parents=True)
    (root / "refs").mkdir()
    for name, data in FILES.items():
        blob = hashlib.sha256(data).hexdigest()
        (root / "blobs" / blob).write_bytes(data)
        os.symlink(f"../../blobs/{blob}", root / "snapshots" / COMMIT / name)
    (root / "refs" / "main").write_text(COMMIT)
    return tmp_path / "hf"


def _run(hf_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_pinned_and_default_revisions_resolve_offline(hub_cache: Path) -> None:
    for revision in ([], ["--revision", COMMIT]):
        out = _run(hub_cache, REPO_ID, *revision)
        assert out.returncode == 0, out.stderr
        snapshot = hub_cache / "hub" / ("models--" + REPO_ID.replace("/", "--")) / "snapshots" / COMMIT
        assert f"set: actor.model.model_path={snapshot}" in out.stdout
        assert f"pin it with --revision {COMMIT}" in out.stdout


def test_local_dir_gets_real_files(hub_cache: Path, tmp_path: Path) -> None:
    target = tmp_path / "RLinf-OpenVLAOFT-RoboTwin-SFT-place_empty_cup"
    out = _run(hub_cache, REPO_ID, "--local-dir", str(target))
    assert out.returncode == 0, out.stderr
    assert f"set: actor.model.model_path={target}" in out.stdout
    for name, data in FILES.items():
        assert not (target / name).is_symlink() and (target / name).read_bytes() == data


def test_missing_revision_is_one_line_saying_what_to_do(hub_cache: Path) -> None:
    out = _run(hub_cache, REPO_ID, "--revision", "v2")
    assert out.returncode == 1
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(
        f"download_checkpoint: {REPO_ID}@v2: it is not in the local cache and HF_HUB_OFFLINE"
    )
