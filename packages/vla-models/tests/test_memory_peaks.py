"""Save and reload hold one copy of the weights: the peak resident memory of each, measured in a fresh process
(memory_child.py) on a ~200 MB bf16 model with LoRA on every decoder projection.

A reload that builds the model and then copies the folder's tensors into it rises by two copies (three when it
builds in float32 first); a save that merges every LoRA weight before writing rises by one more copy. These
bounds leave room for one tensor and the allocator, not for a second copy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("memory_child.py")
FAMILIES = ("openvla", "pi0")
RELOAD_RISE = 1.3  # x the weights: one copy, plus reading buffers
SAVE_RISE = 0.3  # x the weights: one merged tensor at a time

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc/self/clear_refs"
)


@pytest.fixture(scope="module")
def peaks(tmp_path_factory) -> dict[str, dict]:
    out = {}
    for family in FAMILIES:
        folder = tmp_path_factory.mktemp(family)
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "OMP_NUM_THREADS": "1"}
        proc = subprocess.run(
            [sys.executable, str(CHILD), family, str(folder / "saved")],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[family] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_reload_holds_one_copy_of_the_weights(peaks, family: str) -> None:
    r = peaks[family]
    assert r["weights"] > 150e6, r  # large enough that a second copy stands far above the noise
    assert r["meta"] == [], r  # every weight came from the folder
    loaded = r["reloaded_weights"]  # merged: no adapters
    assert r["reload_rise"] <= RELOAD_RISE * loaded, (
        f"{family}: reload rose {r['reload_rise'] / 1e6:.0f} MB for {loaded / 1e6:.0f} MB of weights"
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_save_holds_one_merged_tensor_at_a_time(peaks, family: str) -> None:
    r = peaks[family]
    assert r["save_rise"] <= SAVE_RISE * r["weights"], (
        f"{family}: save rose {r['save_rise'] / 1e6:.0f} MB for {r['weights'] / 1e6:.0f} MB of weights"
    )
