"""`vla_infra.dist` sums over nccl (two GPUs): they must run on the GPU, nccl has no CPU collectives."""

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
import torch

from vla_infra.dist import all_reduce_sum, all_reduce_sums, gather_objects
from vla_infra.fsdp import spawn_local_group


def reduce(rank, world_size):
    out = all_reduce_sums({"a": float(rank + 1), "b": 0.5})
    assert out == {"a": 3.0, "b": 1.0}, out
    total = all_reduce_sum(torch.tensor([rank + 1.0]))
    assert total.device.type == "cpu" and total.tolist() == [3.0], total
    assert gather_objects(rank) == [0, 1]


if __name__ == "__main__":
    spawn_local_group(reduce, world_size=2, backend="nccl")
    print("ok")
"""


def test_sums_and_gathers_over_nccl_ranks(tmp_path: Path) -> None:
    script = tmp_path / "reduce_nccl.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
