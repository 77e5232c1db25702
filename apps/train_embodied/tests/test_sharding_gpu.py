"""Metric reduction of a sharded actor over nccl (two GPUs): the sum must run on the GPU, nccl has no CPU
collectives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs"),
]

# spawn_local_group pickles its function by name: run it from a script (importable as __main__ in the children)
SCRIPT = """
from train_embodied.sharding import all_reduce_sums
from vla_infra.fsdp import spawn_local_group


def reduce(rank, world_size):
    out = all_reduce_sums({"a": float(rank + 1), "b": 0.5})
    assert out == {"a": 3.0, "b": 1.0}, out


if __name__ == "__main__":
    spawn_local_group(reduce, world_size=2, backend="nccl")
    print("ok")
"""


def test_metrics_are_summed_over_nccl_ranks(tmp_path: Path) -> None:
    script = tmp_path / "reduce_nccl.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
